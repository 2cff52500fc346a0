#pragma once

// The status page's recent rates: requests and tokens per second per model over the last minutes,
// from cumulative counters the gateway samples at a fixed interval. Bounded (a ring of samples
// per model) and pure: the caller passes the time of each sample.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace fg::admin {

// Cumulative counts of one model since the gateway started.
struct Totals {
  std::uint64_t requests = 0;
  std::uint64_t tokens = 0;  // prompt + completion tokens the replicas reported
};

// One interval between two samples and the rates over it.
struct RatePoint {
  std::chrono::steady_clock::time_point from{};
  std::chrono::steady_clock::time_point at{};
  double requests_per_second = 0;
  double tokens_per_second = 0;
};

class RateHistory {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // capacity: intervals kept per model (the oldest go first).
  explicit RateHistory(std::size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  // Takes a sample of every model's totals. A model missing from `totals` is forgotten (it left
  // the configuration); a new one starts with its first sample (no interval yet). A counter that
  // went down (a model removed and added again) counts as a restart from zero. A sample at or
  // before the previous one is ignored.
  void sample(TimePoint now, const std::map<std::string, Totals>& totals);

  // The model's intervals, oldest first (empty for an unknown model).
  std::vector<RatePoint> points(const std::string& model) const;
  // The average rates over the newest intervals that lie within `window` of the newest sample (at
  // least the newest interval); zeros when there is none.
  RatePoint recent(const std::string& model, std::chrono::steady_clock::duration window) const;

 private:
  struct Series {
    TimePoint last_at{};
    Totals last{};
    std::deque<RatePoint> points;
  };

  std::size_t capacity_;
  std::map<std::string, Series> series_;
};

}  // namespace fg::admin
