#include "orchestrator/health/probe_schedule.hpp"

#include <algorithm>

namespace fg::health {

ProbeSchedule::Duration ProbeSchedule::allowed_early(Duration interval) {
  return std::clamp(interval / 10, Duration::zero(), kMaxEarly);
}

bool ProbeSchedule::later(const Entry& a, const Entry& b) {
  return a.due != b.due ? a.due > b.due : a.id > b.id;
}

void ProbeSchedule::push(const Entry& e) {
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

ProbeSchedule::Slot ProbeSchedule::add(Id id) {
  Slot slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    slot = static_cast<Slot>(slots_.size());
    slots_.emplace_back();
  }
  slots_[slot] = SlotState{id, 0, false};
  return slot;
}

void ProbeSchedule::set(Slot slot, TimePoint due, Duration early) {
  SlotState& s = slots_[slot];
  if (!s.scheduled) {
    s.scheduled = true;
    ++scheduled_;
  }
  s.version = ++versions_;
  push(Entry{due, std::clamp(early, Duration::zero(), kMaxEarly), s.id, s.version, slot});
  tidy();
}

void ProbeSchedule::remove(Slot slot) {
  SlotState& s = slots_[slot];
  if (s.scheduled) {
    --scheduled_;
  }
  s = SlotState{};
  free_.push_back(slot);
  tidy();
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
      slots_[e.slot].scheduled = false;
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
