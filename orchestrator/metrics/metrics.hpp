#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace fg::metrics {

// Every metric family of the gateway, declared in one place. Label values are bounded: models
// and endpoints the gateway knows, status codes, replica ids; never prompts, keys or client IPs.
class Metrics {
 public:
  Metrics();

  // The "api" label values whose answers report token usage, each declared at zero for every
  // model (the route table, orchestrator/proxy/public_routes.cpp, names the API of each route;
  // its counting routes, input_tokens and count_tokens, report none).
  static constexpr std::array<std::string_view, 6> kTokenApis = {
      "chat", "completions", "embeddings", "responses", "messages", "rerank"};

  // Called for each finished request. model is "" when the request named no configured model;
  // api is the route's api label ("chat", "responses", "messages", ...).
  void request_done(const std::string& model, const std::string& endpoint, const std::string& api,
                    unsigned code, double duration_s, double queue_wait_s,
                    double ttfb_s /* <0: none */);
  void retry(const std::string& model);
  void upstream_error(const std::string& model, const std::string& kind);
  void queue_rejection(const std::string& model, const std::string& reason);
  // A sheddable request refused at once (503 + Retry-After) because no slot was free for it.
  void request_shed(const std::string& model);
  // Tokens a replica reported for one request of the api: kind "prompt" or "completion".
  void tokens(const std::string& model, const std::string& api, const std::string& kind,
              double count);

  // Gauges that mirror state owned elsewhere are refreshed just before a scrape.
  void set_queue_depth(const std::string& model, double depth);
  void set_slots(const std::string& model, double busy, double free);
  void set_replicas(const std::string& model, const std::string& state, double count);
  void set_replicas_desired(const std::string& model, double desired);
  void set_degraded(const std::string& model, bool degraded);
  void set_replicas_ending(const std::string& model, double ending);
  void replica_state_change(const std::string& model, const std::string& to);
  // A replica's probe durations (fleetgate_replica_health_check_seconds). Looked up by label once
  // and kept by the caller: Family::Add builds and hashes a label map under a lock, which cost
  // ~2,400 instructions of every probe. Valid until forget_replica.
  prometheus::Histogram& health_check_series(const std::string& replica);

  // The server layer of a listener ("public", "admin"): a connection a cap refused (reason
  // max_connections or max_connections_per_ip), and what a session answered or dropped itself:
  // reason "write_timeout" (a client that stopped reading) or "exception" (a handler failed)
  // counts as a session failure, any other (an error code such as "invalid_api_key",
  // "header_timeout") as a request the session refused.
  void connection_rejected(const std::string& listener, const std::string& reason);
  void session_event(const std::string& listener, const std::string& reason);
  void set_open_connections(const std::string& listener, double open);

  // Per-replica series (bounded by fleet size; switched off by metrics.per_replica: false).
  // The counter of each (model, replica, outcome) is looked up by its labels once and kept: a
  // label lookup per attempt (Family::Add: a label map built, hashed and compared under the
  // family's lock, ~3,000 instructions with its allocations) was part of every request's cost.
  void replica_request(const std::string& model, const std::string& replica,
                       std::string_view outcome);
  void set_replica(const std::string& model, const std::string& replica, double in_flight,
                   double tokens_per_second);
  // The scheduler's learned speeds of a replica (tokens per second).
  void set_replica_speeds(const std::string& model, const std::string& replica, double prefill_tps,
                          double decode_tps);
  // The scheduler's prompt-cache model: blocks remembered and the bytes they cost.
  void set_prompt_cache(double blocks, double bytes);
  // How its predictions compared with what the replicas reported (PromptCacheModel::Stats), as
  // totals since start: answers compared, blocks predicted and reported cached over them, and
  // answers that reused less than half the prediction (under) or more than one block beyond it
  // (over).
  struct PromptCacheAccuracy {
    std::uint64_t reports = 0;
    std::uint64_t predicted_blocks = 0;
    std::uint64_t reported_blocks = 0;
    std::uint64_t under = 0;
    std::uint64_t over = 0;
  };
  void set_prompt_cache_accuracy(const PromptCacheAccuracy& totals);
  // TLS to the replicas (net::TlsSessions): replicas with tickets kept, and the handshakes made
  // since start, full and resumed (totals; the counters move by what they gained).
  void set_upstream_tls(double sessions, std::uint64_t full, std::uint64_t resumed);
  // Creates a configured model's series at zero, so that dashboards show 0 rather than "no
  // data" before the first event and rate() sees the first increment.
  void declare_model(const std::string& model);
  // Drops the model-level gauges of a model that left the configuration.
  void forget_model(const std::string& model);
  // Drops every series of a replica that left the fleet.
  void forget_replica(const std::string& model, const std::string& replica);

  // Requests finished and tokens (prompt + completion) reported per model since start, for the
  // status page's rates. Only models that named a configured model ("" is left out).
  struct ModelTotals {
    std::uint64_t requests = 0;
    std::uint64_t tokens = 0;
  };
  const std::map<std::string, ModelTotals>& totals() const { return totals_; }

  // Prometheus text exposition format.
  std::string scrape();
  // The one registry, for families declared beside this class (batch_metrics.hpp).
  prometheus::Registry& registry() { return *registry_; }
  std::function<void()> before_scrape;

 private:
  void update_process();
  struct ModelSeries {
    prometheus::Histogram* duration = nullptr;
    prometheus::Histogram* queue_wait = nullptr;
    prometheus::Histogram* ttfb = nullptr;
  };
  ModelSeries& model_series(const std::string& model);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& duration_;
  prometheus::Family<prometheus::Histogram>& ttfb_;
  prometheus::Family<prometheus::Histogram>& queue_wait_;
  prometheus::Family<prometheus::Counter>& retries_;
  prometheus::Family<prometheus::Counter>& upstream_errors_;
  prometheus::Family<prometheus::Counter>& queue_rejections_;
  prometheus::Family<prometheus::Counter>& requests_shed_;
  prometheus::Family<prometheus::Counter>& tokens_;
  prometheus::Family<prometheus::Gauge>& queue_depth_;
  prometheus::Family<prometheus::Gauge>& slots_;
  prometheus::Family<prometheus::Gauge>& replicas_;
  prometheus::Family<prometheus::Gauge>& replicas_desired_;
  prometheus::Family<prometheus::Gauge>& degraded_;
  prometheus::Family<prometheus::Gauge>& replicas_ending_;
  prometheus::Family<prometheus::Counter>& state_changes_;
  prometheus::Family<prometheus::Histogram>& health_check_;
  prometheus::Family<prometheus::Gauge>& build_info_;
  prometheus::Family<prometheus::Counter>& replica_requests_;
  prometheus::Family<prometheus::Gauge>& replica_in_flight_;
  prometheus::Family<prometheus::Gauge>& replica_tokens_per_second_;
  prometheus::Family<prometheus::Gauge>& replica_prefill_tps_;
  prometheus::Family<prometheus::Gauge>& replica_decode_tps_;
  prometheus::Gauge& prompt_cache_blocks_;
  prometheus::Gauge& prompt_cache_bytes_;
  prometheus::Counter& prompt_cache_reports_;
  prometheus::Counter& prompt_cache_predicted_;
  prometheus::Counter& prompt_cache_reported_;
  prometheus::Family<prometheus::Counter>& prompt_cache_mispredictions_;
  prometheus::Gauge& upstream_tls_sessions_;
  prometheus::Family<prometheus::Counter>& upstream_tls_handshakes_;
  prometheus::Counter& upstream_tls_full_;
  prometheus::Counter& upstream_tls_resumed_;
  prometheus::Family<prometheus::Counter>& connections_rejected_;
  prometheus::Family<prometheus::Gauge>& connections_open_;
  prometheus::Family<prometheus::Counter>& requests_refused_;
  prometheus::Family<prometheus::Counter>& session_failures_;
  prometheus::Gauge& process_rss_;
  prometheus::Counter& process_cpu_;
  prometheus::Gauge& process_fds_;
  prometheus::Gauge& process_start_;
  double cpu_seen_ = 0;
  // Each replica's fleetgate_replica_requests_total series, by outcome (a handful): found again
  // without building a key, and what to remove when the replica leaves.
  struct ReplicaKeyLess {
    using is_transparent = void;
    template <class A, class B>
    bool operator()(const A& a, const B& b) const {
      return std::pair<std::string_view, std::string_view>(a.first, a.second) <
             std::pair<std::string_view, std::string_view>(b.first, b.second);
    }
  };
  using ReplicaCounters = std::vector<std::pair<std::string, prometheus::Counter*>>;
  std::map<std::pair<std::string, std::string>, ReplicaCounters, ReplicaKeyLess> replica_outcomes_;
  std::unordered_map<std::string, ModelSeries> per_model_;
  std::unordered_map<std::string, prometheus::Counter*> requests_by_key_;
  std::string key_scratch_;  // request_done's and tokens' lookup keys, its capacity kept
  std::unordered_map<std::string, prometheus::Counter*> tokens_by_key_;
  std::map<std::string, ModelTotals> totals_;
};

}  // namespace fg::metrics
