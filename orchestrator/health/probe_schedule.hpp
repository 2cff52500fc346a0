#pragma once

// When each replica's next probe goes out, batched into ticks: one wake-up sends every probe due
// within a short window instead of one timer (and one wake-up of the thread) per replica.
//
// Why: 5,000 replicas probed every 5 s are 1,000 probes a second. With a timer each, the
// ±10% jitter spreads them evenly, so the io thread woke ~2,000 times a second (each timer, each
// reply) and perf showed ~60% of the probing CPU in the kernel switching to it (6.7-7.4% of a
// core in total, docs/benchmarks.md). Taking every probe due within the next
// kMaxEarly = 100 ms at one wake-up makes that ~10 sending wake-ups a second, and the replies
// to a burst arrive together too.
//
// A probe may so go out up to min(kMaxEarly, its interval / 10) early, never late: well inside
// the interval's own ±10% jitter, and a replica probed every 200 ms (tests) moves by 20 ms at
// most. Pure: no I/O, time is passed in.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fg::health {

class ProbeSchedule {
 public:
  using Id = std::uint64_t;
  using TimePoint = std::chrono::steady_clock::time_point;
  using Duration = std::chrono::steady_clock::duration;

  static constexpr Duration kMaxEarly = std::chrono::milliseconds(100);

  // How early a probe due `interval` after the last may go: min(kMaxEarly, interval / 10).
  static Duration allowed_early(Duration interval);

  // Schedules (or moves) id's next probe at due; it may be taken from due - early on.
  void set(Id id, TimePoint due, Duration early = Duration::zero());
  void remove(Id id);
  bool contains(Id id) const { return by_id_.contains(id); }
  std::size_t size() const { return by_id_.size(); }

  // When to wake next: the earliest due time, nullopt when nothing is scheduled.
  std::optional<TimePoint> next_wake() const;

  // Removes and returns, in due order, every id whose probe may go at now (due - early <= now).
  std::vector<Id> take_due(TimePoint now);

 private:
  using Key = std::pair<TimePoint, Id>;
  std::map<Key, Duration> queue_;  // (due, id) -> how early it may go
  std::unordered_map<Id, TimePoint> by_id_;
};

}  // namespace fg::health
