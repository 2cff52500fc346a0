#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include "orchestrator/scheduling/scheduler.hpp"

namespace fg::proxy {

namespace asio = boost::asio;

using scheduling::ReplicaId;
using scheduling::WaiterId;
class SlotBroker;

// One slot of one replica, held while a request is bound to it and ended exactly once, whatever
// the way out: complete() with what the answer reported, release() (failed, cut off, client
// gone: nothing learned), or destruction (= release()).
class SlotLease {
 public:
  SlotLease() = default;
  SlotLease(SlotBroker* broker, WaiterId waiter, ReplicaId replica,
            std::chrono::steady_clock::time_point granted_at)
      : broker_(broker), waiter_(waiter), replica_(replica), granted_at_(granted_at) {}
  SlotLease(SlotLease&& other) noexcept
      : broker_(std::exchange(other.broker_, nullptr)),
        waiter_(other.waiter_),
        replica_(other.replica_),
        granted_at_(other.granted_at_) {}
  SlotLease& operator=(SlotLease&& other) noexcept;
  SlotLease(const SlotLease&) = delete;
  SlotLease& operator=(const SlotLease&) = delete;
  ~SlotLease() { release(); }

  // Ends the binding; the scheduler learns speeds, token counts and cached tokens from it (when
  // completion.ok). Does nothing on an ended or empty lease.
  void complete(const scheduling::Completion& completion);
  // Ends the binding learning nothing (completion.ok = false).
  void release();
  explicit operator bool() const { return broker_ != nullptr; }
  ReplicaId replica() const { return replica_; }
  WaiterId waiter() const { return waiter_; }
  // When the request was bound: Completion::first_token_after and duration count from here.
  std::chrono::steady_clock::time_point granted_at() const { return granted_at_; }

 private:
  SlotBroker* broker_ = nullptr;
  WaiterId waiter_ = 0;
  ReplicaId replica_ = 0;
  std::chrono::steady_clock::time_point granted_at_{};
};

enum class AcquireError { none, queue_full, shed, timeout, unknown_model, cancelled };

struct AcquireResult {
  SlotLease lease;
  AcquireError error = AcquireError::none;
  std::chrono::steady_clock::duration waited{};
  // shed only: when a slot is expected to free (the answer's Retry-After).
  std::chrono::seconds retry_after{0};
};

// A queued request as the broker sees it: a grant (or its model's removal) is noted here and
// wakes the wait, if one is on.
struct QueuedWaiter {
  WaiterId id = 0;
  std::chrono::steady_clock::time_point start{};
  asio::steady_timer* timer = nullptr;  // while wait_queued waits
  bool granted = false;
  bool abandoned = false;
  ReplicaId replica = 0;
  std::chrono::steady_clock::time_point granted_at{};
};

// A request try_acquire put in the queue, until wait_queued takes it over; one that ends unused
// (its waiting coroutine was never started) leaves the queue, and a grant it got meanwhile goes
// back, so nothing is left behind.
class QueueTicket {
 public:
  QueueTicket() = default;
  QueueTicket(QueueTicket&& other) noexcept = default;
  QueueTicket& operator=(QueueTicket&& other) noexcept;
  QueueTicket(const QueueTicket&) = delete;
  QueueTicket& operator=(const QueueTicket&) = delete;
  ~QueueTicket() { drop(); }

  explicit operator bool() const { return waiter_ != nullptr; }

 private:
  friend class SlotBroker;
  QueueTicket(SlotBroker* broker, std::unique_ptr<QueuedWaiter> waiter)
      : broker_(broker), waiter_(std::move(waiter)) {}
  void drop();

  SlotBroker* broker_ = nullptr;
  std::unique_ptr<QueuedWaiter> waiter_;
};

// What acquire decides at once: a result, or (queued) a ticket to wait with.
struct AcquireStart {
  AcquireResult result;  // unless queued
  QueueTicket queued;
};

// The asynchronous shell around the pure Scheduler: a request that must queue sleeps on its own
// timer (its queue deadline) and is woken by the grant the moment a slot frees. One more timer,
// on the scheduler's next_wakeup(), runs tick() when time alone changes a decision (a hold that
// ran out). Every change goes through here (or through deliver() afterwards), so that the grants
// it allows reach their waiters and the wakeup timer follows.
class SlotBroker {
 public:
  // Holds no I/O object until start(): it may be built before the io_context and outlive it.
  explicit SlotBroker(scheduling::Scheduler& scheduler) : scheduler_(scheduler) {}

  // Spawns the wakeup timer's loop on the executor (the timer lives in that coroutine, so it
  // goes when the io_context does). Without start() nothing runs tick() (unit tests call
  // tick_now()).
  void start(const asio::any_io_executor& executor);

  // Binds the request to a replica of the model, queueing up to timeout. request.exclude holds
  // the replicas already tried.
  asio::awaitable<AcquireResult> acquire(std::string model, scheduling::Request request,
                                         std::chrono::steady_clock::duration timeout);
  // acquire in two steps, so that a request granted at once (most of them) costs no coroutine
  // frame: try_acquire decides without waiting; a queued request then waits with wait_queued.
  // (A held stream kept the block of acquire's frame: Asio's frame cache gave it to the next
  // frame, which lives as long as the stream.)
  AcquireStart try_acquire(const std::string& model, scheduling::Request request);
  asio::awaitable<AcquireResult> wait_queued(QueueTicket ticket,
                                             std::chrono::steady_clock::duration timeout);
  // Wakes the waiters named by grants that came from a change made on the scheduler directly
  // (the fleet manager: new replica, more slots, routable again).
  void deliver(const std::vector<scheduling::Grant>& grants);
  // Wakes waiters the scheduler dropped (their model was removed): they fail with unknown_model.
  void abandon(const std::vector<scheduling::WaiterId>& waiters);

  // Caps the slots a group (one batch) holds at once, over every model; nullopt removes the cap
  // (when the batch ends). The grants a raised or removed cap allows are delivered.
  void set_group_limit(const std::string& group, std::optional<std::uint32_t> limit);
  // New routing options (a reload); the grants they allow are delivered.
  void set_options(const scheduling::RoutingOptions& options);
  // Runs the scheduler's tick now and delivers its grants (the wakeup timer's work).
  void tick_now();

  // Read-only: changes must go through the broker (or be followed by deliver()), else the
  // grants they cause would be lost.
  const scheduling::Scheduler& scheduler() const { return scheduler_; }
  // What the wakeup timer is set to (nullopt: nothing waits on time). For tests.
  std::optional<std::chrono::steady_clock::time_point> wakeup_at() const { return armed_; }

 private:
  friend class SlotLease;
  friend class QueueTicket;
  using Waiter = QueuedWaiter;
  // Takes a queued waiter out of the table and, unless handed_over, ends it in the scheduler:
  // a grant goes back, a waiter still queued leaves the queue.
  void leave(Waiter& waiter, bool handed_over);

  void finish(WaiterId waiter, const scheduling::Completion& completion);
  // Sets the wakeup timer to the scheduler's next_wakeup().
  void arm();
  static asio::awaitable<void> wakeup_loop(SlotBroker* broker);

  scheduling::Scheduler& scheduler_;
  std::unordered_map<scheduling::WaiterId, Waiter*> waiters_;
  scheduling::WaiterId next_waiter_ = 1;
  asio::steady_timer* wakeup_ = nullptr;  // owned by wakeup_loop's frame
  std::optional<std::chrono::steady_clock::time_point> armed_;
};

}  // namespace fg::proxy
