#include "orchestrator/health/probe_schedule.hpp"

#include <algorithm>

namespace fg::health {

ProbeSchedule::Duration ProbeSchedule::allowed_early(Duration interval) {
  return std::clamp(interval / 10, Duration::zero(), kMaxEarly);
}

bool ProbeSchedule::later(const Entry& a, const Entry& b) {
  return a.due != b.due ? a.due > b.due : a.id > b.id;
}

bool ProbeSchedule::live(const Entry& e) const {
  auto it = slots_.find(e.id);
  return it != slots_.end() && it->second.scheduled && it->second.version == e.version;
}

void ProbeSchedule::push(Entry e) {
  heap_.push_back(e);
  std::push_heap(heap_.begin(), heap_.end(), later);
}

ProbeSchedule::Entry ProbeSchedule::pop() {
  std::pop_heap(heap_.begin(), heap_.end(), later);
  const Entry e = heap_.back();
  heap_.pop_back();
  return e;
}

void ProbeSchedule::tidy() {
  if (heap_.size() > 2 * scheduled_ + 64) {
    std::erase_if(heap_, [this](const Entry& e) { return !live(e); });
    std::make_heap(heap_.begin(), heap_.end(), later);
  }
  while (!heap_.empty() && !live(heap_.front())) {
    pop();
  }
}

void ProbeSchedule::set(Id id, TimePoint due, Duration early) {
  Slot& slot = slots_[id];
  if (!slot.scheduled) {
    slot.scheduled = true;
    ++scheduled_;
  }
  slot.version = ++versions_;
  push(Entry{due, std::clamp(early, Duration::zero(), kMaxEarly), id, slot.version});
  tidy();
}

void ProbeSchedule::remove(Id id) {
  auto it = slots_.find(id);
  if (it == slots_.end()) {
    return;
  }
  if (it->second.scheduled) {
    --scheduled_;
  }
  slots_.erase(it);
  tidy();
}

bool ProbeSchedule::contains(Id id) const {
  auto it = slots_.find(id);
  return it != slots_.end() && it->second.scheduled;
}

std::optional<ProbeSchedule::TimePoint> ProbeSchedule::next_wake() const {
  if (heap_.empty()) {
    return std::nullopt;
  }
  return heap_.front().due;
}

std::vector<ProbeSchedule::Id> ProbeSchedule::take_due(TimePoint now) {
  std::vector<Id> out;
  std::vector<Entry> not_yet;  // within kMaxEarly of now, but not within their own allowance
  // Nothing due later than now + kMaxEarly can go now, whatever its own allowance.
  while (!heap_.empty() && heap_.front().due - kMaxEarly <= now) {
    const Entry e = pop();
    if (!live(e)) {
      continue;
    }
    if (e.due - e.early <= now) {
      out.push_back(e.id);
      slots_[e.id].scheduled = false;
      --scheduled_;
    } else {
      not_yet.push_back(e);
    }
  }
  for (const Entry& e : not_yet) {
    push(e);
  }
  tidy();
  return out;
}

}  // namespace fg::health
