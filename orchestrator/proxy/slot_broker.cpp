#include "orchestrator/proxy/slot_broker.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace fg::proxy {

SlotLease& SlotLease::operator=(SlotLease&& other) noexcept {
  if (this != &other) {
    release();
    broker_ = std::exchange(other.broker_, nullptr);
    replica_ = other.replica_;
  }
  return *this;
}

void SlotLease::release() {
  if (auto* broker = std::exchange(broker_, nullptr)) {
    broker->release(replica_);
  }
}

asio::awaitable<AcquireResult> SlotBroker::acquire(std::string model,
                                                   std::vector<ReplicaId> exclude,
                                                   std::chrono::steady_clock::duration timeout) {
  scheduling::Request request;
  request.exclude = std::move(exclude);
  co_return co_await acquire(std::move(model), std::move(request), timeout);
}

asio::awaitable<AcquireResult> SlotBroker::acquire(std::string model, scheduling::Request request,
                                                   std::chrono::steady_clock::duration timeout) {
  const auto start = std::chrono::steady_clock::now();
  const auto id = next_waiter_++;
  AcquireResult result;
  auto admission = scheduler_.admit(id, model, start, std::move(request));
  switch (admission.outcome) {
    case scheduling::Scheduler::Outcome::granted:
      result.lease = SlotLease(this, admission.replica);
      co_return result;
    case scheduling::Scheduler::Outcome::queue_full:
      result.error = AcquireError::queue_full;
      co_return result;
    case scheduling::Scheduler::Outcome::unknown_model:
      result.error = AcquireError::unknown_model;
      co_return result;
    case scheduling::Scheduler::Outcome::queued:
      break;
  }

  asio::steady_timer timer(co_await asio::this_coro::executor, timeout);
  Waiter waiter{&timer};
  waiters_.emplace(id, &waiter);
  // Whatever wakes us (grant, deadline, cancellation because the client left), the waiter leaves
  // the table before this frame goes away, and a grant is never dropped on the floor.
  struct Leave {
    SlotBroker* broker;
    scheduling::WaiterId id;
    Waiter* waiter;
    bool handed_over = false;
    ~Leave() {
      broker->waiters_.erase(id);
      if (waiter->granted) {
        if (!handed_over) {
          broker->release(waiter->replica);
        }
      } else if (!waiter->abandoned) {
        broker->scheduler_.cancel(id);
      }
    }
  } leave{this, id, &waiter};

  auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  result.waited = std::chrono::steady_clock::now() - start;
  if (waiter.granted) {
    result.lease = SlotLease(this, waiter.replica);
    leave.handed_over = true;
  } else if (waiter.abandoned) {
    result.error = AcquireError::unknown_model;
  } else if (ec == asio::error::operation_aborted) {
    result.error = AcquireError::cancelled;
  } else {
    result.error = AcquireError::timeout;
  }
  co_return result;
}

void SlotBroker::release(ReplicaId replica) {
  deliver(scheduler_.release(replica));
}

void SlotBroker::deliver(const std::vector<scheduling::Grant>& grants) {
  for (const auto& grant : grants) {
    auto it = waiters_.find(grant.waiter);
    if (it == waiters_.end()) {
      // Cannot happen (waiters leave the scheduler when they leave the table); never leak a slot.
      deliver(scheduler_.release(grant.replica));
      continue;
    }
    it->second->granted = true;
    it->second->replica = grant.replica;
    it->second->timer->cancel();
  }
}

}  // namespace fg::proxy

namespace fg::proxy {

void SlotBroker::abandon(const std::vector<scheduling::WaiterId>& waiters) {
  for (auto id : waiters) {
    auto it = waiters_.find(id);
    if (it != waiters_.end()) {
      it->second->abandoned = true;
      it->second->timer->cancel();
    }
  }
}

}  // namespace fg::proxy
