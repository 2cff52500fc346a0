#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/openai/prompt_blocks.hpp"
#include "orchestrator/scheduling/prompt_cache_model.hpp"
#include "orchestrator/scheduling/routing_options.hpp"
#include "orchestrator/scheduling/speed_model.hpp"
#include "orchestrator/scheduling/types.hpp"

namespace fg::scheduling {

// A queued request bound to a replica: the caller now holds one slot of that replica and must
// release it exactly once (release(replica) or complete(waiter)).
struct Grant {
  WaiterId waiter = 0;
  ReplicaId replica = 0;
};

// What the scheduler knows about one request. Every field has a default, so a caller that knows
// nothing (today's admit(waiter, model, now, exclude)) gets today's behaviour.
struct Request {
  std::vector<ReplicaId> exclude{};  // replicas already tried (retries)
  // Canonical prompt rendering (common/openai/prompt_blocks.hpp): its block hashes and length.
  std::vector<openai::BlockHash> prompt_blocks{};
  std::uint64_t prompt_bytes = 0;
  std::optional<std::uint32_t> prompt_tokens{};  // when the caller counted them; else bytes
  std::optional<std::uint32_t> max_tokens{};     // max_completion_tokens, else max_tokens
  std::optional<std::int32_t> priority{};        // band; absent: options.default_priority
  bool sheddable = false;  // refused (shed) instead of queued when no slot is free for it
  std::string tenant{};    // fair shares within a band (the API key's name); "" is one tenant
  std::string group{};     // concurrency cap (set_group_limit), e.g. one batch; "" is none
};

// Slot accounting, queues and replica choice. Pure: no I/O, no clock of its own (callers pass
// `now`; calls without one use the latest `now` seen), randomness from a seeded generator,
// single-threaded. The scheduler is the only owner of in-flight counts. docs/routing.md explains
// the decision; the rules that always hold:
//
// - in_flight(r) <= slots(r) for every replica, always (a replica whose slots shrink below its
//   in-flight count just receives nothing until it drains below the new limit). Only routable
//   replicas receive requests.
// - Bands are strict: a free slot goes to the highest band with a waiter that can use it.
//   Within a band, tenants share by tokens received / weight: one more than
//   fair_share_slack_tokens ahead of the least served tenant waits. A group at its cap waits.
// - least_loaded: among free replicas the lowest in_flight/slots, ties to the replica after the
//   one chosen last (rotation); a freed slot goes to the oldest waiter (of the tenant the fair
//   share picks) that can use it.
// - expected_finish: a request's cost on a replica is its expected finish: time until the
//   replica has a free slot + uncached prompt tokens / prefill speed + expected answer tokens /
//   decode speed (learned). A newcomer takes the free replica that finishes it first; a freed
//   slot goes to the waiter it finishes first among the first scan_window of each tenant's
//   queue (its cached prefix makes it cheap), unless an older waiter of that queue has no busy
//   replica worth waiting for while the cheapest one has a busy replica that finishes it before
//   the older one would finish here (affinity_yield): then the older one takes it. A waiter is
//   overtaken at most max_overtakes times by later waiters of its queue, then it goes first. A
//   free replica stays idle for a waiter only while a busy replica is expected to finish it
//   sooner by the hold margin, and by more than the free one loses to the next in line (at most
//   one waiter per busy slot, never longer than it would have taken on the free one); the shell
//   calls tick() at next_wakeup() to re-decide.
// - Reserve (expected_finish): a lower band may not take the last free replica that would finish
//   a recent prompt of a higher band within (1 + reserve_margin) of its idle-fleet finish, when
//   no busy replica will; at most half the replicas, only while the higher band is recent.
// - Work conservation: at rest, no waiter that can use a free slot waits, except one held for a
//   busy replica, or kept from a reserved one, as above. A request that cannot be bound now
//   waits and is bound late, the moment a slot it can use frees.
// - A waiter may exclude replicas it already tried (retries). When its exclusions cover every
//   routable replica of the model, they are ignored (a retry on the same replica beats waiting
//   forever).
// - A sheddable request that cannot be bound at once is refused (shed), with the expected time
//   until a slot frees as Retry-After.
class Scheduler {
 public:
  enum class Outcome { granted, queued, queue_full, unknown_model };
  struct Admission {
    Outcome outcome = Outcome::unknown_model;
    ReplicaId replica = 0;  // when granted
    // queue_full only: true when the request was sheddable and no slot was free (answer 503 with
    // Retry-After), false when its model's or band's queue is at its limit (429).
    bool shed = false;
    std::chrono::seconds retry_after{0};
  };

  explicit Scheduler(std::uint32_t queue_max, RoutingOptions options = {},
                     std::uint64_t random_seed = 0x5EED);

  void set_queue_max(std::uint32_t queue_max) { queue_max_ = queue_max; }
  // Applies at once (a policy switch re-decides the queues); returns the grants that allows.
  std::vector<Grant> set_options(const RoutingOptions& options);
  const RoutingOptions& options() const { return options_; }
  // Whether the policy reads requests' prompt blocks (expected_finish): callers hash a prompt
  // only then, and the prompt-cache model places only requests that carry blocks otherwise.
  bool wants_prompt_blocks() const { return options_.policy == RoutingPolicy::expected_finish; }

  // Models must exist before replicas or requests name them. Adding twice is a no-op.
  void add_model(const std::string& model);
  // Removes a model with no replicas left; queued waiters are returned (in arrival order) so the
  // caller can answer them (the model no longer exists).
  std::vector<WaiterId> remove_model(const std::string& model);
  bool has_model(const std::string& model) const;

  // A new replica starts routable. Returns grants for waiters it can serve at once.
  std::vector<Grant> add_replica(ReplicaId id, const std::string& model, std::uint32_t slots);
  // Stops routing to the replica at once; its in-flight requests keep their slots and it is
  // forgotten when the last one is released.
  void remove_replica(ReplicaId id);
  std::vector<Grant> set_slots(ReplicaId id, std::uint32_t slots);
  std::vector<Grant> set_routable(ReplicaId id, bool routable);
  // What the phone's agent reports in /health: its own speed measurement (autotune), and the
  // size of its host prompt cache in tokens (0: none). forget_prompt_cache: its engine restarted.
  void set_measured_speeds(ReplicaId id, double prefill_tps, double decode_tps);
  void set_host_prompt_cache(ReplicaId id, std::uint64_t tokens);
  void forget_prompt_cache(ReplicaId id);

  // Binds the request now if a slot is free for it, else queues it (or refuses: queue_full, or
  // shed for a sheddable request).
  Admission admit(WaiterId waiter, const std::string& model, TimePoint now,
                  const std::vector<ReplicaId>& exclude = {});
  Admission admit(WaiterId waiter, const std::string& model, TimePoint now, Request request);

  // Ends the oldest binding to the replica. Returns the grants the freed slot allows.
  std::vector<Grant> release(ReplicaId id);
  std::vector<Grant> release(ReplicaId id, TimePoint now);
  // Ends the binding of a granted waiter with what its answer reported: speeds, token counts
  // and cached tokens are learned from it. Nothing happens for a waiter that holds no slot.
  std::vector<Grant> complete(WaiterId waiter, TimePoint now, const Completion& completion = {});
  // Removes a queued waiter (client gone, queue timeout). False when it was not queued.
  bool cancel(WaiterId waiter);

  // Re-decides what time alone changes (holds that ran out). Call it at next_wakeup().
  std::vector<Grant> tick(TimePoint now);
  // When tick() must run next; nullopt when nothing waits on time.
  std::optional<TimePoint> next_wakeup() const;

  // Caps the slots a group (e.g. one batch) holds at once, over every model; nullopt removes the
  // cap. Returns the grants a raised cap allows.
  std::vector<Grant> set_group_limit(const std::string& group, std::optional<std::uint32_t> limit);
  std::uint32_t group_in_flight(const std::string& group) const;

  std::uint32_t in_flight(ReplicaId id) const;
  std::uint32_t slots(ReplicaId id) const;
  bool routable(ReplicaId id) const;
  bool has_replica(ReplicaId id) const;
  std::size_t queue_depth(const std::string& model) const;
  std::size_t band_depth(const std::string& model, std::int32_t priority) const;
  // Enqueue time of the oldest waiter of the model, if any.
  std::optional<TimePoint> oldest_waiter_since(const std::string& model) const;
  // Sums over the model's routable replicas.
  std::uint32_t busy_slots(const std::string& model) const;
  std::uint32_t free_slots(const std::string& model) const;
  // Waiters examined by the dispatch of the most recent add_replica, set_slots, set_routable or
  // release (tests use it to check the scan stays short).
  std::size_t last_dispatch_visits() const { return last_dispatch_visits_; }
  // A queued waiter left waiting for a busy replica although a free one could take it.
  bool held(WaiterId waiter) const;
  // Times later waiters took a slot this queued waiter could have used.
  std::uint32_t overtaken(WaiterId waiter) const;
  // Free replicas a request of this band may not take now: each is the last that would finish a
  // recent prompt of a higher band within the reserve margin (RoutingOptions::reserve_*).
  std::vector<ReplicaId> reserved(const std::string& model, std::int32_t priority) const;
  std::optional<SpeedSnapshot> speeds(ReplicaId id) const;
  const PromptCacheModel& prompt_cache() const { return cache_; }
  const SpeedModel& speed_model() const { return speeds_; }
  // Tokens a tenant has received in a model's band, divided by its weight (fair-share clock).
  std::optional<double> tenant_usage(const std::string& model, std::int32_t priority,
                                     const std::string& tenant) const;

 private:
  using BindingId = std::uint64_t;
  struct Binding {
    WaiterId waiter = 0;
    ReplicaId replica = 0;
    std::string model{};
    std::int32_t band = 0;
    std::string tenant{};
    std::string group{};
    TimePoint start{};
    TimePoint expected_end{};
    PromptCacheModel::Placement placement{};
    // Whether the prompt-cache model placed this request (expected_finish, or a request with
    // blocks): under least_loaded it is not told, which saved ~20k instructions per request
    // against a many-slot replica (its slot choice walks every slot; docs/benchmarks.md).
    bool cache_tracked = false;
    std::uint64_t prompt_bytes = 0;
    double prompt_tokens = 0;
    double cached_tokens = 0;  // expected
    double answer_tokens = 0;  // expected
    double charged = 0;        // fair-share tokens charged at the grant
  };
  struct Replica {
    std::string model;
    std::uint32_t slots = 0;
    std::vector<BindingId> bindings{};  // oldest first; in_flight is its size
    bool routable = true;
    bool removed = false;
  };
  struct Waiter {
    WaiterId id = 0;
    TimePoint since;
    std::uint64_t seq = 0;  // arrival order
    Request request;
    std::uint32_t overtaken = 0;
    bool held = false;
    std::optional<TimePoint> held_since{};
    TimePoint hold_until{};
  };
  struct Tenant {
    std::list<Waiter> queue;
    double usage = 0;  // tokens received / weight
  };
  struct Band {
    std::map<std::string, Tenant> tenants;
    double virtual_usage = 0;  // the least active tenant's usage: where a newcomer starts
    std::size_t size = 0;
  };
  // A prompt of a band above the lowest band the model has served: while recent, what the
  // reserve keeps a free replica for.
  struct Recent {
    std::int32_t band = 0;
    openai::BlockHash key = 0;              // its first block (0: none)
    std::vector<openai::BlockHash> last{};  // the latest such prompt
    std::size_t shared = 0;  // blocks the latest two shared: the part expected to recur
    double prompt_tokens = 0;
    std::optional<std::uint32_t> max_tokens{};
    TimePoint seen{};
  };
  struct Model {
    std::string name;
    std::vector<ReplicaId> replicas;  // routing order (insertion order)
    std::size_t rotation = 0;         // index after the last chosen replica
    std::map<std::int32_t, Band, std::greater<>> bands;
    std::size_t queued = 0;
    std::unordered_set<WaiterId> held;
    std::optional<std::int32_t> lowest_band;  // of every request it has seen
    std::vector<Recent> recent;               // at most reserve_prompts, recent or not
    // When time alone may release a reserved replica to a waiting lower band.
    std::optional<TimePoint> reserve_recheck;
  };
  struct Place {
    Model* model = nullptr;
    std::int32_t band = 0;
    Tenant* tenant = nullptr;
    std::list<Waiter>::iterator it;
  };
  struct Group {
    std::optional<std::uint32_t> limit;
    std::uint32_t in_flight = 0;
  };
  struct Pick {
    Place place;
    ReplicaId replica = 0;
    std::size_t index = 0;  // of the replica in the model's routing order
    // Older waiters of the same queue that could have used the slot: counted when it is bound.
    std::vector<std::list<Waiter>::iterator> overtaken{};
  };
  struct FreeAt {
    double seconds = 0;  // from now
    TimePoint end{};     // the binding's expected end
    std::uint32_t slot = 0;
  };
  struct BusyReplica {
    ReplicaId id = 0;
    std::vector<FreeAt> ends{};  // soonest first
    std::uint32_t promised = 0;  // slots promised to held waiters in this selection
  };
  // What one dispatch pass remembers: least_loaded's per-tenant scan positions; for
  // expected_finish, the busy replicas of the current selection, soonest to free first.
  struct Pass {
    bool count_visits = true;
    std::unordered_map<const Tenant*, std::list<Waiter>::iterator> cursors{};
    std::vector<BusyReplica> busy{};
  };

  // Can take a new binding now.
  static bool has_free_slot(const Replica& r);
  // Counts when deciding whether a waiter's exclusions still leave somewhere to go.
  static bool serves(const Replica& r);
  bool exclusions_apply(const Model& m, const std::vector<ReplicaId>& exclude) const;
  bool group_full(const std::string& group) const;
  // Indices (routing order) of the model's free replicas the waiter may use.
  std::vector<std::size_t> usable(const Model& m, const std::vector<std::size_t>& free,
                                  const Request& request) const;
  // !usable(m, free, request).empty() without building the vector: the least_loaded waiter
  // scan asks it for every waiter it visits (one allocation each, ~200 instructions).
  bool any_usable(const Model& m, const std::vector<std::size_t>& free,
                  const Request& request) const;
  std::vector<std::size_t> free_indices(const Model& m) const;

  // Costs, in seconds.
  struct Estimate {
    double prompt_tokens = 0;
    double answer_tokens = 0;
    double tokens_per_block = 0;
  };
  Estimate estimate(const std::string& model, const Request& request) const;
  double tokens_per_block(const std::string& model) const;
  // Prompt tokens reused when `blocks` blocks are cached (llama.cpp always reads at least one).
  static double cached_tokens(const Estimate& e, std::size_t blocks);
  // also_idle: for a busy replica, the slot that frees first (the one the request would get).
  double service_seconds(ReplicaId id, const Estimate& e, const Request& request,
                         std::optional<std::uint32_t> also_idle) const;
  double service_seconds(ReplicaId id, const Estimate& e, std::span<const openai::BlockHash> blocks,
                         std::optional<std::uint32_t> also_idle) const;
  // When each of a replica's bindings is expected to end, soonest first.
  std::vector<FreeAt> binding_ends(const Replica& r, TimePoint now) const;

  // The model's busy replicas that serve, soonest to free first.
  std::vector<BusyReplica> busy_replicas(const Model& m) const;
  // Remembers a request of a band above the lowest the model has served (reserve_*).
  void note_request(Model& m, std::int32_t band, const Request& request);
  // Indices of the free replicas kept from requests of `band` (sorted); `recheck` gets the
  // soonest time at which time alone may change that.
  std::vector<std::size_t> reserved_indices(const Model& m, std::int32_t band,
                                            const std::vector<std::size_t>& free,
                                            const std::vector<BusyReplica>& busy,
                                            std::optional<TimePoint>* recheck) const;
  std::optional<Pick> select(Model& m, const std::vector<std::size_t>& free, Pass& pass);
  std::optional<Pick> select_least_loaded(Model& m, const std::vector<std::size_t>& free,
                                          Pass& pass);
  std::optional<Pick> select_expected_finish(Model& m, const std::vector<std::size_t>& free,
                                             Pass& pass);
  // The busy replica (not yet promised in this pass) expected to finish the waiter first, and
  // when; nothing when none could beat free_seconds (the search stops there).
  struct BusyTarget {
    BusyReplica* busy = nullptr;
    double time = 0;
    double service = 0;
    TimePoint end{};
  };
  BusyTarget best_busy(const Model& m, const Waiter& w, const Estimate& e, double free_seconds,
                       Pass& pass) const;
  // Leaves the waiter waiting for a busy replica if one is expected to finish it sooner.
  // displaced: how much more the free slot costs the next in line, who takes it instead.
  bool try_hold(Model& m, Waiter& w, const Estimate& e, double free_seconds, double displaced,
                Pass& pass);
  void clear_hold(Model& m, Waiter& w);
  std::size_t least_loaded_index(const Model& m, const std::vector<std::size_t>& candidates) const;
  Grant bind(Model& m, const Pick& pick);
  std::vector<Grant> dispatch(const std::string& model);
  std::vector<Grant> dispatch(Model& m);
  std::vector<Grant> dispatch_all();

  Place enqueue(Model& m, Waiter waiter);
  // By value: the caller's Place may be the entry in waiting_ that dequeue erases.
  void dequeue(Place place);
  void settle_band(Band& band);
  double weight(const std::string& tenant) const;

  std::vector<Grant> finish(BindingId id, TimePoint now, const Completion* completion);
  void learn(const Binding& b, TimePoint now, const Completion& c);
  std::chrono::seconds retry_after(const Model& m) const;
  // Drops a removed replica whose last binding ended.
  void forget(ReplicaId id);
  void detach(ReplicaId id, const std::string& model);
  void observe(TimePoint now);
  double random_unit();

  std::uint32_t queue_max_;
  RoutingOptions options_;
  std::uint64_t random_state_;
  TimePoint now_{};
  bool dispatch_pending_ = false;
  std::size_t last_dispatch_visits_ = 0;
  std::uint64_t next_seq_ = 1;
  BindingId next_binding_ = 1;
  SpeedModel speeds_;
  PromptCacheModel cache_;
  std::unordered_map<std::string, Model> models_;
  std::unordered_map<ReplicaId, Replica> replicas_;
  std::unordered_map<BindingId, Binding> bindings_;
  std::unordered_map<WaiterId, BindingId> bound_;
  std::unordered_map<std::string, Group> groups_;
  // Model pointers stay valid: unordered_map never moves its nodes; so do Tenant pointers
  // (std::map), and a tenant with a waiter is never erased.
  std::unordered_map<WaiterId, Place> waiting_;
};

}  // namespace fg::scheduling
