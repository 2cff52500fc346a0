#pragma once

// The Batch API's metric families (docs/batch.md, docs/observability.md), registered on the
// gateway's one registry (Metrics::registry()). Labels: line states, batch statuses, outcomes and
// the ids of batches in progress (bounded: a batch's series go when it ends). Never custom_ids,
// prompts or keys.

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

namespace fg::metrics {

class BatchMetrics {
 public:
  explicit BatchMetrics(prometheus::Registry& registry);

  // outcome: succeeded, failed (a result recorded), retried (a transient failure, run again).
  void line_done(const std::string& outcome);
  // Refreshed before each scrape: lines of active batches by state (pending, running,
  // succeeded, failed), batches by status (index = storage::BatchStatus), and per batch in
  // progress its lines without a result and the seconds left of its completion window.
  void set_lines(const std::vector<std::int64_t>& by_state);
  void set_batches(const std::vector<std::int64_t>& by_status);
  struct Progress {
    std::string batch;
    double remaining_lines = 0;
    double window_seconds_left = 0;
  };
  void set_progress(const std::vector<Progress>& batches);

 private:
  prometheus::Family<prometheus::Gauge>& lines_;
  prometheus::Family<prometheus::Gauge>& batches_;
  prometheus::Family<prometheus::Counter>& processed_;
  prometheus::Family<prometheus::Gauge>& remaining_;
  prometheus::Family<prometheus::Gauge>& window_left_;
  std::set<std::string> progress_batches_;
};

}  // namespace fg::metrics
