#include "orchestrator/health/probe_schedule.hpp"

#include <algorithm>

namespace fg::health {

ProbeSchedule::Duration ProbeSchedule::allowed_early(Duration interval) {
  return std::clamp(interval / 10, Duration::zero(), kMaxEarly);
}

void ProbeSchedule::set(Id id, TimePoint due, Duration early) {
  remove(id);
  queue_.emplace(Key{due, id}, std::clamp(early, Duration::zero(), kMaxEarly));
  by_id_.emplace(id, due);
}

void ProbeSchedule::remove(Id id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) {
    return;
  }
  queue_.erase(Key{it->second, id});
  by_id_.erase(it);
}

std::optional<ProbeSchedule::TimePoint> ProbeSchedule::next_wake() const {
  if (queue_.empty()) {
    return std::nullopt;
  }
  return queue_.begin()->first.first;
}

std::vector<ProbeSchedule::Id> ProbeSchedule::take_due(TimePoint now) {
  std::vector<Id> out;
  // Nothing due later than now + kMaxEarly can go now, whatever its own allowance.
  for (auto it = queue_.begin(); it != queue_.end() && it->first.first - kMaxEarly <= now;) {
    if (it->first.first - it->second <= now) {
      out.push_back(it->first.second);
      by_id_.erase(it->first.second);
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

}  // namespace fg::health
