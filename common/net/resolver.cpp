#include "common/net/resolver.hpp"

#include <algorithm>
#include <map>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace fg::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

// One coroutine waiting for a lookup: the timer doubles as its deadline and its wake-up call.
struct Waiter {
  explicit Waiter(asio::any_io_executor executor) : wake(std::move(executor)) {}
  asio::steady_timer wake;
  std::optional<LookupResult> result;
};

std::vector<tcp::endpoint> endpoints_of(const std::vector<std::string>& addresses,
                                        std::uint16_t port) {
  std::vector<tcp::endpoint> out;
  for (const auto& text : addresses) {
    boost::system::error_code ec;
    auto address = asio::ip::make_address(text, ec);
    if (!ec) {
      out.emplace_back(address, port);
    }
  }
  return out;
}

}  // namespace

struct Resolver::Core : std::enable_shared_from_this<Resolver::Core> {
  Core(asio::any_io_executor ex, std::size_t max_threads, LookupFn lookup)
      : executor(std::move(ex)), pool(max_threads, std::move(lookup)) {}

  // On the io thread, with a lookup's result.
  void complete(const std::string& key, const LookupResult& result) {
    cache.finish(key, result, Clock::now());
    auto it = waiters.find(key);
    if (it == waiters.end()) {
      return;
    }
    auto woken = std::move(it->second);
    waiters.erase(it);
    for (const auto& w : woken) {
      w->result = result;
      w->wake.cancel();
    }
  }

  void forget(const std::string& key, const std::shared_ptr<Waiter>& waiter) {
    auto it = waiters.find(key);
    if (it == waiters.end()) {
      return;
    }
    auto& list = it->second;
    list.erase(std::remove(list.begin(), list.end(), waiter), list.end());
    if (list.empty()) {
      waiters.erase(it);
    }
  }

  asio::any_io_executor executor;
  DnsCache cache;
  std::map<std::string, std::vector<std::shared_ptr<Waiter>>> waiters;
  LookupPool pool;
};

Resolver::Resolver(asio::any_io_executor executor, std::size_t max_threads, LookupFn lookup)
    : core_(std::make_shared<Core>(std::move(executor), max_threads, std::move(lookup))) {}

Resolver::~Resolver() {
  close();
}

void Resolver::close() {
  core_->pool.close();
}

void Resolver::set_cache_ttl(Clock::duration ttl) {
  core_->cache.set_ttl(ttl);
}

asio::awaitable<ResolveResult> Resolver::resolve(std::string host, std::uint16_t port,
                                                 Clock::time_point deadline) {
  return wait(core_, std::move(host), port, deadline);
}

asio::awaitable<ResolveResult> Resolver::wait(std::shared_ptr<Core> core, std::string host,
                                              std::uint16_t port, Clock::time_point deadline) {
  ResolveResult out;
  boost::system::error_code literal_ec;
  auto literal = asio::ip::make_address(host, literal_ec);
  if (!literal_ec) {
    out.outcome = ResolveResult::Outcome::ok;
    out.endpoints.emplace_back(literal, port);
    co_return out;
  }
  const std::string key = host + ":" + std::to_string(port);
  auto begin = core->cache.begin(key, Clock::now());
  if (begin.step == DnsCache::Step::cached) {
    out.outcome = ResolveResult::Outcome::ok;
    out.endpoints = endpoints_of(begin.addresses, port);
    co_return out;
  }
  auto waiter = std::make_shared<Waiter>(core->executor);
  core->waiters[key].push_back(waiter);
  if (begin.step == DnsCache::Step::lookup) {
    std::weak_ptr<Core> weak = core;
    auto executor = core->executor;
    const bool queued = core->pool.submit(host, port, [weak, executor, key](LookupResult r) {
      asio::post(executor, [weak, key, r = std::move(r)] {
        if (auto c = weak.lock()) {
          c->complete(key, r);
        }
      });
    });
    if (!queued) {
      LookupResult busy;
      busy.error = LookupResult::Error::try_again;
      busy.message = "too many host name lookups at once";
      core->complete(key, busy);
    }
  }
  if (!waiter->result) {
    waiter->wake.expires_at(deadline);
    auto [ec] = co_await waiter->wake.async_wait(asio::as_tuple(asio::use_awaitable));
    if (!waiter->result) {
      core->forget(key, waiter);
      out.outcome = ec == asio::error::operation_aborted ? ResolveResult::Outcome::cancelled
                                                         : ResolveResult::Outcome::timeout;
      co_return out;
    }
  }
  const LookupResult& r = *waiter->result;
  out.endpoints = endpoints_of(r.addresses, port);
  out.outcome = r.ok() && !out.endpoints.empty() ? ResolveResult::Outcome::ok
                                                 : ResolveResult::Outcome::failed;
  out.error = r.error;
  out.message = r.message;
  co_return out;
}

namespace {

class ResolverService : public asio::execution_context::service {
 public:
  using key_type = ResolverService;
  static asio::execution_context::id id;

  explicit ResolverService(asio::execution_context& context)
      : asio::execution_context::service(context) {}

  Resolver& get(const asio::any_io_executor& executor) {
    if (!resolver_) {
      resolver_ = std::make_unique<Resolver>(executor);
    }
    return *resolver_;
  }

 private:
  // Before the context destroys its handlers: nothing is posted to it from now on.
  void shutdown() override {
    if (resolver_) {
      resolver_->close();
    }
  }

  std::unique_ptr<Resolver> resolver_;
};

asio::execution_context::id ResolverService::id;

}  // namespace

Resolver& resolver_for(const asio::any_io_executor& executor) {
  auto& context = asio::query(executor, asio::execution::context);
  return asio::use_service<ResolverService>(context).get(executor);
}

}  // namespace fg::net
