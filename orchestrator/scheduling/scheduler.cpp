#include "orchestrator/scheduling/scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

namespace fg::scheduling {

namespace {

using Seconds = std::chrono::duration<double>;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Below this a hold is over: time points are exact, the arithmetic leading to them is not.
constexpr std::chrono::milliseconds kHoldResolution{1};

bool contains(const std::vector<ReplicaId>& ids, ReplicaId id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

bool has_index(const std::vector<std::size_t>& indices, std::size_t index) {
  return std::find(indices.begin(), indices.end(), index) != indices.end();
}

TimePoint after(TimePoint t, double seconds) {
  return t + std::chrono::duration_cast<TimePoint::duration>(Seconds(seconds));
}

double seconds_between(TimePoint from, TimePoint to) {
  return Seconds(to - from).count();
}

// Equal costs (within rounding) fall to the tie-breaks: rotation for replicas, age for waiters.
bool cheaper(double a, double b) {
  if (std::isinf(b)) {
    return a < b;
  }
  return a < b - 1e-9 * std::max(1.0, std::abs(b));
}

}  // namespace

Scheduler::Scheduler(std::uint32_t queue_max, RoutingOptions options, std::uint64_t random_seed)
    : queue_max_(queue_max),
      options_(options),
      random_state_(random_seed),
      speeds_(options),
      cache_(options.cache_budget_bytes, options.slot_prompt_similarity) {}

std::vector<Grant> Scheduler::set_options(const RoutingOptions& options) {
  options_ = options;
  speeds_.set_options(options);
  cache_.configure(options.cache_budget_bytes, options.slot_prompt_similarity);
  if (options_.policy != RoutingPolicy::expected_finish) {
    for (auto& [name, m] : models_) {
      for (WaiterId id : std::vector<WaiterId>(m.held.begin(), m.held.end())) {
        clear_hold(m, *waiting_.at(id).it);
      }
    }
  }
  return dispatch_all();
}

bool Scheduler::has_free_slot(const Replica& r) {
  return r.routable && !r.removed && r.bindings.size() < r.slots;
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

bool Scheduler::group_full(const std::string& group) const {
  if (group.empty()) {
    return false;
  }
  auto it = groups_.find(group);
  return it != groups_.end() && it->second.limit && it->second.in_flight >= *it->second.limit;
}

std::vector<std::size_t> Scheduler::free_indices(const Model& m) const {
  std::vector<std::size_t> free;
  for (std::size_t i = 0; i < m.replicas.size(); ++i) {
    if (has_free_slot(replicas_.at(m.replicas[i]))) {
      free.push_back(i);
    }
  }
  return free;
}

std::vector<std::size_t> Scheduler::usable(const Model& m, const std::vector<std::size_t>& free,
                                           const Request& request) const {
  const bool apply = !request.exclude.empty() && exclusions_apply(m, request.exclude);
  std::vector<std::size_t> out;
  out.reserve(free.size());
  for (std::size_t index : free) {
    if (!apply || !contains(request.exclude, m.replicas[index])) {
      out.push_back(index);
    }
  }
  return out;
}

bool Scheduler::any_usable(const Model& m, const std::vector<std::size_t>& free,
                           const Request& request) const {
  if (free.empty() || request.exclude.empty() || !exclusions_apply(m, request.exclude)) {
    return !free.empty();
  }
  for (std::size_t index : free) {
    if (!contains(request.exclude, m.replicas[index])) {
      return true;
    }
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// Models and replicas

void Scheduler::add_model(const std::string& model) {
  auto [it, inserted] = models_.try_emplace(model);
  if (inserted) {
    it->second.name = model;
  }
}

std::vector<WaiterId> Scheduler::remove_model(const std::string& model) {
  auto mit = models_.find(model);
  if (mit == models_.end()) {
    return {};
  }
  Model& m = mit->second;
  std::vector<std::pair<std::uint64_t, WaiterId>> queued;
  for (auto& [priority, band] : m.bands) {
    for (auto& [name, tenant] : band.tenants) {
      for (const Waiter& w : tenant.queue) {
        queued.emplace_back(w.seq, w.id);
        waiting_.erase(w.id);
      }
    }
  }
  std::sort(queued.begin(), queued.end());
  std::vector<WaiterId> ids;
  ids.reserve(queued.size());
  for (const auto& [seq, id] : queued) {
    ids.push_back(id);
  }
  // Replicas left behind go with the model; busy ones linger until their last release.
  for (ReplicaId id : m.replicas) {
    auto rit = replicas_.find(id);
    if (rit == replicas_.end()) {
      continue;
    }
    rit->second.routable = false;
    rit->second.removed = true;
    if (rit->second.bindings.empty()) {
      forget(id);
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
      cache_.set_slots(id, slots);
      return dispatch(mit->second);
    }
    if (!r.removed) {
      detach(id, r.model);
      previous_model = r.model;
    }
    if (r.model != model) {
      cache_.clear_phone(id);  // another model's prompts are no use
    }
    // In-flight bindings of an earlier incarnation keep counting until they are released.
    r.model = model;
    r.slots = slots;
    r.routable = true;
    r.removed = false;
  }
  speeds_.add_replica(id, model);
  cache_.set_slots(id, slots);
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
  if (r.bindings.empty()) {
    forget(id);
  }
}

std::vector<Grant> Scheduler::set_slots(ReplicaId id, std::uint32_t slots) {
  last_dispatch_visits_ = 0;
  auto rit = replicas_.find(id);
  if (rit == replicas_.end() || rit->second.removed) {
    return {};
  }
  rit->second.slots = slots;
  cache_.set_slots(id, slots);
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

void Scheduler::set_measured_speeds(ReplicaId id, double prefill_tps, double decode_tps) {
  speeds_.seed(id, prefill_tps, decode_tps);
}

void Scheduler::set_host_prompt_cache(ReplicaId id, std::uint64_t tokens) {
  auto rit = replicas_.find(id);
  if (rit == replicas_.end()) {
    return;
  }
  const double per_block = tokens_per_block(rit->second.model);
  cache_.set_host_capacity(id, static_cast<std::uint64_t>(static_cast<double>(tokens) / per_block));
}

void Scheduler::forget_prompt_cache(ReplicaId id) {
  cache_.clear_phone(id);
}

// ---------------------------------------------------------------------------------------------
// Admission, release, cancel

Scheduler::Admission Scheduler::admit(WaiterId waiter, const std::string& model, TimePoint now,
                                      const std::vector<ReplicaId>& exclude) {
  return admit(waiter, model, now, Request{.exclude = exclude});
}

Scheduler::Admission Scheduler::admit(WaiterId waiter, const std::string& model, TimePoint now,
                                      Request request) {
  observe(now);
  auto mit = models_.find(model);
  if (mit == models_.end()) {
    return {.outcome = Outcome::unknown_model};
  }
  Model& m = mit->second;
  // A reused waiter id supersedes its earlier queue entry; one id never waits twice.
  cancel(waiter);
  const bool sheddable = request.sheddable;
  const std::int32_t band = request.priority.value_or(options_.default_priority);
  note_request(m, band, request);
  Place place = enqueue(
      m, Waiter{.id = waiter, .since = now, .seq = next_seq_++, .request = std::move(request)});
  // The newcomer takes its turn like any waiter: it is bound now only if the dispatch rules
  // pick it. Queued waiters normally cannot use any free slot (dispatch runs after every
  // change); if one can (a hold ran out), it goes first at the next tick().
  std::vector<std::size_t> free = free_indices(m);
  if (!free.empty()) {
    Pass pass{.count_visits = false};
    if (auto pick = select(m, free, pass)) {
      if (&*pick->place.it == &*place.it) {
        const ReplicaId replica = bind(m, *pick).replica;
        // The grant (and the prompt it recorded) can end a reserve: say so to the next tick.
        dispatch_pending_ = dispatch_pending_ || (!m.recent.empty() && m.queued > 0);
        return {.outcome = Outcome::granted, .replica = replica};
      }
      dispatch_pending_ = true;
    }
  }
  if (sheddable) {
    Admission shed{.outcome = Outcome::queue_full, .shed = true, .retry_after = retry_after(m)};
    dequeue(place);
    return shed;
  }
  auto limit = options_.band_queue_max.find(band);
  const bool band_full =
      limit != options_.band_queue_max.end() && m.bands.at(band).size > limit->second;
  if (m.queued > queue_max_ || band_full) {
    dequeue(place);
    return {.outcome = Outcome::queue_full};
  }
  return {.outcome = Outcome::queued};
}

std::vector<Grant> Scheduler::release(ReplicaId id) {
  return release(id, now_);
}

std::vector<Grant> Scheduler::release(ReplicaId id, TimePoint now) {
  last_dispatch_visits_ = 0;
  auto rit = replicas_.find(id);
  if (rit == replicas_.end() || rit->second.bindings.empty()) {
    return {};
  }
  return finish(rit->second.bindings.front(), now, nullptr);
}

std::vector<Grant> Scheduler::complete(WaiterId waiter, TimePoint now,
                                       const Completion& completion) {
  last_dispatch_visits_ = 0;
  auto it = bound_.find(waiter);
  if (it == bound_.end()) {
    return {};
  }
  return finish(it->second, now, &completion);
}

bool Scheduler::cancel(WaiterId waiter) {
  auto it = waiting_.find(waiter);
  if (it == waiting_.end()) {
    return false;
  }
  dequeue(it->second);
  return true;
}

std::vector<Grant> Scheduler::tick(TimePoint now) {
  observe(now);
  dispatch_pending_ = false;
  return dispatch_all();
}

std::optional<TimePoint> Scheduler::next_wakeup() const {
  if (dispatch_pending_) {
    return now_;
  }
  std::optional<TimePoint> next;
  for (const auto& [name, m] : models_) {
    if (m.reserve_recheck && m.queued > 0 && (!next || *m.reserve_recheck < *next)) {
      next = m.reserve_recheck;
    }
    for (WaiterId id : m.held) {
      const TimePoint until = waiting_.at(id).it->hold_until;
      if (!next || until < *next) {
        next = until;
      }
    }
  }
  return next;
}

std::vector<Grant> Scheduler::set_group_limit(const std::string& group,
                                              std::optional<std::uint32_t> limit) {
  if (group.empty()) {
    return {};
  }
  Group& g = groups_[group];
  g.limit = limit;
  if (!g.limit && g.in_flight == 0) {
    groups_.erase(group);
  }
  return dispatch_all();
}

std::uint32_t Scheduler::group_in_flight(const std::string& group) const {
  auto it = groups_.find(group);
  return it == groups_.end() ? 0 : it->second.in_flight;
}

// ---------------------------------------------------------------------------------------------
// Queues and fair shares

double Scheduler::weight(const std::string& tenant) const {
  auto it = options_.tenant_weights.find(tenant);
  return it == options_.tenant_weights.end() ? 1.0 : std::max(it->second, 1e-9);
}

Scheduler::Place Scheduler::enqueue(Model& m, Waiter waiter) {
  const std::int32_t priority = waiter.request.priority.value_or(options_.default_priority);
  Band& band = m.bands[priority];
  auto [tit, inserted] = band.tenants.try_emplace(waiter.request.tenant);
  Tenant& tenant = tit->second;
  // A tenant that was idle cannot have saved up a share: it starts at the band's clock.
  if (inserted || tenant.queue.empty()) {
    tenant.usage = inserted ? band.virtual_usage : std::max(tenant.usage, band.virtual_usage);
  }
  const WaiterId id = waiter.id;
  tenant.queue.push_back(std::move(waiter));
  ++band.size;
  ++m.queued;
  Place place{
      .model = &m, .band = priority, .tenant = &tenant, .it = std::prev(tenant.queue.end())};
  waiting_[id] = place;
  return place;
}

void Scheduler::dequeue(Place place) {
  Model& m = *place.model;
  Waiter& w = *place.it;
  if (w.held) {
    m.held.erase(w.id);
  }
  waiting_.erase(w.id);
  place.tenant->queue.erase(place.it);
  auto bit = m.bands.find(place.band);
  --bit->second.size;
  --m.queued;
  settle_band(bit->second);
  if (bit->second.tenants.empty()) {
    m.bands.erase(bit);
  }
}

void Scheduler::settle_band(Band& band) {
  double least = kInf;
  for (const auto& [name, tenant] : band.tenants) {
    if (!tenant.queue.empty()) {
      least = std::min(least, tenant.usage);
    }
  }
  if (least < kInf) {
    band.virtual_usage = std::max(band.virtual_usage, least);
  }
  // An idle tenant at or below the clock carries nothing worth keeping; one above it keeps its
  // lead, so that going idle for a moment does not wipe out what it has received.
  std::erase_if(band.tenants, [&](const auto& entry) {
    return entry.second.queue.empty() && entry.second.usage <= band.virtual_usage;
  });
}

// ---------------------------------------------------------------------------------------------
// Costs

double Scheduler::tokens_per_block(const std::string& model) const {
  return static_cast<double>(openai::kPromptBlockBytes) * speeds_.tokens_per_byte(model);
}

Scheduler::Estimate Scheduler::estimate(const std::string& model, const Request& request) const {
  const double per_byte = speeds_.tokens_per_byte(model);
  return {.prompt_tokens = request.prompt_tokens
                               ? static_cast<double>(*request.prompt_tokens)
                               : static_cast<double>(request.prompt_bytes) * per_byte,
          .answer_tokens = speeds_.answer_tokens(model, request.max_tokens),
          .tokens_per_block = static_cast<double>(openai::kPromptBlockBytes) * per_byte};
}

double Scheduler::cached_tokens(const Estimate& e, std::size_t blocks) {
  return std::clamp(static_cast<double>(blocks) * e.tokens_per_block, 0.0,
                    std::max(e.prompt_tokens - 1, 0.0));
}

std::vector<Scheduler::FreeAt> Scheduler::binding_ends(const Replica& r, TimePoint now) const {
  // A binding past its expected end is expected to run as long again as it has overrun so far:
  // the longer it overruns, the less a slot of it is worth waiting for.
  std::vector<FreeAt> ends;
  ends.reserve(r.bindings.size());
  for (BindingId id : r.bindings) {
    const Binding& b = bindings_.at(id);
    const double left = now < b.expected_end ? seconds_between(now, b.expected_end)
                                             : seconds_between(b.expected_end, now);
    ends.push_back({.seconds = left, .end = b.expected_end, .slot = b.placement.slot});
  }
  std::sort(ends.begin(), ends.end(),
            [](const FreeAt& a, const FreeAt& b) { return a.seconds < b.seconds; });
  return ends;
}

double Scheduler::service_seconds(ReplicaId id, const Estimate& e, const Request& request,
                                  std::optional<std::uint32_t> also_idle) const {
  return service_seconds(id, e, request.prompt_blocks, also_idle);
}

double Scheduler::service_seconds(ReplicaId id, const Estimate& e,
                                  std::span<const openai::BlockHash> prompt,
                                  std::optional<std::uint32_t> also_idle) const {
  const std::size_t blocks =
      prompt.empty() ? 0 : cache_.expected_cached_blocks(id, prompt, also_idle);
  const double uncached = e.prompt_tokens - cached_tokens(e, blocks);
  return uncached * speeds_.prefill_seconds_per_token(id) +
         decode_steps(e.answer_tokens) * speeds_.decode_seconds_per_token(id);
}

// ---------------------------------------------------------------------------------------------
// Dispatch

std::optional<Scheduler::Pick> Scheduler::select(Model& m, const std::vector<std::size_t>& free,
                                                 Pass& pass) {
  if (options_.policy == RoutingPolicy::expected_finish) {
    return select_expected_finish(m, free, pass);
  }
  return select_least_loaded(m, free, pass);
}

std::size_t Scheduler::least_loaded_index(const Model& m,
                                          const std::vector<std::size_t>& candidates) const {
  const std::size_t n = m.replicas.size();
  const Replica* best = nullptr;
  std::size_t best_index = 0;
  std::size_t best_turn = 0;
  for (std::size_t index : candidates) {
    const Replica& r = replicas_.at(m.replicas[index]);
    // Equally loaded replicas go in rotation: the first after the last choice wins.
    const std::size_t turn = (index + n - m.rotation) % n;
    if (best == nullptr) {
      best = &r;
      best_index = index;
      best_turn = turn;
      continue;
    }
    // in_flight/slots compared by cross multiplication: exact, no floats.
    const std::uint64_t load = std::uint64_t{r.bindings.size()} * best->slots;
    const std::uint64_t best_load = std::uint64_t{best->bindings.size()} * r.slots;
    if (load < best_load || (load == best_load && turn < best_turn)) {
      best = &r;
      best_index = index;
      best_turn = turn;
    }
  }
  return best_index;
}

std::optional<Scheduler::Pick> Scheduler::select_least_loaded(Model& m,
                                                              const std::vector<std::size_t>& free,
                                                              Pass& pass) {
  for (auto& [priority, band] : m.bands) {
    Tenant* best = nullptr;
    double least = kInf;
    std::vector<Tenant*> candidates;
    for (auto& [name, tenant] : band.tenants) {
      // One pass in arrival order is enough: binding only removes free slots (and fills
      // groups), so a waiter skipped here cannot become bindable later in the same pass.
      auto [cursor, fresh] = pass.cursors.try_emplace(&tenant, tenant.queue.begin());
      auto& it = cursor->second;
      for (; it != tenant.queue.end(); ++it) {
        if (pass.count_visits) {
          ++last_dispatch_visits_;
        }
        if (!group_full(it->request.group) && any_usable(m, free, it->request)) {
          break;
        }
      }
      if (it != tenant.queue.end()) {
        candidates.push_back(&tenant);
        least = std::min(least, tenant.usage);
      }
    }
    // Within the fair share the oldest goes first.
    for (Tenant* t : candidates) {
      if (t->usage <= least + options_.fair_share_slack_tokens &&
          (best == nullptr || pass.cursors[t]->seq < pass.cursors[best]->seq)) {
        best = t;
      }
    }
    if (best != nullptr) {
      auto it = pass.cursors[best];
      const std::size_t index = least_loaded_index(m, usable(m, free, it->request));
      return Pick{.place = {.model = &m, .band = priority, .tenant = best, .it = it},
                  .replica = m.replicas[index],
                  .index = index};
    }
  }
  return std::nullopt;
}

std::optional<Scheduler::Pick> Scheduler::select_expected_finish(
    Model& m, const std::vector<std::size_t>& free, Pass& pass) {
  struct Entry {
    std::list<Waiter>::iterator it{};
    std::vector<std::size_t> usable{};
    Estimate estimate{};
    std::size_t index = 0;  // its cheapest free replica
    double cost = 0;
    bool due = false;
  };
  // One tenant's queue as far as it was scanned. Entries from `cursor` on are still to be
  // decided, in order; the ones before it chose to wait for a busy replica (held).
  struct Scan {
    Tenant* tenant = nullptr;
    std::list<Waiter>::iterator next{};
    std::size_t scanned = 0;
    std::vector<Entry> entries{};
    std::size_t cursor = 0;
  };
  // Due waiters first (the oldest), else the cheapest (the oldest of equals).
  auto before = [](const Entry& a, const Entry& b) {
    if (a.due != b.due) {
      return a.due;
    }
    if (!a.due && (cheaper(a.cost, b.cost) || cheaper(b.cost, a.cost))) {
      return cheaper(a.cost, b.cost);
    }
    return a.it->seq < b.it->seq;
  };
  const std::size_t n = m.replicas.size();
  // The free replicas the band being decided may take: all of them but those kept for a higher
  // band's recent prompts.
  const std::vector<std::size_t>* avail = &free;
  std::vector<std::size_t> unreserved;
  // Scans on: the window at first, then past it only until one more waiter can use a free
  // replica. The window bounds the work, never whether a free slot finds a waiter for it.
  auto scan = [&](Scan& sc) {
    const std::size_t from = sc.entries.size();
    while (sc.next != sc.tenant->queue.end() &&
           (sc.scanned < options_.scan_window || sc.entries.size() == from)) {
      auto it = sc.next++;
      ++sc.scanned;
      if (pass.count_visits) {
        ++last_dispatch_visits_;
      }
      Waiter& w = *it;
      std::vector<std::size_t> use;
      if (!group_full(w.request.group)) {
        use = usable(m, *avail, w.request);
      }
      if (use.empty()) {
        clear_hold(m, w);
        continue;
      }
      Entry e{.it = it, .estimate = estimate(m.name, w.request)};
      e.cost = kInf;
      std::size_t best_turn = n;
      for (std::size_t index : use) {
        // Equal costs go in rotation, so that equal replicas share the load.
        const std::size_t turn = (index + n - m.rotation) % n;
        const double cost = service_seconds(m.replicas[index], e.estimate, w.request, std::nullopt);
        if (cheaper(cost, e.cost) || (!cheaper(e.cost, cost) && turn < best_turn)) {
          e.cost = cost;
          e.index = index;
          best_turn = turn;
        }
      }
      e.usable = std::move(use);
      e.due = w.overtaken >= options_.max_overtakes;
      sc.entries.push_back(std::move(e));
    }
    std::sort(sc.entries.begin() + static_cast<std::ptrdiff_t>(from), sc.entries.end(), before);
  };
  // The busy replicas a waiter may wait for, soonest to free first; holds are decided afresh.
  pass.busy = busy_replicas(m);
  for (auto& [priority, band] : m.bands) {
    avail = &free;
    if (!m.recent.empty()) {
      const std::vector<std::size_t> kept =
          reserved_indices(m, priority, free, pass.busy, &m.reserve_recheck);
      if (!kept.empty()) {
        unreserved.clear();
        std::set_difference(free.begin(), free.end(), kept.begin(), kept.end(),
                            std::back_inserter(unreserved));
        avail = &unreserved;
        if (unreserved.empty()) {
          // Nothing this band may take is free: none of its waiters is held back any more.
          for (WaiterId id : std::vector<WaiterId>(m.held.begin(), m.held.end())) {
            const Place& place = waiting_.at(id);
            if (place.band == priority) {
              clear_hold(m, *place.it);
            }
          }
          continue;
        }
      }
    }
    std::vector<Scan> scans;
    for (auto& [name, tenant] : band.tenants) {
      Scan sc{.tenant = &tenant, .next = tenant.queue.begin()};
      scan(sc);
      scans.push_back(std::move(sc));
    }
    while (true) {
      double least = kInf;
      for (const Scan& sc : scans) {
        if (sc.cursor < sc.entries.size()) {
          least = std::min(least, sc.tenant->usage);
        }
      }
      if (least == kInf) {
        break;  // nobody in this band can use a free replica
      }
      Scan* chosen = nullptr;
      for (Scan& sc : scans) {
        if (sc.cursor < sc.entries.size() &&
            sc.tenant->usage <= least + options_.fair_share_slack_tokens &&
            (chosen == nullptr || before(sc.entries[sc.cursor], chosen->entries[chosen->cursor]))) {
          chosen = &sc;
        }
      }
      Entry& e = chosen->entries[chosen->cursor];
      Waiter& w = *e.it;
      // The hold is decided for the candidate only: the others stay in line for this slot. What
      // the slot loses when the next in line takes it instead (its cost here, at least) counts
      // against the hold.
      double displaced = 0;
      if (chosen->cursor + 1 < chosen->entries.size()) {
        displaced = std::max(chosen->entries[chosen->cursor + 1].cost - e.cost, 0.0);
      }
      if (!e.due && !w.request.sheddable && try_hold(m, w, e.estimate, e.cost, displaced, pass)) {
        if (++chosen->cursor == chosen->entries.size()) {
          scan(*chosen);
        }
        continue;
      }
      clear_hold(m, w);
      // Affinity yields to an older waiter with nowhere better to go (docs/routing.md): the
      // cheapest waiter here also has a busy replica that will finish it before that older one
      // would finish here, while no busy replica beats this one for the older waiter. Without
      // this, a prefix that lost its fast phones keeps none until its waiters are due.
      Entry* yield_to = nullptr;
      if (!e.due && options_.affinity_yield) {
        const BusyTarget alt = best_busy(m, w, e.estimate, kInf, pass);
        const double margin = 1.0 + std::max(options_.hold_margin, 0.0);
        const double gain = Seconds(options_.hold_min_gain).count();
        for (std::size_t i = chosen->cursor + 1; alt.busy != nullptr && i < chosen->entries.size();
             ++i) {
          Entry& other = chosen->entries[i];
          Waiter& o = *other.it;
          if (o.seq > w.seq || o.request.sheddable || !has_index(other.usable, e.index) ||
              (yield_to != nullptr && yield_to->it->seq < o.seq)) {
            continue;
          }
          const double here =
              service_seconds(m.replicas[e.index], other.estimate, o.request, std::nullopt);
          if (!(alt.time * margin + gain < here)) {
            continue;  // the cheapest would wait longer than the older one takes here
          }
          const BusyTarget theirs = best_busy(m, o, other.estimate, here, pass);
          if (theirs.busy == nullptr || !(theirs.time * margin + gain < here)) {
            yield_to = &other;
          }
        }
      }
      const Entry& g = yield_to != nullptr ? *yield_to : e;
      // Older waiters of the same queue that could have used this slot are overtaken, unless
      // they chose to wait for a busy one.
      std::vector<std::list<Waiter>::iterator> overtaken;
      for (std::size_t i = chosen->cursor; i < chosen->entries.size(); ++i) {
        const Entry& other = chosen->entries[i];
        if (other.it->seq < g.it->seq && has_index(other.usable, e.index)) {
          overtaken.push_back(other.it);
        }
      }
      if (yield_to != nullptr) {
        clear_hold(m, *g.it);
        return Pick{.place = {.model = &m, .band = priority, .tenant = chosen->tenant, .it = g.it},
                    .replica = m.replicas[e.index],
                    .index = e.index,
                    .overtaken = std::move(overtaken)};
      }
      std::size_t index = e.index;
      if (options_.exploration > 0 && e.usable.size() > 1 && random_unit() < options_.exploration) {
        const auto k =
            static_cast<std::size_t>(random_unit() * static_cast<double>(e.usable.size()));
        index = e.usable[std::min(k, e.usable.size() - 1)];
      }
      return Pick{.place = {.model = &m, .band = priority, .tenant = chosen->tenant, .it = e.it},
                  .replica = m.replicas[index],
                  .index = index,
                  .overtaken = std::move(overtaken)};
    }
  }
  return std::nullopt;
}

Scheduler::BusyTarget Scheduler::best_busy(const Model& m, const Waiter& w, const Estimate& e,
                                           double free_seconds, Pass& pass) const {
  const bool apply = !w.request.exclude.empty() && exclusions_apply(m, w.request.exclude);
  const double margin = 1.0 + std::max(options_.hold_margin, 0.0);
  const double gain = Seconds(options_.hold_min_gain).count();
  BusyReplica* target = nullptr;
  double target_time = kInf;
  double target_service = 0;
  TimePoint target_end{};
  for (BusyReplica& busy : pass.busy) {
    // Sorted by the soonest end: once that alone cannot beat the best found (or the free
    // replica), nothing later can.
    const double soonest = busy.ends.front().seconds;
    if (soonest >= target_time || soonest * margin + gain >= free_seconds) {
      break;
    }
    const Replica& r = replicas_.at(busy.id);
    // One waiter per busy slot: the next one to free.
    if (busy.promised >= r.slots || (apply && contains(w.request.exclude, busy.id))) {
      continue;
    }
    const std::size_t nth =
        std::min(r.bindings.size() - r.slots + busy.promised, busy.ends.size() - 1);
    const FreeAt& frees = busy.ends[nth];
    const double service = service_seconds(busy.id, e, w.request, busy.ends.front().slot);
    if (cheaper(frees.seconds + service, target_time)) {
      target = &busy;
      target_time = frees.seconds + service;
      target_service = service;
      target_end = frees.end;
    }
  }
  return {.busy = target, .time = target_time, .service = target_service, .end = target_end};
}

std::vector<Scheduler::BusyReplica> Scheduler::busy_replicas(const Model& m) const {
  std::vector<BusyReplica> busy;
  for (ReplicaId id : m.replicas) {
    const Replica& r = replicas_.at(id);
    if (serves(r) && !has_free_slot(r)) {
      busy.push_back({.id = id, .ends = binding_ends(r, now_)});
    }
  }
  std::sort(busy.begin(), busy.end(), [](const BusyReplica& a, const BusyReplica& b) {
    return a.ends.front().seconds < b.ends.front().seconds;
  });
  return busy;
}

// ---------------------------------------------------------------------------------------------
// Reserve for higher bands

void Scheduler::note_request(Model& m, std::int32_t band, const Request& request) {
  if (!wants_prompt_blocks() || options_.reserve_prompts == 0) {
    return;
  }
  // Only a band above the lowest one the model has served has anything to be kept from: a fleet
  // with one band records nothing.
  m.lowest_band = std::min(m.lowest_band.value_or(band), band);
  if (band <= *m.lowest_band) {
    return;
  }
  const openai::BlockHash key = request.prompt_blocks.empty() ? 0 : request.prompt_blocks.front();
  auto it = std::find_if(m.recent.begin(), m.recent.end(),
                         [&](const Recent& r) { return r.band == band && r.key == key; });
  if (it == m.recent.end()) {
    if (m.recent.size() >= options_.reserve_prompts) {
      m.recent.erase(
          std::min_element(m.recent.begin(), m.recent.end(),
                           [](const Recent& a, const Recent& b) { return a.seen < b.seen; }));
    }
    // Until a second prompt shows what recurs, the first keeps capacity only (no prefix). A prompt
    // quiet for longer than reserve_window is not forgotten: what it shared comes back with the
    // next one (simulated, 1-hour runs: 20 -> 11 interactive reviews of 1,900 read whole).
    m.recent.push_back({.band = band, .key = key});
    it = std::prev(m.recent.end());
  } else {
    it->shared = common_prefix_blocks(it->last, request.prompt_blocks);
  }
  it->last.assign(request.prompt_blocks.begin(), request.prompt_blocks.end());
  it->prompt_tokens = estimate(m.name, request).prompt_tokens;
  it->max_tokens = request.max_tokens;
  it->seen = now_;
}

std::vector<std::size_t> Scheduler::reserved_indices(const Model& m, std::int32_t band,
                                                     const std::vector<std::size_t>& free,
                                                     const std::vector<BusyReplica>& busy,
                                                     std::optional<TimePoint>* recheck) const {
  std::vector<std::size_t> kept;
  if (free.empty() || options_.reserve_prompts == 0) {
    return kept;
  }
  const TimePoint horizon = now_ + kHoldResolution - options_.reserve_window;
  std::vector<const Recent*> order;
  for (const Recent& r : m.recent) {
    if (r.band > band && r.seen > horizon) {
      order.push_back(&r);
    }
  }
  if (order.empty()) {
    return kept;
  }
  // When the cap binds, the prompts seen last keep their replica.
  std::sort(order.begin(), order.end(),
            [](const Recent* a, const Recent* b) { return a->seen > b->seen; });
  std::size_t serving = 0;
  for (ReplicaId id : m.replicas) {
    serving += serves(replicas_.at(id)) ? 1 : 0;
  }
  const std::size_t cap = serving / 2;
  const double margin = 1.0 + std::max(options_.reserve_margin, 0.0);
  const double per_block = tokens_per_block(m.name);
  struct Wait {
    double left = 0;
    double service = 0;
    bool overrun = false;
  };
  std::vector<Wait> waits;
  for (const Recent* r : order) {
    if (kept.size() >= cap) {
      break;
    }
    const Estimate e{.prompt_tokens = r->prompt_tokens,
                     .answer_tokens = speeds_.answer_tokens(m.name, r->max_tokens),
                     .tokens_per_block = per_block};
    const std::span<const openai::BlockHash> prefix(r->last.data(), r->shared);
    double idle_best = kInf;
    std::optional<std::size_t> best;
    double best_service = kInf;
    for (std::size_t index : free) {
      const double service = service_seconds(m.replicas[index], e, prefix, std::nullopt);
      idle_best = std::min(idle_best, service);
      if (cheaper(service, best_service)) {
        best = index;
        best_service = service;
      }
    }
    waits.clear();
    for (const BusyReplica& b : busy) {
      const Replica& rep = replicas_.at(b.id);
      const FreeAt& frees = b.ends[std::min(rep.bindings.size() - rep.slots, b.ends.size() - 1)];
      const double service = service_seconds(b.id, e, prefix, b.ends.front().slot);
      idle_best = std::min(idle_best, service);
      waits.push_back({.left = frees.seconds, .service = service, .overrun = frees.end <= now_});
    }
    // What the prompt would take on an idle fleet, and how much later it may finish.
    const double bound = idle_best * margin;
    const bool covered = std::any_of(waits.begin(), waits.end(), [&](const Wait& w) {
      return !cheaper(bound, w.left + w.service);
    });
    if (covered || !best || best_service > bound) {
      continue;  // a busy replica finishes it in time anyway, or no free one would
    }
    if (!has_index(kept, *best)) {
      kept.push_back(*best);
    }
    if (recheck != nullptr) {
      // Time alone releases the replica when a busy one comes within the bound (one that has
      // overrun only gets further), or when the prompt is no longer recent.
      TimePoint when = r->seen + options_.reserve_window;
      for (const Wait& w : waits) {
        if (!w.overrun && w.service <= bound) {
          const double in = std::max(w.left + w.service - bound, 0.001);
          when = std::min(when, after(now_, in));
        }
      }
      *recheck = recheck->has_value() ? std::min(**recheck, when) : when;
    }
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

std::vector<ReplicaId> Scheduler::reserved(const std::string& model, std::int32_t priority) const {
  auto mit = models_.find(model);
  if (mit == models_.end() || options_.policy != RoutingPolicy::expected_finish ||
      mit->second.recent.empty()) {
    return {};
  }
  const Model& m = mit->second;
  std::vector<ReplicaId> ids;
  for (std::size_t index :
       reserved_indices(m, priority, free_indices(m), busy_replicas(m), nullptr)) {
    ids.push_back(m.replicas[index]);
  }
  return ids;
}

bool Scheduler::try_hold(Model& m, Waiter& w, const Estimate& e, double free_seconds,
                         double displaced, Pass& pass) {
  const double margin = 1.0 + std::max(options_.hold_margin, 0.0);
  const double gain = Seconds(options_.hold_min_gain).count();
  const BusyTarget best = best_busy(m, w, e, free_seconds, pass);
  BusyReplica* target = best.busy;
  const double target_time = best.time;
  const double target_service = best.service;
  const TimePoint target_end = best.end;
  if (target == nullptr) {
    return false;
  }
  const TimePoint since = w.held_since.value_or(now_);
  // A hold must gain the waiter more than the slot loses by going to the next in line instead:
  // otherwise a slow free phone whose own prefix's waiters all wait for fast phones reads a
  // whole prompt for another prefix.
  if (!(target_time * margin + gain < free_seconds) ||
      !(seconds_between(since, now_) < free_seconds) || !(target_time + displaced < free_seconds)) {
    return false;
  }
  // Without news the busy slot is worth waiting for until its overrun eats the gain, and never
  // longer than the free replica would have taken.
  const TimePoint gain_ends = after(target_end, (free_seconds - gain) / margin - target_service);
  const TimePoint until = std::min(gain_ends, after(since, free_seconds));
  if (until <= now_ + kHoldResolution) {
    return false;  // the hold would end now (rounding at the very moment it runs out)
  }
  if (!w.held) {
    w.held = true;
    m.held.insert(w.id);
  }
  w.held_since = since;
  w.hold_until = until;
  ++target->promised;
  return true;
}

void Scheduler::clear_hold(Model& m, Waiter& w) {
  if (w.held) {
    w.held = false;
    m.held.erase(w.id);
  }
  w.held_since.reset();
}

Grant Scheduler::bind(Model& m, const Pick& pick) {
  Waiter& w = *pick.place.it;
  const ReplicaId id = pick.replica;
  Replica& r = replicas_.at(id);
  Binding b{.waiter = w.id,
            .replica = id,
            .model = m.name,
            .band = pick.place.band,
            .tenant = w.request.tenant,
            .group = w.request.group,
            .start = now_};
  const Estimate e = estimate(m.name, w.request);
  b.prompt_bytes = w.request.prompt_bytes;
  b.prompt_tokens = e.prompt_tokens;
  // least_loaded reads nothing from the prompt-cache model; a request without blocks under it
  // is not placed there (a policy switched on by a reload starts from what the phones report).
  b.cache_tracked = wants_prompt_blocks() || !w.request.prompt_blocks.empty();
  if (b.cache_tracked) {
    b.placement = cache_.on_send(id, w.request.prompt_blocks);
  }
  b.cached_tokens = cached_tokens(e, b.placement.cached_blocks);
  b.answer_tokens = e.answer_tokens;
  const double uncached = b.prompt_tokens - b.cached_tokens;
  b.expected_end =
      after(now_, uncached * speeds_.prefill_seconds_per_token(id) +
                      decode_steps(b.answer_tokens) * speeds_.decode_seconds_per_token(id));
  b.charged = uncached + b.answer_tokens;
  pick.place.tenant->usage += b.charged / weight(b.tenant);
  if (!b.group.empty()) {
    ++groups_[b.group].in_flight;
  }
  const BindingId bid = next_binding_++;
  r.bindings.push_back(bid);
  bound_[w.id] = bid;
  bindings_.emplace(bid, std::move(b));
  m.rotation = (pick.index + 1) % m.replicas.size();
  for (auto it : pick.overtaken) {
    ++it->overtaken;
  }
  const Grant grant{.waiter = w.id, .replica = id};
  dequeue(pick.place);
  return grant;
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
  m.reserve_recheck.reset();
  std::vector<Grant> grants;
  Pass pass;
  // Each bind takes exactly one free slot, so the loop ends as soon as none is left; in
  // least_loaded without exclusions every visited waiter is bound and the pass costs
  // O(grants * replicas), independent of queue length.
  while (m.queued > 0) {
    std::vector<std::size_t> free = free_indices(m);
    if (free.empty()) {
      break;
    }
    auto pick = select(m, free, pass);
    if (!pick) {
      break;
    }
    auto cursor = pass.cursors.find(pick->place.tenant);
    if (cursor != pass.cursors.end() && cursor->second == pick->place.it) {
      ++cursor->second;
    }
    grants.push_back(bind(m, *pick));
  }
  if (!m.held.empty() && free_indices(m).empty()) {
    // Nothing free is left idle: nobody is held back any more.
    for (WaiterId id : std::vector<WaiterId>(m.held.begin(), m.held.end())) {
      clear_hold(m, *waiting_.at(id).it);
    }
  }
  return grants;
}

std::vector<Grant> Scheduler::dispatch_all() {
  std::vector<Grant> grants;
  for (auto& [name, m] : models_) {
    std::vector<Grant> more = dispatch(m);
    grants.insert(grants.end(), more.begin(), more.end());
  }
  return grants;
}

// ---------------------------------------------------------------------------------------------
// Completion and learning

std::vector<Grant> Scheduler::finish(BindingId id, TimePoint now, const Completion* completion) {
  observe(now);
  auto bit = bindings_.find(id);
  Binding b = std::move(bit->second);
  bindings_.erase(bit);
  if (auto w = bound_.find(b.waiter); w != bound_.end() && w->second == id) {
    bound_.erase(w);
  }
  Replica& r = replicas_.at(b.replica);
  std::erase(r.bindings, id);
  if (b.cache_tracked) {
    cache_.on_finish(b.replica, b.placement.slot);
  }
  bool group_opened = false;
  if (!b.group.empty()) {
    auto git = groups_.find(b.group);
    Group& g = git->second;
    const bool was_full = g.limit && g.in_flight >= *g.limit;
    --g.in_flight;
    group_opened = was_full && g.in_flight < *g.limit;
    if (!g.limit && g.in_flight == 0) {
      groups_.erase(git);
    }
  }
  if (completion != nullptr) {
    learn(b, now, *completion);
  }
  const std::string model = r.model;
  if (r.removed && r.bindings.empty()) {
    forget(b.replica);
  }
  // For a removed replica this still matters: waiters that only excluded it may now be bound.
  std::vector<Grant> grants = dispatch(model);
  if (group_opened) {
    // The group's waiters may wait in any model.
    std::vector<Grant> more = dispatch_all();
    grants.insert(grants.end(), more.begin(), more.end());
  }
  return grants;
}

void Scheduler::learn(const Binding& b, TimePoint now, const Completion& c) {
  if (!c.ok) {
    return;
  }
  speeds_.learn_model(b.model, b.prompt_bytes, c);
  const double prompt = c.prompt_tokens ? static_cast<double>(*c.prompt_tokens) : b.prompt_tokens;
  double uncached = std::max(prompt - b.cached_tokens, 0.0);
  if (c.timings) {
    uncached = c.timings->prompt_n;
  } else if (c.cached_tokens) {
    uncached = std::max(prompt - static_cast<double>(*c.cached_tokens), 0.0);
  }
  double answer = b.answer_tokens;
  if (c.completion_tokens) {
    answer = static_cast<double>(*c.completion_tokens);
  } else if (c.timings) {
    answer = c.timings->predicted_n;
  }
  SpeedSample sample{.uncached_tokens = uncached,
                     .answer_tokens = answer,
                     .timings = c.timings,
                     .duration_seconds =
                         c.duration ? Seconds(*c.duration).count() : seconds_between(b.start, now)};
  if (c.first_token_after) {
    sample.first_token_seconds = Seconds(*c.first_token_after).count();
  }
  speeds_.learn(b.replica, sample);
  if (c.cached_tokens && b.prompt_bytes > 0 && b.cache_tracked) {
    const double blocks = static_cast<double>(*c.cached_tokens) / tokens_per_block(b.model);
    cache_.on_report(b.replica, b.placement, static_cast<std::size_t>(blocks));
  }
  // The fair share counts what the request really cost, not what was expected.
  auto mit = models_.find(b.model);
  if (mit != models_.end()) {
    auto bit = mit->second.bands.find(b.band);
    if (bit != mit->second.bands.end()) {
      auto tit = bit->second.tenants.find(b.tenant);
      if (tit != bit->second.tenants.end()) {
        tit->second.usage += (uncached + answer - b.charged) / weight(b.tenant);
      }
    }
  }
}

std::chrono::seconds Scheduler::retry_after(const Model& m) const {
  double soonest = kInf;
  for (ReplicaId id : m.replicas) {
    const Replica& r = replicas_.at(id);
    if (!serves(r)) {
      continue;
    }
    if (has_free_slot(r)) {
      soonest = 0;
      continue;
    }
    const std::vector<FreeAt> ends = binding_ends(r, now_);
    const std::size_t nth = std::min(r.bindings.size() - r.slots, ends.size() - 1);
    soonest = std::min(soonest, ends[nth].seconds);
  }
  const auto low = options_.shed_retry_after_min;
  const auto high = std::max(options_.shed_retry_after_max, low);
  if (soonest == kInf) {
    return high;
  }
  return std::clamp(std::chrono::seconds(static_cast<std::int64_t>(std::ceil(soonest))), low, high);
}

// ---------------------------------------------------------------------------------------------
// Bookkeeping and queries

void Scheduler::forget(ReplicaId id) {
  replicas_.erase(id);
  speeds_.remove_replica(id);
  cache_.remove_phone(id);
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

void Scheduler::observe(TimePoint now) {
  now_ = std::max(now_, now);
}

double Scheduler::random_unit() {
  // splitmix64: a seeded, platform-independent stream.
  std::uint64_t x = (random_state_ += 0x9E3779B97F4A7C15ULL);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  x ^= x >> 31;
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

std::uint32_t Scheduler::in_flight(ReplicaId id) const {
  auto it = replicas_.find(id);
  return it == replicas_.end() ? 0 : static_cast<std::uint32_t>(it->second.bindings.size());
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
  return it == models_.end() ? 0 : it->second.queued;
}

std::size_t Scheduler::band_depth(const std::string& model, std::int32_t priority) const {
  auto it = models_.find(model);
  if (it == models_.end()) {
    return 0;
  }
  auto bit = it->second.bands.find(priority);
  return bit == it->second.bands.end() ? 0 : bit->second.size;
}

std::optional<TimePoint> Scheduler::oldest_waiter_since(const std::string& model) const {
  auto it = models_.find(model);
  if (it == models_.end()) {
    return std::nullopt;
  }
  const Waiter* oldest = nullptr;
  for (const auto& [priority, band] : it->second.bands) {
    for (const auto& [name, tenant] : band.tenants) {
      if (!tenant.queue.empty() && (oldest == nullptr || tenant.queue.front().seq < oldest->seq)) {
        oldest = &tenant.queue.front();
      }
    }
  }
  if (oldest == nullptr) {
    return std::nullopt;
  }
  return oldest->since;
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
      busy += static_cast<std::uint32_t>(r.bindings.size());
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
      free += r.slots - static_cast<std::uint32_t>(r.bindings.size());
    }
  }
  return free;
}

bool Scheduler::held(WaiterId waiter) const {
  auto it = waiting_.find(waiter);
  return it != waiting_.end() && it->second.it->held;
}

std::uint32_t Scheduler::overtaken(WaiterId waiter) const {
  auto it = waiting_.find(waiter);
  return it == waiting_.end() ? 0 : it->second.it->overtaken;
}

std::optional<SpeedSnapshot> Scheduler::speeds(ReplicaId id) const {
  if (!replicas_.contains(id)) {
    return std::nullopt;
  }
  return speeds_.snapshot(id);
}

std::optional<double> Scheduler::tenant_usage(const std::string& model, std::int32_t priority,
                                              const std::string& tenant) const {
  auto mit = models_.find(model);
  if (mit == models_.end()) {
    return std::nullopt;
  }
  auto bit = mit->second.bands.find(priority);
  if (bit == mit->second.bands.end()) {
    return std::nullopt;
  }
  auto tit = bit->second.tenants.find(tenant);
  if (tit == bit->second.tenants.end()) {
    return std::nullopt;
  }
  return tit->second.usage;
}

}  // namespace fg::scheduling
