#include "orchestrator/proxy/slot_broker.hpp"

#include <tuple>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace fg::proxy {

using Clock = std::chrono::steady_clock;

SlotLease& SlotLease::operator=(SlotLease&& other) noexcept {
  if (this != &other) {
    release();
    broker_ = std::exchange(other.broker_, nullptr);
    waiter_ = other.waiter_;
    replica_ = other.replica_;
    granted_at_ = other.granted_at_;
  }
  return *this;
}

QueueTicket& QueueTicket::operator=(QueueTicket&& other) noexcept {
  if (this != &other) {
    drop();
    broker_ = other.broker_;
    waiter_ = std::move(other.waiter_);
  }
  return *this;
}

void QueueTicket::drop() {
  if (auto waiter = std::move(waiter_)) {
    broker_->leave(*waiter, false);
  }
}

void SlotLease::complete(const scheduling::Completion& completion) {
  if (auto* broker = std::exchange(broker_, nullptr)) {
    broker->finish(waiter_, completion);
  }
}

void SlotLease::release() {
  complete(scheduling::Completion{.ok = false});
}

void SlotBroker::leave(Waiter& waiter, bool handed_over) {
  waiters_.erase(waiter.id);
  if (waiter.granted) {
    if (!handed_over) {
      finish(waiter.id, scheduling::Completion{.ok = false});
    }
  } else if (!waiter.abandoned) {
    scheduler_.cancel(waiter.id);
    arm();
  }
}

void SlotBroker::start(const asio::any_io_executor& executor) {
  asio::co_spawn(executor, wakeup_loop(this), asio::detached);
}

asio::awaitable<void> SlotBroker::wakeup_loop(SlotBroker* broker) {
  asio::steady_timer timer(co_await asio::this_coro::executor, Clock::time_point::max());
  struct Detach {
    SlotBroker* broker;
    ~Detach() {
      broker->wakeup_ = nullptr;
      broker->armed_.reset();
    }
  } detach{broker};
  broker->wakeup_ = &timer;
  broker->armed_.reset();
  broker->arm();
  for (;;) {
    // arm() moves the expiry, which cancels this wait (operation_aborted): wait again.
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) {
      continue;
    }
    if (broker->armed_ && *broker->armed_ <= Clock::now()) {
      broker->tick_now();
    }
    // It fired: set it to what is due next (arm() leaves an unchanged value alone).
    timer.expires_at(broker->armed_.value_or(Clock::time_point::max()));
  }
}

void SlotBroker::arm() {
  if (wakeup_ == nullptr) {
    armed_ = scheduler_.next_wakeup();
    return;
  }
  const auto next = scheduler_.next_wakeup();
  if (next == armed_) {
    return;
  }
  armed_ = next;
  wakeup_->expires_at(next.value_or(Clock::time_point::max()));
}

void SlotBroker::tick_now() {
  armed_.reset();
  deliver(scheduler_.tick(Clock::now()));
}

asio::awaitable<AcquireResult> SlotBroker::acquire(std::string model, scheduling::Request request,
                                                   Clock::duration timeout) {
  AcquireStart start = try_acquire(model, std::move(request));
  if (!start.queued) {
    co_return std::move(start.result);
  }
  AcquireResult waited = co_await wait_queued(std::move(start.queued), timeout);
  co_return waited;
}

AcquireStart SlotBroker::try_acquire(const std::string& model, scheduling::Request request) {
  const auto start = Clock::now();
  const auto id = next_waiter_++;
  AcquireStart out;
  auto admission = scheduler_.admit(id, model, start, std::move(request));
  switch (admission.outcome) {
    case scheduling::Scheduler::Outcome::granted:
      out.result.lease = SlotLease(this, id, admission.replica, start);
      arm();
      break;
    case scheduling::Scheduler::Outcome::queue_full:
      out.result.error = admission.shed ? AcquireError::shed : AcquireError::queue_full;
      out.result.retry_after = admission.retry_after;
      arm();
      break;
    case scheduling::Scheduler::Outcome::unknown_model:
      out.result.error = AcquireError::unknown_model;
      break;
    case scheduling::Scheduler::Outcome::queued: {
      // In the table from now on, so that a grant before the wait begins is not lost.
      auto waiter = std::make_unique<Waiter>(Waiter{.id = id, .start = start});
      waiters_.emplace(id, waiter.get());
      arm();
      out.queued = QueueTicket(this, std::move(waiter));
      break;
    }
  }
  return out;
}

asio::awaitable<AcquireResult> SlotBroker::wait_queued(QueueTicket ticket,
                                                       Clock::duration timeout) {
  // Whatever ends the wait (grant, deadline, cancellation because the client left), the waiter
  // leaves the table before this frame goes away, and a grant is never dropped on the floor.
  struct Leave {
    SlotBroker* broker;
    std::unique_ptr<Waiter> waiter;
    bool handed_over = false;
    ~Leave() { broker->leave(*waiter, handed_over); }
  } leave{this, std::move(ticket.waiter_)};
  Waiter& waiter = *leave.waiter;
  AcquireResult result;
  asio::steady_timer timer(co_await asio::this_coro::executor, timeout);
  boost::system::error_code ec;
  if (!waiter.granted && !waiter.abandoned) {
    waiter.timer = &timer;
    std::tie(ec) = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    waiter.timer = nullptr;
  }
  result.waited = Clock::now() - waiter.start;
  if (waiter.granted) {
    result.lease = SlotLease(this, waiter.id, waiter.replica, waiter.granted_at);
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

void SlotBroker::finish(WaiterId waiter, const scheduling::Completion& completion) {
  deliver(scheduler_.complete(waiter, Clock::now(), completion));
}

void SlotBroker::deliver(const std::vector<scheduling::Grant>& grants) {
  const auto now = Clock::now();
  for (const auto& grant : grants) {
    auto it = waiters_.find(grant.waiter);
    if (it == waiters_.end()) {
      // Cannot happen (waiters leave the scheduler when they leave the table); never leak a slot.
      deliver(scheduler_.complete(grant.waiter, now, scheduling::Completion{.ok = false}));
      continue;
    }
    it->second->granted = true;
    it->second->replica = grant.replica;
    it->second->granted_at = now;
    if (it->second->timer != nullptr) {
      it->second->timer->cancel();
    }
  }
  arm();
}

void SlotBroker::abandon(const std::vector<scheduling::WaiterId>& waiters) {
  for (auto id : waiters) {
    auto it = waiters_.find(id);
    if (it != waiters_.end()) {
      it->second->abandoned = true;
      if (it->second->timer != nullptr) {
        it->second->timer->cancel();
      }
    }
  }
  arm();
}

void SlotBroker::set_group_limit(const std::string& group, std::optional<std::uint32_t> limit) {
  deliver(scheduler_.set_group_limit(group, limit));
}

void SlotBroker::set_options(const scheduling::RoutingOptions& options) {
  deliver(scheduler_.set_options(options));
}

}  // namespace fg::proxy
