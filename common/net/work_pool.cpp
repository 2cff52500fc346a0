#include "common/net/work_pool.hpp"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace fg::net {

// Shared between the pool's threads and its users: guarded by `mutex`.
struct WorkPool::State {
  std::size_t max_threads = 1;
  std::size_t max_queued = 0;
  Priority priority = Priority::same;
  mutable std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::unique_ptr<Job>> queue;
  std::vector<std::thread> threads;
  std::size_t idle = 0;
  bool closed = false;
};

WorkPool::WorkPool(std::size_t max_threads, Priority priority, std::size_t max_queued)
    : state_(std::make_unique<State>()) {
  state_->max_threads = max_threads == 0 ? 1 : max_threads;
  state_->max_queued = max_queued;
  state_->priority = priority;
}

WorkPool::~WorkPool() {
  close();
  for (auto& thread : state_->threads) {
    thread.join();
  }
}

bool WorkPool::submit(std::unique_ptr<Job>& job) {
  std::unique_lock lock(state_->mutex);
  if (state_->closed || state_->queue.size() >= state_->max_queued) {
    return false;
  }
  state_->queue.push_back(std::move(job));
  if (state_->idle == 0 && state_->threads.size() < state_->max_threads) {
    state_->threads.emplace_back([this] { work(); });
  } else {
    state_->wake.notify_one();
  }
  return true;
}

void WorkPool::close() {
  std::deque<std::unique_ptr<Job>> dropped;
  {
    std::unique_lock lock(state_->mutex);
    state_->closed = true;
    dropped.swap(state_->queue);
  }
  state_->wake.notify_all();
}

std::size_t WorkPool::threads() const {
  std::unique_lock lock(state_->mutex);
  return state_->threads.size();
}

void WorkPool::work() {
  if (state_->priority == Priority::idle) {
    // Per thread on Linux (the new thread inherited its creator's policy). Lowering one's own
    // priority needs no privilege; should it fail anyway, nice 19 keeps most of the preference.
    sched_param param{};
    if (::sched_setscheduler(0, SCHED_IDLE, &param) != 0) {
      (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
    }
  }
  std::unique_lock lock(state_->mutex);
  for (;;) {
    ++state_->idle;
    state_->wake.wait(lock, [&] { return state_->closed || !state_->queue.empty(); });
    --state_->idle;
    if (state_->closed) {
      return;
    }
    std::unique_ptr<Job> job = std::move(state_->queue.front());
    state_->queue.pop_front();
    lock.unlock();
    job->run();
    job.reset();  // what the job held (a 4 MiB body, say) is freed here too, not on the io thread
    lock.lock();
  }
}

}  // namespace fg::net
