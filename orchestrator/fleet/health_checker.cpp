#include "orchestrator/fleet/health_checker.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/net/server.hpp"

namespace fg::fleet {

namespace asio = boost::asio;

HealthChecker::HealthChecker(asio::any_io_executor executor, const config::ConfigSource* configs,
                             asio::ssl::context* tls, std::string authorization, Hooks hooks)
    : executor_(std::move(executor)),
      configs_(configs),
      tls_(tls),
      authorization_(std::move(authorization)),
      hooks_(std::move(hooks)) {}

void HealthChecker::watch(std::shared_ptr<Replica> replica) {
  net::spawn_logged(executor_, loop(this, std::move(replica)), "probe");
}

asio::awaitable<void> HealthChecker::loop(HealthChecker* self, std::shared_ptr<Replica> replica) {
  asio::steady_timer timer(self->executor_);
  replica->stop_probe = [&timer] { timer.cancel(); };
  struct Forget {
    Replica* replica;
    ~Forget() { replica->stop_probe = nullptr; }
  } forget{replica.get()};
  std::unique_ptr<net::Conn> conn;
  auto last = Clock::now();
  bool first = true;
  while (!self->done(*replica)) {
    if (!first) {
      timer.expires_at(self->hooks_.next_probe_at(*replica, last));
      co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
      if (self->done(*replica)) {
        break;
      }
    }
    first = false;
    if (self->hooks_.paused(*replica)) {
      last = Clock::now();
      continue;
    }
    // Read for each probe: a reload may have replaced the settings meanwhile.
    const auto config = self->configs_->snapshot();
    const auto* model = config->find_model(replica->model);
    const auto& h = model ? model->health : config->health;
    auto outcome = co_await health::probe_once(replica->url, h.path, replica->model, self->tls_,
                                               h.timeout, self->authorization_, &conn);
    if (self->done(*replica)) {
      break;
    }
    last = Clock::now();
    self->hooks_.on_outcome(*replica, outcome);
  }
}

}  // namespace fg::fleet
