#pragma once

// When each replica's next moment comes: its next probe, batched into ticks (one wake-up sends
// every probe due within a short window instead of one timer, and one wake-up of the thread, per
// replica), or while a probe is in flight the next look for its answer and its deadline
// (ProbeFlight: those are set with no allowance, so they come exactly on time).
//
// Why: 5,000 replicas probed every 5 s are 1,000 probes a second. With a timer each, the
// ±10% jitter spreads them evenly, so the io thread woke ~2,000 times a second (each timer, each
// reply) and perf showed ~60% of the probing CPU in the kernel switching to it (6.7-7.4% of a
// core in total, docs/benchmarks.md). Taking every probe due within the next
// kMaxEarly = 100 ms at one wake-up makes that ~10 wake-ups a second; the looks for a tick's
// answers come kMaxEarly later, at the next tick.
//
// A probe may so go out up to min(kMaxEarly, its interval / 10) early, never late: well inside
// the interval's own ±10% jitter, and a replica probed every 200 ms (tests) moves by 20 ms at
// most. Pure: no I/O, time is passed in.

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

namespace fg::health {

class ProbeSchedule {
 public:
  using Id = std::uint64_t;
  using TimePoint = std::chrono::steady_clock::time_point;
  using Duration = std::chrono::steady_clock::duration;
  // Where an id's moment is kept, from add() to remove(): the caller keeps it beside the id.
  using Slot = std::uint32_t;

  static constexpr Duration kMaxEarly = std::chrono::milliseconds(100);

  // How early a probe due `interval` after the last may go: min(kMaxEarly, interval / 10).
  static Duration allowed_early(Duration interval);

  // A new id to schedule (nothing scheduled yet), and the slot that stands for it.
  Slot add(Id id);
  // Schedules (or moves) the slot's next moment at due; it may be taken from due - early on.
  void set(Slot slot, TimePoint due, Duration early = Duration::zero());
  // Forgets the slot (and its moment); it may be handed out again by add().
  void remove(Slot slot);
  bool scheduled(Slot slot) const { return slots_[slot].scheduled; }
  std::size_t size() const { return scheduled_; }

  // When to wake next: the earliest due time, nullopt when nothing is scheduled.
  std::optional<TimePoint> next_wake() const;

  // Removes and returns, in due order (then id order), the id of every slot whose moment may be
  // taken at now (due - early <= now).
  std::vector<Id> take_due(TimePoint now);

 private:
  // A binary min-heap of (due, id) in a vector. Moving or removing a slot's moment leaves its old
  // entry in place, stale (its version is no longer the slot's), and it is dropped when it
  // reaches the top. Every probe moves its replica twice (its look, its next probe): std::map
  // and hash nodes cost four allocations and frees per probe, and the hash lookups of an id
  // missed the cache at 5,000 replicas (perf); slots are a vector, the heap allocates nothing
  // once grown.
  struct Entry {
    TimePoint due;
    Duration early;
    Id id;
    std::uint64_t version;
    Slot slot;
  };
  struct SlotState {
    Id id = 0;
    std::uint64_t version = 0;
    bool scheduled = false;
  };
  static bool later(const Entry& a, const Entry& b);
  bool live(const Entry& e) const {
    const SlotState& s = slots_[e.slot];
    return s.scheduled && s.version == e.version;
  }
  void push(const Entry& e);
  Entry pop();
  // Keeps the top live (so next_wake() is exact), and the heap at most about twice the live
  // entries (stale ones far in the future would otherwise wait there until their time).
  void tidy();

  std::vector<Entry> heap_;
  std::vector<SlotState> slots_;
  std::vector<Slot> free_;
  std::size_t scheduled_ = 0;
  // One counter for every slot, so that a slot handed out again never revives an old entry.
  std::uint64_t versions_ = 0;
};

}  // namespace fg::health
