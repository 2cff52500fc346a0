#pragma once

#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include "orchestrator/scheduling/scheduler.hpp"

namespace fg::proxy {

namespace asio = boost::asio;

using scheduling::ReplicaId;
class SlotBroker;

// One slot of one replica, held while a request is bound to it and released exactly once, when
// the lease is destroyed or released, whatever the way out (success, error, cancellation).
class SlotLease {
 public:
  SlotLease() = default;
  SlotLease(SlotBroker* broker, ReplicaId replica) : broker_(broker), replica_(replica) {}
  SlotLease(SlotLease&& other) noexcept
      : broker_(std::exchange(other.broker_, nullptr)), replica_(other.replica_) {}
  SlotLease& operator=(SlotLease&& other) noexcept;
  SlotLease(const SlotLease&) = delete;
  SlotLease& operator=(const SlotLease&) = delete;
  ~SlotLease() { release(); }

  void release();
  explicit operator bool() const { return broker_ != nullptr; }
  ReplicaId replica() const { return replica_; }

 private:
  SlotBroker* broker_ = nullptr;
  ReplicaId replica_ = 0;
};

enum class AcquireError { none, queue_full, timeout, unknown_model, cancelled };

struct AcquireResult {
  SlotLease lease;
  AcquireError error = AcquireError::none;
  std::chrono::steady_clock::duration waited{};
};

// The asynchronous shell around the pure Scheduler: a request that must queue sleeps on its own
// timer (its queue deadline) and is woken by the grant the moment a slot frees. No polling.
class SlotBroker {
 public:
  // Holds no I/O object (timers live in the waiting coroutines), so it may outlive the
  // io_context or be built before it.
  explicit SlotBroker(scheduling::Scheduler& scheduler) : scheduler_(scheduler) {}

  boost::asio::awaitable<AcquireResult> acquire(std::string model, std::vector<ReplicaId> exclude,
                                                std::chrono::steady_clock::duration timeout);
  // The same with the scheduler's whole request (band, tenant, group: the batch runner's).
  boost::asio::awaitable<AcquireResult> acquire(std::string model, scheduling::Request request,
                                                std::chrono::steady_clock::duration timeout);
  void release(ReplicaId replica);
  // Wakes the waiters named by grants that came from a fleet change (new replica, more slots).
  void deliver(const std::vector<scheduling::Grant>& grants);
  // Wakes waiters the scheduler dropped (their model was removed): they fail with unknown_model.
  void abandon(const std::vector<scheduling::WaiterId>& waiters);
  scheduling::Scheduler& scheduler() { return scheduler_; }

 private:
  struct Waiter {
    boost::asio::steady_timer* timer = nullptr;
    bool granted = false;
    bool abandoned = false;
    ReplicaId replica = 0;
  };

  scheduling::Scheduler& scheduler_;
  std::unordered_map<scheduling::WaiterId, Waiter*> waiters_;
  scheduling::WaiterId next_waiter_ = 1;
};

}  // namespace fg::proxy
