#include "orchestrator/metrics/metrics.hpp"

#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <prometheus/text_serializer.h>

namespace fg::metrics {

namespace {

// 10 ms up to 30 minutes: a 9B phone reads a 7,000-token prompt in over 3 minutes, so buckets
// that stop at a few minutes would flatten exactly the requests that matter.
prometheus::Histogram::BucketBoundaries latency_buckets() {
  return {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,   2.5, 5,    10,
          20,   30,    60,   120, 180,  300, 600, 900, 1200, 1800};
}

// A counter that mirrors a total kept elsewhere moves by what the total gained since the last
// scrape.
void mirror(prometheus::Counter& counter, std::uint64_t total) {
  const double gained = static_cast<double>(total) - counter.Value();
  if (gained > 0) {
    counter.Increment(gained);
  }
}

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_(prometheus::BuildCounter()
                    .Name("fleetgate_requests_total")
                    .Help("Client requests answered, by model, endpoint, api and HTTP status code.")
                    .Register(*registry_)),
      duration_(prometheus::BuildHistogram()
                    .Name("fleetgate_request_duration_seconds")
                    .Help("Whole request time, from the request read to the last byte sent.")
                    .Register(*registry_)),
      ttfb_(prometheus::BuildHistogram()
                .Name("fleetgate_time_to_first_byte_seconds")
                .Help("Time from the request read to the first content byte sent to the client.")
                .Register(*registry_)),
      queue_wait_(prometheus::BuildHistogram()
                      .Name("fleetgate_queue_wait_seconds")
                      .Help("Time requests waited in the queue for a free replica slot.")
                      .Register(*registry_)),
      retries_(prometheus::BuildCounter()
                   .Name("fleetgate_retries_total")
                   .Help("Requests sent again to another replica after a failed attempt.")
                   .Register(*registry_)),
      upstream_errors_(prometheus::BuildCounter()
                           .Name("fleetgate_upstream_errors_total")
                           .Help("Failed exchanges with replicas, by kind.")
                           .Register(*registry_)),
      queue_rejections_(prometheus::BuildCounter()
                            .Name("fleetgate_queue_rejections_total")
                            .Help("Requests that left the queue without a replica, by reason.")
                            .Register(*registry_)),
      requests_shed_(prometheus::BuildCounter()
                         .Name("fleetgate_requests_shed_total")
                         .Help("Sheddable (negative priority) requests refused with 503 because "
                               "no replica slot was free for them.")
                         .Register(*registry_)),
      tokens_(
          prometheus::BuildCounter()
              .Name("fleetgate_tokens_total")
              .Help("Tokens reported by replicas in usage, by api and kind (prompt, completion).")
              .Register(*registry_)),
      queue_depth_(prometheus::BuildGauge()
                       .Name("fleetgate_queue_depth")
                       .Help("Requests waiting for a free replica slot.")
                       .Register(*registry_)),
      slots_(prometheus::BuildGauge()
                 .Name("fleetgate_slots")
                 .Help("Slots of routable replicas, by state (busy, free).")
                 .Register(*registry_)),
      replicas_(prometheus::BuildGauge()
                    .Name("fleetgate_replicas")
                    .Help("Replicas known to the gateway, by state.")
                    .Register(*registry_)),
      replicas_desired_(prometheus::BuildGauge()
                            .Name("fleetgate_replicas_desired")
                            .Help("Replica count the configuration asks for.")
                            .Register(*registry_)),
      degraded_(prometheus::BuildGauge()
                    .Name("fleetgate_model_degraded")
                    .Help("1 when a model has fewer healthy replicas than desired.")
                    .Register(*registry_)),
      replicas_ending_(
          prometheus::BuildGauge()
              .Name("fleetgate_replicas_ending")
              .Help("Healthy replicas whose deployment ends within the next hour (as their "
                    "agents registered it).")
              .Register(*registry_)),
      state_changes_(prometheus::BuildCounter()
                         .Name("fleetgate_replica_state_changes_total")
                         .Help("Replica state changes, by model and the state entered.")
                         .Register(*registry_)),
      health_check_(prometheus::BuildHistogram()
                        .Name("fleetgate_replica_health_check_seconds")
                        .Help("Duration of active health probes, by replica id.")
                        .Register(*registry_)),
      build_info_(prometheus::BuildGauge()
                      .Name("fleetgate_build_info")
                      .Help("Always 1; the version label says which build runs.")
                      .Register(*registry_)),
      replica_requests_(prometheus::BuildCounter()
                            .Name("fleetgate_replica_requests_total")
                            .Help("Attempts sent to each replica, by outcome (ok, error, busy, "
                                  "client_gone, failed_mid_stream).")
                            .Register(*registry_)),
      replica_in_flight_(prometheus::BuildGauge()
                             .Name("fleetgate_replica_in_flight")
                             .Help("Requests bound to each replica now (the gateway's own count).")
                             .Register(*registry_)),
      replica_tokens_per_second_(
          prometheus::BuildGauge()
              .Name("fleetgate_replica_tokens_per_second")
              .Help("Completion tokens per second of each replica's recent requests, from the "
                    "usage it reports.")
              .Register(*registry_)),
      replica_prefill_tps_(
          prometheus::BuildGauge()
              .Name("fleetgate_replica_prefill_tokens_per_second")
              .Help("Prompt tokens per second the scheduler expects of each replica (learned from "
                    "answers, seeded by the agent's measurement or routing.default_prefill_tps).")
              .Register(*registry_)),
      replica_decode_tps_(
          prometheus::BuildGauge()
              .Name("fleetgate_replica_decode_tokens_per_second")
              .Help("Generated tokens per second the scheduler expects of each replica (learned "
                    "from answers, seeded by the agent's measurement or "
                    "routing.default_decode_tps).")
              .Register(*registry_)),
      prompt_cache_blocks_(prometheus::BuildGauge()
                               .Name("fleetgate_prompt_cache_blocks")
                               .Help("Prompt blocks the gateway believes its replicas hold "
                                     "(hashes only), over every replica.")
                               .Register(*registry_)
                               .Add({})),
      prompt_cache_bytes_(prometheus::BuildGauge()
                              .Name("fleetgate_prompt_cache_bytes")
                              .Help("Memory the prompt-cache model accounts for, against "
                                    "routing.cache_budget_bytes.")
                              .Register(*registry_)
                              .Add({})),
      prompt_cache_reports_(prometheus::BuildCounter()
                                .Name("fleetgate_prompt_cache_reports_total")
                                .Help("Answers whose reported cached tokens were compared with "
                                      "the prompt-cache model's prediction.")
                                .Register(*registry_)
                                .Add({})),
      prompt_cache_predicted_(prometheus::BuildCounter()
                                  .Name("fleetgate_prompt_cache_predicted_blocks_total")
                                  .Help("Prompt blocks the prompt-cache model expected the "
                                        "replicas to reuse, over the compared answers.")
                                  .Register(*registry_)
                                  .Add({})),
      prompt_cache_reported_(prometheus::BuildCounter()
                                 .Name("fleetgate_prompt_cache_reported_blocks_total")
                                 .Help("Prompt blocks the replicas reported reusing (cached "
                                       "tokens over tokens per block), over the compared answers.")
                                 .Register(*registry_)
                                 .Add({})),
      prompt_cache_mispredictions_(
          prometheus::BuildCounter()
              .Name("fleetgate_prompt_cache_mispredictions_total")
              .Help("Answers that reused less than half the predicted blocks (direction under: "
                    "the replica lost its cache, its other prompts are forgotten) or more than one "
                    "block beyond them (over).")
              .Register(*registry_)),
      upstream_tls_sessions_(prometheus::BuildGauge()
                                 .Name("fleetgate_upstream_tls_sessions")
                                 .Help("https replicas with TLS session tickets kept, to resume "
                                       "the gateway's next connections to them.")
                                 .Register(*registry_)
                                 .Add({})),
      upstream_tls_handshakes_(
          prometheus::BuildCounter()
              .Name("fleetgate_upstream_tls_handshakes_total")
              .Help("TLS handshakes with the replicas (proxied requests, probes, challenges), by "
                    "kind: full, or resumed from a kept session (no certificate, no signature).")
              .Register(*registry_)),
      upstream_tls_full_(upstream_tls_handshakes_.Add({{"kind", "full"}})),
      upstream_tls_resumed_(upstream_tls_handshakes_.Add({{"kind", "resumed"}})),
      connections_rejected_(
          prometheus::BuildCounter()
              .Name("fleetgate_connections_rejected_total")
              .Help("Client connections closed at once because a cap was reached, by listener and "
                    "reason (max_connections, max_connections_per_ip).")
              .Register(*registry_)),
      connections_open_(prometheus::BuildGauge()
                            .Name("fleetgate_connections_open")
                            .Help("Open client connections, by listener.")
                            .Register(*registry_)),
      requests_refused_(
          prometheus::BuildCounter()
              .Name("fleetgate_requests_refused_total")
              .Help("Requests the server layer answered itself before any handler ran (refused "
                    "from the head, or not readable), by listener and reason.")
              .Register(*registry_)),
      session_failures_(
          prometheus::BuildCounter()
              .Name("fleetgate_session_failures_total")
              .Help("Client connections dropped by the server layer, by listener and kind "
                    "(write_timeout: the client stopped reading; exception: a handler failed).")
              .Register(*registry_)),
      process_rss_(prometheus::BuildGauge()
                       .Name("fleetgate_process_resident_memory_bytes")
                       .Help("Resident memory of the gateway process.")
                       .Register(*registry_)
                       .Add({})),
      process_cpu_(prometheus::BuildCounter()
                       .Name("fleetgate_process_cpu_seconds_total")
                       .Help("CPU time (user and system) used by the gateway process.")
                       .Register(*registry_)
                       .Add({})),
      process_fds_(prometheus::BuildGauge()
                       .Name("fleetgate_process_open_fds")
                       .Help("Open file descriptors of the gateway process.")
                       .Register(*registry_)
                       .Add({})),
      process_start_(prometheus::BuildGauge()
                         .Name("fleetgate_process_start_time_seconds")
                         .Help("Start time of the gateway process, in seconds since the epoch.")
                         .Register(*registry_)
                         .Add({})) {
  build_info_.Add({{"version", FLEETGATE_VERSION}}).Set(1);
  for (const char* listener : {"public", "admin"}) {
    for (const char* reason : {"max_connections", "max_connections_per_ip"}) {
      connections_rejected_.Add({{"listener", listener}, {"reason", reason}});
    }
    for (const char* kind : {"write_timeout", "exception"}) {
      session_failures_.Add({{"listener", listener}, {"kind", kind}});
    }
    connections_open_.Add({{"listener", listener}});
  }
}

// Family::Add builds and hashes a label map on every call; the per-request series are looked up
// once and kept (series in these families are never removed, so the pointers stay valid).
Metrics::ModelSeries& Metrics::model_series(const std::string& model) {
  auto it = per_model_.find(model);
  if (it != per_model_.end()) {
    return it->second;
  }
  ModelSeries m;
  m.duration = &duration_.Add({{"model", model}}, latency_buckets());
  m.queue_wait = &queue_wait_.Add({{"model", model}}, latency_buckets());
  m.ttfb = &ttfb_.Add({{"model", model}}, latency_buckets());
  return per_model_.emplace(model, m).first->second;
}

void Metrics::request_done(const std::string& model, const std::string& endpoint,
                           const std::string& api, unsigned code, double duration_s,
                           double queue_wait_s, double ttfb_s) {
  // Built in a kept buffer: a fresh string per request grew twice on the heap.
  std::string& key = key_scratch_;
  key.assign(model);
  key += '\n';
  key += endpoint;
  key += '\n';
  key += api;
  key += '\n';
  char digits[16];
  const auto end = std::to_chars(digits, digits + sizeof digits, code).ptr;
  key.append(digits, end);
  auto it = requests_by_key_.find(key);
  if (it == requests_by_key_.end()) {
    auto* counter = &requests_.Add(
        {{"model", model}, {"endpoint", endpoint}, {"api", api}, {"code", std::to_string(code)}});
    it = requests_by_key_.emplace(key, counter).first;
  }
  it->second->Increment();
  if (!model.empty()) {
    ++totals_[model].requests;
  }
  if (model.empty()) {
    return;
  }
  auto& series = model_series(model);
  series.duration->Observe(duration_s);
  series.queue_wait->Observe(queue_wait_s);
  if (ttfb_s >= 0) {
    series.ttfb->Observe(ttfb_s);
  }
}

void Metrics::retry(const std::string& model) {
  retries_.Add({{"model", model}}).Increment();
}

void Metrics::upstream_error(const std::string& model, const std::string& kind) {
  upstream_errors_.Add({{"model", model}, {"kind", kind}}).Increment();
}

void Metrics::queue_rejection(const std::string& model, const std::string& reason) {
  queue_rejections_.Add({{"model", model}, {"reason", reason}}).Increment();
}

void Metrics::request_shed(const std::string& model) {
  requests_shed_.Add({{"model", model}}).Increment();
}

void Metrics::tokens(const std::string& model, const std::string& api, const std::string& kind,
                     double count) {
  if (!model.empty() && count > 0 && (kind == "prompt" || kind == "completion")) {
    totals_[model].tokens += static_cast<std::uint64_t>(count);
  }
  // In request_done's kept buffer, as there: a fresh key grew on the heap at every answer.
  std::string& key = key_scratch_;
  key.assign(model);
  key += '\n';
  key += api;
  key += '\n';
  key += kind;
  auto it = tokens_by_key_.find(key);
  if (it == tokens_by_key_.end()) {
    auto* counter = &tokens_.Add({{"model", model}, {"api", api}, {"kind", kind}});
    it = tokens_by_key_.emplace(key, counter).first;
  }
  it->second->Increment(count);
}

void Metrics::set_queue_depth(const std::string& model, double depth) {
  queue_depth_.Add({{"model", model}}).Set(depth);
}

void Metrics::set_slots(const std::string& model, double busy, double free) {
  slots_.Add({{"model", model}, {"state", "busy"}}).Set(busy);
  slots_.Add({{"model", model}, {"state", "free"}}).Set(free);
}

void Metrics::set_replicas(const std::string& model, const std::string& state, double count) {
  replicas_.Add({{"model", model}, {"state", state}}).Set(count);
}

void Metrics::set_replicas_desired(const std::string& model, double desired) {
  replicas_desired_.Add({{"model", model}}).Set(desired);
}

void Metrics::set_degraded(const std::string& model, bool degraded) {
  degraded_.Add({{"model", model}}).Set(degraded ? 1 : 0);
}

void Metrics::set_replicas_ending(const std::string& model, double ending) {
  replicas_ending_.Add({{"model", model}}).Set(ending);
}

void Metrics::replica_state_change(const std::string& model, const std::string& to) {
  state_changes_.Add({{"model", model}, {"to", to}}).Increment();
}

prometheus::Histogram& Metrics::health_check_series(const std::string& replica) {
  static const prometheus::Histogram::BucketBoundaries kBuckets{0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                                0.5,   1,    2.5,   5,    10};
  return health_check_.Add({{"replica", replica}}, kBuckets);
}

void Metrics::replica_request(const std::string& model, const std::string& replica,
                              std::string_view outcome) {
  auto it = replica_outcomes_.find(std::pair<std::string_view, std::string_view>(model, replica));
  if (it == replica_outcomes_.end()) {
    it = replica_outcomes_.emplace(std::pair(model, replica), ReplicaCounters{}).first;
  }
  for (const auto& [name, counter] : it->second) {
    if (name == outcome) {
      counter->Increment();
      return;
    }
  }
  auto* counter = &replica_requests_.Add(
      {{"model", model}, {"replica", replica}, {"outcome", std::string(outcome)}});
  it->second.emplace_back(std::string(outcome), counter);
  counter->Increment();
}

void Metrics::set_replica(const std::string& model, const std::string& replica, double in_flight,
                          double tokens_per_second) {
  replica_in_flight_.Add({{"model", model}, {"replica", replica}}).Set(in_flight);
  replica_tokens_per_second_.Add({{"model", model}, {"replica", replica}}).Set(tokens_per_second);
}

void Metrics::set_replica_speeds(const std::string& model, const std::string& replica,
                                 double prefill_tps, double decode_tps) {
  replica_prefill_tps_.Add({{"model", model}, {"replica", replica}}).Set(prefill_tps);
  replica_decode_tps_.Add({{"model", model}, {"replica", replica}}).Set(decode_tps);
}

void Metrics::set_prompt_cache(double blocks, double bytes) {
  prompt_cache_blocks_.Set(blocks);
  prompt_cache_bytes_.Set(bytes);
}

void Metrics::set_upstream_tls(double sessions, std::uint64_t full, std::uint64_t resumed) {
  upstream_tls_sessions_.Set(sessions);
  mirror(upstream_tls_full_, full);
  mirror(upstream_tls_resumed_, resumed);
}

void Metrics::set_prompt_cache_accuracy(const PromptCacheAccuracy& totals) {
  // Counters mirror totals kept by the scheduler: each moves by what it gained since the last
  // scrape.
  mirror(prompt_cache_reports_, totals.reports);
  mirror(prompt_cache_predicted_, totals.predicted_blocks);
  mirror(prompt_cache_reported_, totals.reported_blocks);
  mirror(prompt_cache_mispredictions_.Add({{"direction", "under"}}), totals.under);
  mirror(prompt_cache_mispredictions_.Add({{"direction", "over"}}), totals.over);
}

void Metrics::connection_rejected(const std::string& listener, const std::string& reason) {
  connections_rejected_.Add({{"listener", listener}, {"reason", reason}}).Increment();
}

void Metrics::session_event(const std::string& listener, const std::string& reason) {
  if (reason == "write_timeout" || reason == "exception") {
    session_failures_.Add({{"listener", listener}, {"kind", reason}}).Increment();
  } else {
    requests_refused_.Add({{"listener", listener}, {"reason", reason}}).Increment();
  }
}

void Metrics::set_open_connections(const std::string& listener, double open) {
  connections_open_.Add({{"listener", listener}}).Set(open);
}

namespace {
template <typename T>
void remove_series(prometheus::Family<T>& family, const prometheus::Labels& labels) {
  if (family.Has(labels)) {
    family.Remove(&family.Add(labels));
  }
}
}  // namespace

void Metrics::declare_model(const std::string& model) {
  for (const char* reason : {"full", "timeout", "client_gone"}) {
    queue_rejections_.Add({{"model", model}, {"reason", reason}});
  }
  for (const char* kind : {"connect", "tls", "timeout", "http_5xx", "busy", "reset", "protocol",
                           "model_not_found", "too_large", "deadline"}) {
    upstream_errors_.Add({{"model", model}, {"kind", kind}});
  }
  for (std::string_view api : kTokenApis) {
    for (const char* kind : {"prompt", "completion"}) {
      tokens_.Add({{"model", model}, {"api", std::string(api)}, {"kind", kind}});
    }
  }
  for (const char* to : {"joining", "healthy", "unhealthy", "draining", "gone"}) {
    state_changes_.Add({{"model", model}, {"to", to}});
  }
  retries_.Add({{"model", model}});
  requests_shed_.Add({{"model", model}});
  duration_.Add({{"model", model}}, latency_buckets());
  ttfb_.Add({{"model", model}}, latency_buckets());
  queue_wait_.Add({{"model", model}}, latency_buckets());
}

void Metrics::forget_model(const std::string& model) {
  remove_series(queue_depth_, {{"model", model}});
  remove_series(replicas_desired_, {{"model", model}});
  remove_series(degraded_, {{"model", model}});
  remove_series(replicas_ending_, {{"model", model}});
  for (const char* state : {"busy", "free"}) {
    remove_series(slots_, {{"model", model}, {"state", state}});
  }
  for (const char* state : {"joining", "healthy", "unhealthy", "draining"}) {
    remove_series(replicas_, {{"model", model}, {"state", state}});
  }
}

void Metrics::forget_replica(const std::string& model, const std::string& replica) {
  const prometheus::Labels labels{{"model", model}, {"replica", replica}};
  if (replica_in_flight_.Has(labels)) {
    replica_in_flight_.Remove(&replica_in_flight_.Add(labels));
  }
  if (replica_tokens_per_second_.Has(labels)) {
    replica_tokens_per_second_.Remove(&replica_tokens_per_second_.Add(labels));
  }
  remove_series(replica_prefill_tps_, labels);
  remove_series(replica_decode_tps_, labels);
  auto it = replica_outcomes_.find(std::pair<std::string_view, std::string_view>(model, replica));
  if (it != replica_outcomes_.end()) {
    for (const auto& [outcome, counter] : it->second) {
      replica_requests_.Remove(counter);
    }
    replica_outcomes_.erase(it);
  }
  if (health_check_.Has({{"replica", replica}})) {
    static const prometheus::Histogram::BucketBoundaries kNone{};
    health_check_.Remove(&health_check_.Add({{"replica", replica}}, kNone));
  }
}

// Linux process facts from /proc, the same set Prometheus client libraries export.
void Metrics::update_process() {
  static const long ticks = sysconf(_SC_CLK_TCK);
  static const long page = sysconf(_SC_PAGESIZE);
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) start at field 3.
  auto close = stat.rfind(')');
  if (close != std::string::npos) {
    std::istringstream in(stat.substr(close + 2));
    std::string field;
    std::vector<std::string> fields;
    while (in >> field) {
      fields.push_back(field);
    }
    if (fields.size() > 21) {
      const double cpu = (std::stod(fields[11]) + std::stod(fields[12])) / ticks;
      if (cpu > cpu_seen_) {
        process_cpu_.Increment(cpu - cpu_seen_);
        cpu_seen_ = cpu;
      }
      process_rss_.Set(std::stod(fields[21]) * page);
      std::ifstream proc_stat("/proc/stat");
      std::string key;
      double boot = 0;
      while (proc_stat >> key) {
        if (key == "btime") {
          proc_stat >> boot;
          break;
        }
      }
      process_start_.Set(boot + std::stod(fields[19]) / ticks);
    }
  }
  std::error_code ec;
  double fds = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++fds;
  }
  process_fds_.Set(fds);
}

std::string Metrics::scrape() {
  update_process();
  if (before_scrape) {
    before_scrape();
  }
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace fg::metrics
