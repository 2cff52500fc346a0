#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "common/net/dns_cache.hpp"
#include "common/net/lookup_pool.hpp"

namespace fg::net {

struct ResolveResult {
  enum class Outcome { ok, failed, timeout, cancelled };
  Outcome outcome = Outcome::failed;
  std::vector<boost::asio::ip::tcp::endpoint> endpoints;
  LookupResult::Error error = LookupResult::Error::none;
  std::string message;
};

// Resolves replica host names for connections: IP literals at once, other names from a cache
// (DnsCache: one TTL, one lookup at a time per host:port) or on a small LookupPool, with the
// result posted back to the io thread. A lookup is waited for until the caller's deadline or
// its cancellation; a lookup abandoned that way still finishes on its thread and fills the
// cache. Everything but the pool runs on the io thread.
class Resolver {
 public:
  static constexpr std::size_t kDefaultThreads = 4;

  explicit Resolver(boost::asio::any_io_executor executor,
                    std::size_t max_threads = kDefaultThreads, LookupFn lookup = system_lookup);
  ~Resolver();
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  void set_cache_ttl(std::chrono::steady_clock::duration ttl);
  // Honours the awaiting coroutine's cancellation (outcome cancelled).
  boost::asio::awaitable<ResolveResult> resolve(std::string host, std::uint16_t port,
                                                std::chrono::steady_clock::time_point deadline);
  // Stops the lookups: no completion is posted after this returns.
  void close();

 private:
  struct Core;
  static boost::asio::awaitable<ResolveResult> wait(std::shared_ptr<Core> core, std::string host,
                                                    std::uint16_t port,
                                                    std::chrono::steady_clock::time_point deadline);
  std::shared_ptr<Core> core_;
};

// The resolver shared by everything that runs on this executor's execution context (created on
// first use, closed when the context shuts down).
Resolver& resolver_for(const boost::asio::any_io_executor& executor);

}  // namespace fg::net
