#pragma once

// co_await off.run(work): runs work() on a WorkPool thread and resumes the coroutine on the io
// thread with the result. The coroutine must not touch what work() uses until then. When the
// pool cannot take the job (closed, queue full), work() runs on the io thread: slower for the
// others, never lost.
//
// Results come back through a list of this class and an eventfd, not through asio::post: a post
// from another thread takes the io_context's own mutex and makes a system call (the reactor's
// interrupt) while holding it, and a pool thread (nicer than the io thread) preempted at the end
// of that call held the io thread on the mutex for tens of milliseconds when the cores were
// busy (stream gaps of ~100 ms in the bigbody bench). Here a pool thread holds a lock only to
// push a pointer, and writes the eventfd after releasing it.
//
// Pass a named callable (co_await off.run(std::move(work))), not one built in the co_await
// expression: GCC 12 destroyed such a temporary twice when it captured a std::string (a double
// free seen in the gateway; GCC PR 100611).

#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/net/work_pool.hpp"

namespace fg::net {

// Request bodies larger than this are inspected off the io thread (the gateway's client session,
// the agent's session); smaller ones on it, where handing them over would cost more than it saves.
constexpr std::size_t kOffThreadBody = 64 * 1024;

class OffThread {
 public:
  // pool: nullptr runs every work() on the io thread. Both must outlive this; close and join the
  // pool before destroying this (a running job delivers here).
  OffThread(boost::asio::any_io_executor io, WorkPool* pool);
  ~OffThread();
  OffThread(const OffThread&) = delete;
  OffThread& operator=(const OffThread&) = delete;

  // R (what work() returns) must be default-constructible and movable. An exception work()
  // throws is rethrown by the co_await, on the io thread.
  template <class F>
  auto run(F work) -> boost::asio::awaitable<std::invoke_result_t<F&>> {
    namespace asio = boost::asio;
    using R = std::invoke_result_t<F&>;
    co_return co_await asio::async_initiate<const asio::use_awaitable_t<>&,
                                            void(std::exception_ptr, R)>(
        [this](auto handler, F work) {
          start(WorkPool::make_job(
              [this, work = std::move(work), handler = std::move(handler)]() mutable {
                // On a pool thread.
                std::exception_ptr failure;
                R result{};
                try {
                  result = work();
                } catch (...) {
                  failure = std::current_exception();
                }
                deliver(WorkPool::make_job(
                    [handler = std::move(handler), failure, result = std::move(result)]() mutable {
                      std::move(handler)(failure, std::move(result));  // on the io thread
                    }));
              }));
        },
        asio::use_awaitable, std::move(work));
  }

  // Destroys value on a pool thread (inline when there is no pool or it cannot take the job):
  // freeing a large body or a large JSON document is itself milliseconds of the io thread (a
  // 4 MiB string's munmap, a DOM's thousands of nodes).
  template <class T>
  void dispose(T value) {
    if (pool_ != nullptr) {
      auto job = WorkPool::make_job([held = std::move(value)] {});
      (void)pool_->submit(job);  // not taken: destroyed here, on the io thread
    }
  }

  // Jobs started and not yet completed on the io thread.
  std::size_t in_flight() const { return in_flight_; }

 private:
  void start(std::unique_ptr<WorkPool::Job> job);           // io thread
  void deliver(std::unique_ptr<WorkPool::Job> completion);  // any thread
  void arm();                                               // io thread
  void drain();                                             // io thread

  WorkPool* pool_;
  boost::asio::posix::stream_descriptor wake_;  // an eventfd, readable once a result is ready
  std::mutex mutex_;                            // guards ready_
  // Results delivered and not yet taken. Its capacity is kept (drain swaps it with taking_), so
  // that a pool thread seldom allocates while it holds the lock.
  std::vector<std::unique_ptr<WorkPool::Job>> ready_;
  std::vector<std::unique_ptr<WorkPool::Job>> taking_;  // io thread only
  std::size_t in_flight_ = 0;                           // io thread only
  bool armed_ = false;  // io thread only: a wait on wake_ is pending
};

}  // namespace fg::net
