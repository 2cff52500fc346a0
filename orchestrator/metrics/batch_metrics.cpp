#include "orchestrator/metrics/batch_metrics.hpp"

#include <array>

namespace fg::metrics {

namespace {
constexpr std::array<const char*, 4> kLineStates = {"pending", "running", "succeeded", "failed"};
// storage::BatchStatus order.
constexpr std::array<const char*, 8> kStatuses = {"validating", "failed",    "in_progress",
                                                  "finalizing", "completed", "expired",
                                                  "cancelling", "cancelled"};
constexpr std::array<const char*, 3> kOutcomes = {"succeeded", "failed", "retried"};
}  // namespace

BatchMetrics::BatchMetrics(prometheus::Registry& registry)
    : lines_(prometheus::BuildGauge()
                 .Name("fleetgate_batch_lines")
                 .Help("Lines of active batches, by state (pending, running, succeeded, failed).")
                 .Register(registry)),
      batches_(prometheus::BuildGauge()
                   .Name("fleetgate_batches")
                   .Help("Batches in the storage, by status.")
                   .Register(registry)),
      processed_(prometheus::BuildCounter()
                     .Name("fleetgate_batch_lines_processed_total")
                     .Help("Batch lines this gateway ran, by outcome (succeeded, failed, retried).")
                     .Register(registry)),
      remaining_(prometheus::BuildGauge()
                     .Name("fleetgate_batch_lines_remaining")
                     .Help("Lines without a result, per batch in progress.")
                     .Register(registry)),
      window_left_(prometheus::BuildGauge()
                       .Name("fleetgate_batch_window_remaining_seconds")
                       .Help("Seconds left of the completion window, per batch in progress.")
                       .Register(registry)) {
  for (const char* state : kLineStates) {
    lines_.Add({{"state", state}});
  }
  for (const char* status : kStatuses) {
    batches_.Add({{"status", status}});
  }
  for (const char* outcome : kOutcomes) {
    processed_.Add({{"outcome", outcome}});
  }
}

void BatchMetrics::line_done(const std::string& outcome) {
  processed_.Add({{"outcome", outcome}}).Increment();
}

void BatchMetrics::set_lines(const std::vector<std::int64_t>& by_state) {
  for (std::size_t i = 0; i < kLineStates.size() && i < by_state.size(); ++i) {
    lines_.Add({{"state", kLineStates[i]}}).Set(static_cast<double>(by_state[i]));
  }
}

void BatchMetrics::set_batches(const std::vector<std::int64_t>& by_status) {
  for (std::size_t i = 0; i < kStatuses.size() && i < by_status.size(); ++i) {
    batches_.Add({{"status", kStatuses[i]}}).Set(static_cast<double>(by_status[i]));
  }
}

void BatchMetrics::set_progress(const std::vector<Progress>& batches) {
  std::set<std::string> now;
  for (const auto& p : batches) {
    now.insert(p.batch);
    remaining_.Add({{"batch", p.batch}}).Set(p.remaining_lines);
    window_left_.Add({{"batch", p.batch}}).Set(p.window_seconds_left);
  }
  for (const auto& gone : progress_batches_) {
    if (!now.contains(gone)) {
      remaining_.Remove(&remaining_.Add({{"batch", gone}}));
      window_left_.Remove(&window_left_.Add({{"batch", gone}}));
    }
  }
  progress_batches_ = std::move(now);
}

}  // namespace fg::metrics
