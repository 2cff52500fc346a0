#pragma once

// Host name lookups on a small pool of threads. getaddrinfo blocks and cannot be cancelled;
// running it here keeps the io thread free, and running several at once keeps one slow name
// from delaying every other (Asio's own resolver runs them one after the other on a single
// internal thread). No Asio: completions are plain callbacks on a pool thread, which the caller
// posts back to its io thread.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/net/dns_cache.hpp"

namespace fg::net {

using LookupFn = std::function<LookupResult(const std::string& host, std::uint16_t port)>;

// getaddrinfo for TCP (AI_ADDRCONFIG), addresses in the resolver's order.
LookupResult system_lookup(const std::string& host, std::uint16_t port);

class LookupPool {
 public:
  using Done = std::function<void(LookupResult)>;

  // Threads are started as lookups need them, at most max_threads; lookups beyond that wait
  // in a queue of at most max_queued.
  LookupPool(std::size_t max_threads, LookupFn lookup, std::size_t max_queued = 1024);
  // close(), then leaves the threads to end by themselves: one may be inside a getaddrinfo
  // that takes seconds, and nobody waits for it.
  ~LookupPool();
  LookupPool(const LookupPool&) = delete;
  LookupPool& operator=(const LookupPool&) = delete;

  // Queues a lookup; done runs on a pool thread with its result. False (done never runs) when
  // the pool is closed or its queue is full.
  bool submit(std::string host, std::uint16_t port, Done done);
  // No done runs once close() has returned; queued lookups are dropped.
  void close();
  std::size_t threads() const;

 private:
  struct State;
  static void work(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace fg::net
