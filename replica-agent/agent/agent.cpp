#include "replica-agent/agent/agent.hpp"

#include <csignal>
#include <stdexcept>

#include "common/log/log.hpp"
#include "replica-agent/agent/session.hpp"

namespace fg::agent {

namespace asio = boost::asio;

namespace {

// A plain function (not a capturing coroutine lambda, which GCC 12 can miscompile).
asio::awaitable<void> serve_connection(AgentContext* ctx, std::unique_ptr<net::Conn> conn) {
  return run_session(ctx, std::move(conn));
}

}  // namespace

Agent::Agent(AgentOptions options) : signals_(io_, SIGTERM, SIGINT), drain_timer_(io_) {
  const sim::SimProfile* profile = sim::find_profile(options.profile);
  if (profile == nullptr) {
    throw std::runtime_error("unknown sim profile '" + options.profile + "'");
  }
  const std::size_t slots = options.slots.value_or(profile->slots);
  ctx_ = std::make_unique<AgentContext>(std::move(options), profile, slots);
  AgentContext* ctx = ctx_.get();
  listener_ = std::make_unique<net::Listener>(
      io_.get_executor(), ctx->options.listen, nullptr,
      [ctx](std::unique_ptr<net::Conn> conn) { return serve_connection(ctx, std::move(conn)); },
      "agent");
}

void Agent::wait_for_signal() {
  signals_.async_wait([this](boost::system::error_code ec, int sig) {
    if (!ec) {
      begin_shutdown(sig);
    }
  });
}

void Agent::begin_shutdown(int signal_number) {
  if (shutting_down_) {
    log::warn("second signal: stopping now", {{"signal", signal_number}});
    ctx_->sessions.close_all();
    io_.stop();
    return;
  }
  shutting_down_ = true;
  // The listener stays open: a request arriving now gets a clear 503 (retry elsewhere) rather
  // than a refused connection.
  log::info("shutting down: finishing in-flight requests",
            {{"signal", signal_number},
             {"in_flight", ctx_->sessions.busy()},
             {"drain_timeout_ms", ctx_->options.drain_timeout.count()}});
  drain_timer_.expires_after(ctx_->options.drain_timeout);
  drain_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) {
      return;
    }
    log::warn("drain deadline passed: closing the remaining connections",
              {{"in_flight", ctx_->sessions.busy()}});
    ctx_->sessions.close_all();
    io_.stop();
  });
  wait_for_signal();
  ctx_->sessions.begin_drain([this] {
    log::info("drained: every request finished");
    listener_->stop();
    drain_timer_.cancel();
    io_.stop();
  });
}

int Agent::run() {
  listener_->start();
  const auto& options = ctx_->options;
  log::info("listening",
            {{"listener", "agent"},
             {"address", net::HostPort{options.listen.host, listener_->port()}.to_string()},
             {"model", options.model},
             {"engine", "sim"},
             {"profile", ctx_->profile->name},
             {"slots", ctx_->admission.total()},
             {"time_scale", options.time_scale}});
  wait_for_signal();
  io_.run();
  // Connections still open (drain deadline, second signal) are destroyed with io_; they must not
  // call back into the listener then.
  ctx_->sessions.forget_drain_callback();
  log::info("stopped");
  return 0;
}

}  // namespace fg::agent
