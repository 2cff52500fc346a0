#include "common/net/lookup_pool.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include <arpa/inet.h>

namespace fg::net {

// The only state shared between threads in this program: guarded by `mutex`.
struct LookupPool::State {
  struct Job {
    std::string host;
    std::uint16_t port = 0;
    Done done;
  };
  LookupFn lookup;
  std::size_t max_threads = 1;
  std::size_t max_queued = 0;
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Job> queue;
  std::size_t threads = 0;
  std::size_t idle = 0;
  bool closed = false;
};

LookupResult system_lookup(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  LookupResult result;
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) {
    result.error = rc == EAI_NONAME || rc == EAI_NODATA ? LookupResult::Error::not_found
                   : rc == EAI_AGAIN                    ? LookupResult::Error::try_again
                                                        : LookupResult::Error::failed;
    result.message = ::gai_strerror(rc);
    return result;
  }
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* where = nullptr;
    if (a->ai_family == AF_INET) {
      where = &reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr;
    } else if (a->ai_family == AF_INET6) {
      where = &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr;
    }
    if (where != nullptr && ::inet_ntop(a->ai_family, where, text, sizeof text) != nullptr) {
      result.addresses.emplace_back(text);
    }
  }
  ::freeaddrinfo(found);
  if (result.addresses.empty()) {
    result.error = LookupResult::Error::not_found;
    result.message = "no address";
  }
  return result;
}

LookupPool::LookupPool(std::size_t max_threads, LookupFn lookup, std::size_t max_queued)
    : state_(std::make_shared<State>()) {
  state_->lookup = std::move(lookup);
  state_->max_threads = max_threads == 0 ? 1 : max_threads;
  state_->max_queued = max_queued;
}

LookupPool::~LookupPool() {
  close();
}

bool LookupPool::submit(std::string host, std::uint16_t port, Done done) {
  std::unique_lock lock(state_->mutex);
  if (state_->closed || state_->queue.size() >= state_->max_queued) {
    return false;
  }
  state_->queue.push_back({std::move(host), port, std::move(done)});
  if (state_->idle == 0 && state_->threads < state_->max_threads) {
    ++state_->threads;
    // Detached: the thread holds the state it needs, and ends when the pool closes.
    std::thread(work, state_).detach();
  } else {
    state_->wake.notify_one();
  }
  return true;
}

void LookupPool::close() {
  std::deque<State::Job> dropped;
  {
    std::unique_lock lock(state_->mutex);
    state_->closed = true;
    dropped.swap(state_->queue);
  }
  state_->wake.notify_all();
}

std::size_t LookupPool::threads() const {
  std::unique_lock lock(state_->mutex);
  return state_->threads;
}

void LookupPool::work(std::shared_ptr<State> state) {
  std::unique_lock lock(state->mutex);
  for (;;) {
    ++state->idle;
    state->wake.wait(lock, [&] { return state->closed || !state->queue.empty(); });
    --state->idle;
    if (state->closed) {
      break;
    }
    State::Job job = std::move(state->queue.front());
    state->queue.pop_front();
    lock.unlock();
    LookupResult result = state->lookup(job.host, job.port);
    lock.lock();
    // Under the lock: once close() has returned, no completion runs.
    if (!state->closed) {
      job.done(std::move(result));
    }
  }
  --state->threads;
}

}  // namespace fg::net
