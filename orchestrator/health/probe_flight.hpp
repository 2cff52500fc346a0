#pragma once

// A probe sent and not yet answered: when its answer is looked for, when it times out, and how
// long the answer took. Pure: no I/O, time is passed in.
//
// Why: the checker does not wait on each probe's socket (the io thread would wake for every
// answer). It sends a tick's probes, and reads the answers that arrived with non-blocking reads
// at a later wake-up: the probe's look time, look_after after the tick, which at scale is the
// next tick anyway (look_after is the schedule's allowance, min(100 ms, interval / 10)). A probe
// still unanswered then is looked at again look_after later, and at its deadline at the latest,
// so a timeout is found when it passes, as with a timer per probe. The time an answer took comes
// from the kernel's receive timestamp of its last bytes, so reading it later does not lengthen it.

#include <chrono>
#include <cstdint>
#include <optional>

namespace fg::health {

struct ProbeFlight {
  using TimePoint = std::chrono::steady_clock::time_point;
  using Duration = std::chrono::steady_clock::duration;

  TimePoint sent;                 // when the probe started (its connect, if it needed one)
  std::int64_t sent_unix_ns = 0;  // the same moment on the wall clock (receive timestamps' clock)
  Duration timeout{};             // health.timeout
  Duration look_after{};          // between looks for its answer

  TimePoint deadline() const { return sent + timeout; }

  // When to look for the answer next, given that a look at now found none yet: look_after later,
  // and never after the deadline. nullopt: the deadline has passed, the probe timed out.
  std::optional<TimePoint> next_look(TimePoint now) const;

  // How long the answer took: from sent to its arrival by the kernel's receive timestamp
  // (arrived_unix_ns) when there is one and it lies between sent and now; else (no timestamp, or
  // the wall clock was stepped) from sent to now, which is at most one look late.
  Duration answer_took(std::optional<std::int64_t> arrived_unix_ns, TimePoint now) const;

  // Whether an answer that took this long came in time; one after the timeout is a timeout.
  bool in_time(Duration took) const { return took <= timeout; }
};

}  // namespace fg::health
