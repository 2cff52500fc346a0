#include "orchestrator/health/health_tracker.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

namespace fg::health {

namespace {

// A zero threshold would make a replica flip on no evidence at all; treat it as one.
std::uint32_t at_least_one(std::uint32_t n) {
  return std::max<std::uint32_t>(n, 1);
}

std::optional<Transition> make_transition(ReplicaId id, State from, State to, std::string reason) {
  if (from == to) {
    return std::nullopt;
  }
  return Transition{id, from, to, std::move(reason)};
}

}  // namespace

std::string_view to_string(State s) {
  switch (s) {
    case State::joining:
      return "joining";
    case State::healthy:
      return "healthy";
    case State::unhealthy:
      return "unhealthy";
    case State::draining:
      return "draining";
    case State::gone:
      return "gone";
  }
  return "unknown";
}

HealthTracker::Entry* HealthTracker::find(ReplicaId id) {
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : &it->second;
}

const HealthTracker::Entry* HealthTracker::find(ReplicaId id) const {
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : &it->second;
}

std::optional<Transition> HealthTracker::move(ReplicaId id, Entry& e, State to,
                                              std::string reason) {
  auto t = make_transition(id, e.state, to, std::move(reason));
  e.state = to;
  if (to == State::healthy) {
    // Proven by probes: probing is no longer gated. The ejection count is kept until real
    // traffic succeeds, or a replica that passes probes but fails requests would flap at
    // the base back-off forever (it could never be ejected twice in a row).
    e.traffic_failures = 0;
    e.ejected_at.reset();
  }
  return t;
}

milliseconds HealthTracker::backoff_for(const Entry& e) {
  if (e.ejections == 0) {
    return milliseconds{0};
  }
  // Doubling by loop, not by shift: a replica ejected 100 times must not overflow.
  milliseconds delay = std::max(e.thresholds.backoff_base, milliseconds{0});
  const milliseconds cap = e.thresholds.backoff_max;
  for (std::uint32_t i = 1; i < e.ejections && delay < cap; ++i) {
    delay *= 2;
  }
  return std::min(delay, cap);
}

void HealthTracker::add(ReplicaId id, std::string model, Thresholds thresholds, TimePoint now,
                        State initial) {
  // Re-adding an id replaces the entry: the caller asked for a fresh replica.
  Entry e;
  e.model = std::move(model);
  e.thresholds = thresholds;
  e.state = initial;
  entries_.insert_or_assign(id, std::move(e));
}

void HealthTracker::remove(ReplicaId id) {
  entries_.erase(id);
}

bool HealthTracker::contains(ReplicaId id) const {
  return find(id) != nullptr;
}

void HealthTracker::set_thresholds(ReplicaId id, Thresholds thresholds) {
  // Counters are kept; new thresholds take effect at the next event, never retroactively.
  if (Entry* e = find(id)) {
    e->thresholds = thresholds;
  }
}

std::optional<Transition> HealthTracker::on_probe(ReplicaId id, ProbeResult result, TimePoint now) {
  Entry* e = find(id);
  // Draining and gone are operator decisions; probes must not undo them.
  if (e == nullptr || e->state == State::draining || e->state == State::gone) {
    return std::nullopt;
  }
  if (e->held) {
    // Counted, so that a release can apply them at once; no state changes meanwhile.
    e->probe_passes = result == ProbeResult::pass ? e->probe_passes + 1 : 0;
    e->probe_failures = result == ProbeResult::fail ? e->probe_failures + 1 : 0;
    return std::nullopt;
  }
  switch (result) {
    case ProbeResult::pass: {
      e->probe_failures = 0;
      ++e->probe_passes;
      const std::uint32_t need = at_least_one(e->thresholds.healthy_after);
      if ((e->state == State::joining || e->state == State::unhealthy) && e->probe_passes >= need) {
        return move(id, *e, State::healthy,
                    "probe passed " + std::to_string(e->probe_passes) + " times");
      }
      return std::nullopt;
    }
    case ProbeResult::fail: {
      e->probe_passes = 0;
      ++e->probe_failures;
      const std::uint32_t need = at_least_one(e->thresholds.unhealthy_after);
      // Unlike passive ejection, an active probe may take down the last healthy replica.
      if ((e->state == State::healthy || e->state == State::joining) && e->probe_failures >= need) {
        return move(id, *e, State::unhealthy,
                    "probe failed " + std::to_string(e->probe_failures) + " times");
      }
      return std::nullopt;
    }
    case ProbeResult::loading: {
      // Alive but not ready: breaks both streaks, and is never counted as a failure.
      e->probe_passes = 0;
      e->probe_failures = 0;
      if (e->state == State::healthy) {
        // A healthy replica that loads its model again has restarted: prove it again.
        e->traffic_failures = 0;
        return move(id, *e, State::joining, "model loading (replica restarted)");
      }
      return move(id, *e, State::joining, "model loading");
    }
  }
  return std::nullopt;
}

void HealthTracker::hold(ReplicaId id) {
  if (Entry* e = find(id)) {
    e->held = true;
  }
}

std::optional<Transition> HealthTracker::release(ReplicaId id) {
  Entry* e = find(id);
  if (e == nullptr || !e->held) {
    return std::nullopt;
  }
  e->held = false;
  if (e->state == State::joining && e->probe_passes >= at_least_one(e->thresholds.healthy_after)) {
    return move(id, *e, State::healthy,
                "probe passed " + std::to_string(e->probe_passes) + " times");
  }
  return std::nullopt;
}

std::optional<Transition> HealthTracker::on_traffic_failure(ReplicaId id, TimePoint now) {
  Entry* e = find(id);
  if (e == nullptr) {
    return std::nullopt;
  }
  ++e->traffic_failures;
  // Only a healthy replica receives traffic worth ejecting from; late failures of in-flight
  // requests on other states are counted for the admin view only.
  if (e->state != State::healthy || e->traffic_failures < at_least_one(e->thresholds.eject_after)) {
    return std::nullopt;
  }
  // Never eject the last healthy replica on passive evidence: a flaky one beats none.
  if (healthy_count(e->model) <= 1) {
    return std::nullopt;
  }
  ++e->ejections;
  e->ejected_at = now;
  e->probe_passes = 0;
  return move(id, *e, State::unhealthy,
              std::to_string(e->traffic_failures) + " consecutive traffic failures");
}

void HealthTracker::on_traffic_success(ReplicaId id) {
  Entry* e = find(id);
  if (e == nullptr) {
    return;
  }
  e->traffic_failures = 0;
  // Healthy and serving real traffic again: recovered, so the back-off starts over.
  if (e->state == State::healthy) {
    e->ejections = 0;
  }
}

std::optional<Transition> HealthTracker::drain(ReplicaId id) {
  Entry* e = find(id);
  if (e == nullptr || e->state == State::gone) {
    return std::nullopt;
  }
  return move(id, *e, State::draining, "drain requested");
}

std::optional<Transition> HealthTracker::undrain(ReplicaId id) {
  Entry* e = find(id);
  if (e == nullptr || e->state != State::draining) {
    return std::nullopt;
  }
  // Probes were ignored while draining, so old streaks say nothing about the replica now.
  e->probe_passes = 0;
  e->probe_failures = 0;
  e->traffic_failures = 0;
  return move(id, *e, State::joining, "undrain requested");
}

std::optional<Transition> HealthTracker::mark_gone(ReplicaId id) {
  Entry* e = find(id);
  if (e == nullptr) {
    return std::nullopt;
  }
  return move(id, *e, State::gone, "removed");
}

std::optional<Transition> HealthTracker::mark_unhealthy(ReplicaId id, std::string reason) {
  Entry* e = find(id);
  if (e == nullptr || e->state == State::unhealthy || e->state == State::draining ||
      e->state == State::gone) {
    return std::nullopt;
  }
  e->probe_passes = 0;
  return move(id, *e, State::unhealthy, std::move(reason));
}

TimePoint HealthTracker::next_probe_at(ReplicaId id, TimePoint last_probe,
                                       double jitter_unit) const {
  const Entry* e = find(id);
  // Unknown replica: a default interval rather than "now", so a stale probe loop cannot spin.
  const Thresholds defaults;
  const Thresholds& th = e != nullptr ? e->thresholds : defaults;

  // Factor uniform in [1 - jitter, 1 + jitter): mean exactly `interval`, spread +-jitter.
  const double jitter = std::clamp(th.jitter, 0.0, 1.0);
  const double unit = std::clamp(jitter_unit, 0.0, 1.0);
  const double factor = 1.0 - jitter + 2.0 * jitter * unit;
  const auto spread = std::chrono::duration<double, std::milli>(th.interval) * factor;
  TimePoint normal = last_probe + std::chrono::duration_cast<TimePoint::duration>(spread);

  if (e != nullptr && e->ejected_at.has_value() && e->ejections > 0) {
    // Back-off after a passive ejection: not before ejected_at + delay.
    return std::max(normal, *e->ejected_at + backoff_for(*e));
  }
  return normal;
}

State HealthTracker::state(ReplicaId id) const {
  const Entry* e = find(id);
  return e != nullptr ? e->state : State::gone;
}

std::uint32_t HealthTracker::consecutive_failures(ReplicaId id) const {
  const Entry* e = find(id);
  return e != nullptr ? std::max(e->probe_failures, e->traffic_failures) : 0;
}

std::uint32_t HealthTracker::ejections(ReplicaId id) const {
  const Entry* e = find(id);
  return e != nullptr ? e->ejections : 0;
}

milliseconds HealthTracker::backoff(ReplicaId id) const {
  const Entry* e = find(id);
  return e != nullptr ? backoff_for(*e) : milliseconds{0};
}

std::size_t HealthTracker::healthy_count(const std::string& model) const {
  return static_cast<std::size_t>(
      std::count_if(entries_.begin(), entries_.end(), [&](const auto& kv) {
        return kv.second.model == model && kv.second.state == State::healthy;
      }));
}

std::vector<ReplicaId> HealthTracker::replicas() const {
  std::vector<ReplicaId> ids;
  ids.reserve(entries_.size());
  for (const auto& [id, e] : entries_) {
    ids.push_back(id);
  }
  // Sorted so the admin listing and tests are deterministic.
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace fg::health
