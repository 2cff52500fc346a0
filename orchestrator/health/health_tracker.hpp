#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>

namespace fg::health {

using ReplicaId = std::uint64_t;
using TimePoint = std::chrono::steady_clock::time_point;
using std::chrono::milliseconds;

// Only healthy replicas receive new requests. draining: no new requests, in-flight ones finish.
enum class State { joining, healthy, unhealthy, draining, gone };
std::string_view to_string(State s);

struct Thresholds {
  milliseconds interval{5'000};       // between active probes
  milliseconds timeout{3'000};        // one probe
  std::uint32_t unhealthy_after = 3;  // consecutive failed probes
  std::uint32_t healthy_after = 2;    // consecutive passed probes
  std::uint32_t eject_after = 3;      // consecutive failures on real traffic
  milliseconds backoff_base{5'000};   // first wait after a passive ejection, doubled each time
  milliseconds backoff_max{300'000};
  double jitter = 0.10;  // probe intervals spread by up to this fraction
};

enum class ProbeResult { pass, fail, loading };

struct Transition {
  ReplicaId id = 0;
  State from = State::joining;
  State to = State::joining;
  std::string reason;  // "probe failed 3 times", "3 consecutive traffic failures", ...
};

// The replica state machine: thresholds, passive ejection with back-off, never ejecting the last
// healthy replica of a model, drain. Pure: no I/O, time is passed in.
class HealthTracker {
 public:
  // Adds a replica in `initial` state (joining by default; statically configured replicas may
  // start healthy so that a fresh gateway serves at once).
  void add(ReplicaId id, std::string model, Thresholds thresholds, TimePoint now,
           State initial = State::joining);
  void remove(ReplicaId id);
  bool contains(ReplicaId id) const;
  void set_thresholds(ReplicaId id, Thresholds thresholds);

  std::optional<Transition> on_probe(ReplicaId id, ProbeResult result, TimePoint now);
  std::optional<Transition> on_traffic_failure(ReplicaId id, TimePoint now);
  void on_traffic_success(ReplicaId id);

  std::optional<Transition> drain(ReplicaId id);
  std::optional<Transition> undrain(ReplicaId id);  // back to joining: proven again by probes
  std::optional<Transition> mark_gone(ReplicaId id);
  // Moves a replica to unhealthy for a reason outside probes and traffic (missed heartbeats).
  // Probes must then prove it again (healthy_after passes).
  std::optional<Transition> mark_unhealthy(ReplicaId id, std::string reason);

  // Holds a replica where it is (proof of URL control pending): probes are still counted, but
  // change no state. Releasing it applies what they proved (healthy_after passes: healthy).
  void hold(ReplicaId id);
  std::optional<Transition> release(ReplicaId id);

  // When the next probe of this replica is due. jitter_unit is a random number in [0, 1)
  // supplied by the caller. After a passive ejection the back-off delay applies instead.
  TimePoint next_probe_at(ReplicaId id, TimePoint last_probe, double jitter_unit) const;

  State state(ReplicaId id) const;
  std::uint32_t consecutive_failures(ReplicaId id) const;  // probe or traffic, whichever counts
  std::uint32_t ejections(ReplicaId id) const;             // consecutive passive ejections
  milliseconds backoff(ReplicaId id) const;                // current back-off delay, 0 when none
  std::size_t healthy_count(const std::string& model) const;
  std::vector<ReplicaId> replicas() const;  // sorted

 private:
  struct Entry {
    std::string model;
    Thresholds thresholds;
    State state = State::joining;
    std::uint32_t probe_failures = 0;
    std::uint32_t probe_passes = 0;
    std::uint32_t traffic_failures = 0;
    // Consecutive passive ejections (for back-off): reset by a traffic success while healthy.
    std::uint32_t ejections = 0;
    std::optional<TimePoint> ejected_at;
    bool held = false;
  };
  Entry* find(ReplicaId id);
  const Entry* find(ReplicaId id) const;
  // Sets the state and returns a Transition only if it changed.
  std::optional<Transition> move(ReplicaId id, Entry& e, State to, std::string reason);
  static milliseconds backoff_for(const Entry& e);

  // Open addressing: a lookup is one cache miss (the entry) where std::unordered_map's node chain
  // was up to three, and every probe and proxied answer looks its replica up (perf, 5,000 https
  // replicas probed: this map's find was 6% of the probing CPU). Entries move when it grows:
  // no pointer into it is kept past an add().
  boost::unordered_flat_map<ReplicaId, Entry> entries_;
};

}  // namespace fg::health
