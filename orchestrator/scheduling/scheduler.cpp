#include "orchestrator/scheduling/scheduler.hpp"

#include <algorithm>
#include <iterator>

namespace fg::scheduling {

namespace {

bool contains(const std::vector<ReplicaId>& ids, ReplicaId id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

bool Scheduler::has_free_slot(const Replica& r) {
  return r.routable && !r.removed && r.in_flight < r.slots;
}

bool Scheduler::serves(const Replica& r) {
  // A zero-slot replica can never take the request, so it must not keep a retry waiting.
  return r.routable && !r.removed && r.slots > 0;
}

bool Scheduler::exclusions_apply(const Model& m, const std::vector<ReplicaId>& exclude) const {
  for (ReplicaId id : m.replicas) {
    auto it = replicas_.find(id);
    if (it != replicas_.end() && serves(it->second) && !contains(exclude, id)) {
      return true;
    }
  }
  return false;
}

void Scheduler::add_model(const std::string& model) {
  models_.try_emplace(model);
}

std::vector<WaiterId> Scheduler::remove_model(const std::string& model) {
  auto mit = models_.find(model);
  if (mit == models_.end()) {
    return {};
  }
  Model& m = mit->second;
  std::vector<WaiterId> ids;
  ids.reserve(m.queue.size());
  for (const Waiter& w : m.queue) {
    ids.push_back(w.id);
    waiting_.erase(w.id);
  }
  // Replicas left behind go with the model; busy ones linger until their last release.
  for (ReplicaId id : m.replicas) {
    auto rit = replicas_.find(id);
    if (rit == replicas_.end()) {
      continue;
    }
    rit->second.routable = false;
    rit->second.removed = true;
    if (rit->second.in_flight == 0) {
      replicas_.erase(rit);
    }
  }
  models_.erase(mit);
  return ids;
}

bool Scheduler::has_model(const std::string& model) const {
  return models_.contains(model);
}

std::vector<Grant> Scheduler::add_replica(ReplicaId id, const std::string& model,
                                          std::uint32_t slots) {
  last_dispatch_visits_ = 0;
  auto mit = models_.find(model);
  if (mit == models_.end()) {
    return {};
  }
  std::optional<std::string> previous_model;
  auto rit = replicas_.find(id);
  if (rit == replicas_.end()) {
    replicas_.emplace(id, Replica{.model = model, .slots = slots});
  } else {
    Replica& r = rit->second;
    if (!r.removed && r.model == model) {
      // Re-announcing a live replica only refreshes it.
      r.slots = slots;
      r.routable = true;
      return dispatch(mit->second);
    }
    if (!r.removed) {
      detach(id, r.model);
      previous_model = r.model;
    }
    // In-flight bindings of an earlier incarnation keep counting until they are released.
    r.model = model;
    r.slots = slots;
    r.routable = true;
    r.removed = false;
  }
  mit->second.replicas.push_back(id);
  std::vector<Grant> grants = dispatch(mit->second);
  if (previous_model) {
    // Leaving a model can make its waiters' exclusions cover everything that is left.
    std::vector<Grant> more = dispatch(*previous_model);
    grants.insert(grants.end(), more.begin(), more.end());
  }
  return grants;
}

void Scheduler::remove_replica(ReplicaId id) {
  auto rit = replicas_.find(id);
  if (rit == replicas_.end() || rit->second.removed) {
    return;
  }
  Replica& r = rit->second;
  r.routable = false;
  r.removed = true;
  detach(id, r.model);
  if (r.in_flight == 0) {
    replicas_.erase(rit);
  }
}

std::vector<Grant> Scheduler::set_slots(ReplicaId id, std::uint32_t slots) {
  last_dispatch_visits_ = 0;
  auto rit = replicas_.find(id);
  if (rit == replicas_.end() || rit->second.removed) {
    return {};
  }
  rit->second.slots = slots;
  return dispatch(rit->second.model);
}

std::vector<Grant> Scheduler::set_routable(ReplicaId id, bool routable) {
  last_dispatch_visits_ = 0;
  auto rit = replicas_.find(id);
  if (rit == replicas_.end() || rit->second.removed) {
    return {};
  }
  rit->second.routable = routable;
  // Even turning a replica off can bind waiters whose exclusions now cover every replica.
  return dispatch(rit->second.model);
}

Scheduler::Admission Scheduler::admit(WaiterId waiter, const std::string& model, TimePoint now,
                                      const std::vector<ReplicaId>& exclude) {
  auto mit = models_.find(model);
  if (mit == models_.end()) {
    return {.outcome = Outcome::unknown_model};
  }
  Model& m = mit->second;
  // A reused waiter id supersedes its earlier queue entry; one id never waits twice.
  cancel(waiter);
  // Queued waiters cannot use any free slot (dispatch runs after every change), so binding a
  // newcomer here never overtakes someone who could have taken it.
  if (auto replica = choose(m, exclude)) {
    return {.outcome = Outcome::granted, .replica = *replica};
  }
  if (m.queue.size() >= queue_max_) {
    return {.outcome = Outcome::queue_full};
  }
  m.queue.push_back(Waiter{.id = waiter, .since = now, .exclude = exclude});
  waiting_[waiter] = {&m, std::prev(m.queue.end())};
  return {.outcome = Outcome::queued};
}

std::vector<Grant> Scheduler::release(ReplicaId id) {
  last_dispatch_visits_ = 0;
  auto rit = replicas_.find(id);
  if (rit == replicas_.end() || rit->second.in_flight == 0) {
    return {};
  }
  Replica& r = rit->second;
  --r.in_flight;
  std::string model = r.model;
  if (r.removed && r.in_flight == 0) {
    forget(id);
  }
  // For a removed replica this still matters: waiters that only excluded it may now be bound.
  return dispatch(model);
}

bool Scheduler::cancel(WaiterId waiter) {
  auto it = waiting_.find(waiter);
  if (it == waiting_.end()) {
    return false;
  }
  auto [model, pos] = it->second;
  model->queue.erase(pos);
  waiting_.erase(it);
  return true;
}

std::uint32_t Scheduler::in_flight(ReplicaId id) const {
  auto it = replicas_.find(id);
  return it == replicas_.end() ? 0 : it->second.in_flight;
}

std::uint32_t Scheduler::slots(ReplicaId id) const {
  auto it = replicas_.find(id);
  return it == replicas_.end() ? 0 : it->second.slots;
}

bool Scheduler::routable(ReplicaId id) const {
  auto it = replicas_.find(id);
  return it != replicas_.end() && it->second.routable && !it->second.removed;
}

bool Scheduler::has_replica(ReplicaId id) const {
  return replicas_.contains(id);
}

std::size_t Scheduler::queue_depth(const std::string& model) const {
  auto it = models_.find(model);
  return it == models_.end() ? 0 : it->second.queue.size();
}

std::optional<TimePoint> Scheduler::oldest_waiter_since(const std::string& model) const {
  auto it = models_.find(model);
  if (it == models_.end() || it->second.queue.empty()) {
    return std::nullopt;
  }
  return it->second.queue.front().since;
}

std::uint32_t Scheduler::busy_slots(const std::string& model) const {
  auto mit = models_.find(model);
  if (mit == models_.end()) {
    return 0;
  }
  std::uint32_t busy = 0;
  for (ReplicaId id : mit->second.replicas) {
    const Replica& r = replicas_.at(id);
    if (r.routable) {
      busy += r.in_flight;
    }
  }
  return busy;
}

std::uint32_t Scheduler::free_slots(const std::string& model) const {
  auto mit = models_.find(model);
  if (mit == models_.end()) {
    return 0;
  }
  std::uint32_t free = 0;
  for (ReplicaId id : mit->second.replicas) {
    const Replica& r = replicas_.at(id);
    if (has_free_slot(r)) {
      free += r.slots - r.in_flight;
    }
  }
  return free;
}

std::optional<ReplicaId> Scheduler::choose(Model& m, const std::vector<ReplicaId>& exclude) {
  const bool apply_exclusions = !exclude.empty() && exclusions_apply(m, exclude);
  const std::size_t n = m.replicas.size();
  Replica* best = nullptr;
  std::size_t best_index = 0;
  // Scanning from the rotation point makes the first of equally loaded replicas the one after
  // the last choice.
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t index = (m.rotation + i) % n;
    const ReplicaId id = m.replicas[index];
    Replica& r = replicas_.at(id);
    if (!has_free_slot(r) || (apply_exclusions && contains(exclude, id))) {
      continue;
    }
    // in_flight/slots compared by cross multiplication: exact, no floats.
    if (best == nullptr ||
        std::uint64_t{r.in_flight} * best->slots < std::uint64_t{best->in_flight} * r.slots) {
      best = &r;
      best_index = index;
    }
  }
  if (best == nullptr) {
    return std::nullopt;
  }
  ++best->in_flight;
  m.rotation = (best_index + 1) % n;
  return m.replicas[best_index];
}

std::vector<Grant> Scheduler::dispatch(const std::string& model) {
  auto mit = models_.find(model);
  if (mit == models_.end()) {
    last_dispatch_visits_ = 0;
    return {};
  }
  return dispatch(mit->second);
}

std::vector<Grant> Scheduler::dispatch(Model& m) {
  last_dispatch_visits_ = 0;
  if (m.queue.empty()) {
    return {};
  }
  std::uint32_t free = 0;
  for (ReplicaId id : m.replicas) {
    const Replica& r = replicas_.at(id);
    if (has_free_slot(r)) {
      free += r.slots - r.in_flight;
    }
  }
  std::vector<Grant> grants;
  // One pass in arrival order is enough: binding only removes free slots, so a waiter skipped
  // for its exclusions cannot become bindable later in the same pass. Each bind takes exactly
  // one free slot, so the scan ends as soon as none is left; without exclusions every visited
  // waiter is bound and the pass costs O(grants * replicas), independent of queue length.
  for (auto it = m.queue.begin(); it != m.queue.end() && free > 0;) {
    ++last_dispatch_visits_;
    if (auto replica = choose(m, it->exclude)) {
      grants.push_back(Grant{.waiter = it->id, .replica = *replica});
      --free;
      waiting_.erase(it->id);
      it = m.queue.erase(it);
    } else {
      ++it;
    }
  }
  return grants;
}

void Scheduler::forget(ReplicaId id) {
  replicas_.erase(id);
}

void Scheduler::detach(ReplicaId id, const std::string& model) {
  auto mit = models_.find(model);
  if (mit == models_.end()) {
    return;
  }
  Model& m = mit->second;
  auto pos = std::find(m.replicas.begin(), m.replicas.end(), id);
  if (pos == m.replicas.end()) {
    return;
  }
  const auto index = static_cast<std::size_t>(pos - m.replicas.begin());
  m.replicas.erase(pos);
  // Keep the rotation pointing at the same next replica.
  if (index < m.rotation) {
    --m.rotation;
  }
  if (m.rotation >= m.replicas.size()) {
    m.rotation = 0;
  }
}

}  // namespace fg::scheduling
