#include "orchestrator/metrics/metrics.hpp"

#include <prometheus/text_serializer.h>

namespace fg::metrics {

namespace {

// 10 ms up to 30 minutes: a 9B phone reads a 7,000-token prompt in over 3 minutes, so buckets
// that stop at a few minutes would flatten exactly the requests that matter.
prometheus::Histogram::BucketBoundaries latency_buckets() {
  return {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,   2.5, 5,    10,
          20,   30,    60,   120, 180,  300, 600, 900, 1200, 1800};
}

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_(prometheus::BuildCounter()
                    .Name("fleetgate_requests_total")
                    .Help("Client requests answered, by model, endpoint and HTTP status code.")
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
      tokens_(prometheus::BuildCounter()
                  .Name("fleetgate_tokens_total")
                  .Help("Tokens reported by replicas in usage, by kind (prompt, completion).")
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
                      .Register(*registry_)) {
  build_info_.Add({{"version", FLEETGATE_VERSION}}).Set(1);
}

void Metrics::request_done(const std::string& model, const std::string& endpoint, unsigned code,
                           double duration_s, double queue_wait_s, double ttfb_s) {
  requests_.Add({{"model", model}, {"endpoint", endpoint}, {"code", std::to_string(code)}})
      .Increment();
  if (model.empty()) {
    return;
  }
  duration_.Add({{"model", model}}, latency_buckets()).Observe(duration_s);
  queue_wait_.Add({{"model", model}}, latency_buckets()).Observe(queue_wait_s);
  if (ttfb_s >= 0) {
    ttfb_.Add({{"model", model}}, latency_buckets()).Observe(ttfb_s);
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

void Metrics::tokens(const std::string& model, const std::string& kind, double count) {
  tokens_.Add({{"model", model}, {"kind", kind}}).Increment(count);
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

void Metrics::replica_state_change(const std::string& model, const std::string& to) {
  state_changes_.Add({{"model", model}, {"to", to}}).Increment();
}

void Metrics::health_check(const std::string& replica, double seconds) {
  static const prometheus::Histogram::BucketBoundaries kBuckets{0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                                0.5,   1,    2.5,   5,    10};
  health_check_.Add({{"replica", replica}}, kBuckets).Observe(seconds);
}

std::string Metrics::scrape() {
  if (before_scrape) {
    before_scrape();
  }
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace fg::metrics
