#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace fg::scheduling {

using ReplicaId = std::uint64_t;
using WaiterId = std::uint64_t;
using TimePoint = std::chrono::steady_clock::time_point;

// A queued request bound to a replica: the caller now holds one slot of that replica and must
// release it exactly once.
struct Grant {
  WaiterId waiter = 0;
  ReplicaId replica = 0;
};

// Slot accounting, per-model FIFO queues and replica choice. Pure: no I/O, no clock of its own
// (callers pass `now`), single-threaded. The scheduler is the only owner of in-flight counts.
//
// Rules:
// - in_flight(r) <= slots(r) for every replica, always (a replica whose slots shrink below its
//   in-flight count just receives nothing until it drains below the new limit).
// - Only routable replicas receive requests.
// - Choice among free replicas: least loaded by in_flight/slots; ties go to the replica after the
//   one chosen last (rotation), so equal replicas share load evenly.
// - A request that cannot be bound now waits in its model's FIFO and is bound late, the moment a
//   slot frees (release, new replica, more slots, replica routable again). Grants go to the
//   oldest waiter that can use the free replica.
// - A waiter may exclude replicas it already tried (retries). When its exclusions cover every
//   routable replica of the model, they are ignored (a retry on the same replica beats waiting
//   forever).
class Scheduler {
 public:
  enum class Outcome { granted, queued, queue_full, unknown_model };
  struct Admission {
    Outcome outcome = Outcome::unknown_model;
    ReplicaId replica = 0;  // when granted
  };

  explicit Scheduler(std::uint32_t queue_max) : queue_max_(queue_max) {}

  void set_queue_max(std::uint32_t queue_max) { queue_max_ = queue_max; }

  // Models must exist before replicas or requests name them. Adding twice is a no-op.
  void add_model(const std::string& model);
  // Removes a model with no replicas left; queued waiters are returned so the caller can answer
  // them (the model no longer exists).
  std::vector<WaiterId> remove_model(const std::string& model);
  bool has_model(const std::string& model) const;

  // A new replica starts routable. Returns grants for waiters it can serve at once.
  std::vector<Grant> add_replica(ReplicaId id, const std::string& model, std::uint32_t slots);
  // Stops routing to the replica at once; its in-flight requests keep their slots and it is
  // forgotten when the last one is released.
  void remove_replica(ReplicaId id);
  std::vector<Grant> set_slots(ReplicaId id, std::uint32_t slots);
  std::vector<Grant> set_routable(ReplicaId id, bool routable);

  // Binds the request now if a slot is free, else queues it (or refuses when the queue is full).
  Admission admit(WaiterId waiter, const std::string& model, TimePoint now,
                  const std::vector<ReplicaId>& exclude = {});
  // Ends one binding to the replica. Returns the grants the freed slot allows.
  std::vector<Grant> release(ReplicaId id);
  // Removes a queued waiter (client gone, queue timeout). False when it was not queued.
  bool cancel(WaiterId waiter);

  std::uint32_t in_flight(ReplicaId id) const;
  std::uint32_t slots(ReplicaId id) const;
  bool routable(ReplicaId id) const;
  bool has_replica(ReplicaId id) const;
  std::size_t queue_depth(const std::string& model) const;
  // Enqueue time of the oldest waiter of the model, if any.
  std::optional<TimePoint> oldest_waiter_since(const std::string& model) const;
  // Sums over the model's routable replicas.
  std::uint32_t busy_slots(const std::string& model) const;
  std::uint32_t free_slots(const std::string& model) const;
  // Waiters examined by the dispatch of the most recent add_replica, set_slots, set_routable or
  // release (tests use it to check the scan stays short).
  std::size_t last_dispatch_visits() const { return last_dispatch_visits_; }

 private:
  struct Replica {
    std::string model;
    std::uint32_t slots = 0;
    std::uint32_t in_flight = 0;
    bool routable = true;
    bool removed = false;
  };
  struct Waiter {
    WaiterId id = 0;
    TimePoint since;
    std::vector<ReplicaId> exclude;
  };
  struct Model {
    std::vector<ReplicaId> replicas;  // routing order (insertion order)
    std::size_t rotation = 0;         // index after the last chosen replica
    std::list<Waiter> queue;
  };

  // Can take a new binding now.
  static bool has_free_slot(const Replica& r);
  // Counts when deciding whether a waiter's exclusions still leave somewhere to go.
  static bool serves(const Replica& r);
  bool exclusions_apply(const Model& m, const std::vector<ReplicaId>& exclude) const;
  // Picks and binds a free replica (least loaded, rotating ties); nullopt when none is usable.
  std::optional<ReplicaId> choose(Model& m, const std::vector<ReplicaId>& exclude);
  std::vector<Grant> dispatch(const std::string& model);
  std::vector<Grant> dispatch(Model& m);
  // Drops a removed replica whose last binding ended.
  void forget(ReplicaId id);
  void detach(ReplicaId id, const std::string& model);

  std::uint32_t queue_max_;
  std::size_t last_dispatch_visits_ = 0;
  std::unordered_map<std::string, Model> models_;
  std::unordered_map<ReplicaId, Replica> replicas_;
  // Model pointers stay valid: unordered_map never moves its nodes.
  std::unordered_map<WaiterId, std::pair<Model*, std::list<Waiter>::iterator>> waiting_;
};

}  // namespace fg::scheduling
