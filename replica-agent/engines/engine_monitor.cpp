#include "replica-agent/engines/engine_monitor.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "common/log/log.hpp"
#include "common/util/process.hpp"
#include "replica-agent/agent/http_client.hpp"
#include "replica-agent/registration/backoff.hpp"

namespace fg::agent {

namespace asio = boost::asio;

namespace {

constexpr std::chrono::milliseconds kProbeTimeout{2000};
constexpr std::chrono::milliseconds kProbeWhileLoading{250};
constexpr std::chrono::milliseconds kProbeWhileReady{2000};
constexpr auto kStopGrace = std::chrono::seconds(5);

// total_slots of llama-server's GET /props; 0 when absent or out of range.
std::size_t total_slots(const std::string& body) {
  auto doc = nlohmann::json::parse(body, nullptr, false);
  if (!doc.is_object()) {
    return 0;
  }
  auto it = doc.find("total_slots");
  if (it == doc.end() || !it->is_number_unsigned()) {
    return 0;
  }
  auto n = it->get<std::uint64_t>();
  return n >= 1 && n <= kMaxAgentSlots ? static_cast<std::size_t>(n) : 0;
}

}  // namespace

EngineMonitor::EngineMonitor(asio::any_io_executor executor, AgentContext* ctx)
    : executor_(executor),
      ctx_(ctx),
      child_signals_(executor, SIGCHLD),
      restart_timer_(executor),
      slots_known_(ctx->config.slots.has_value() ||
                   ctx->config.engine.kind != EngineKind::llama_server),
      rng_(std::random_device{}()) {}

EngineMonitor::~EngineMonitor() {
  stop();
}

void EngineMonitor::start() {
  if (!ctx_->config.engine.command.empty()) {
    wait_for_child();
    spawn_child();
  }
  asio::co_spawn(executor_, probe_loop(this),
                 asio::bind_cancellation_slot(stop_probe_.slot(), [](std::exception_ptr e) {
                   if (!e) {
                     return;
                   }
                   try {
                     std::rethrow_exception(e);
                   } catch (const std::exception& ex) {
                     log::error("task failed", {{"task", "engine probe"}, {"error", ex.what()}});
                   }
                 }));
}

asio::awaitable<bool> EngineMonitor::probe_once(EngineMonitor* self) {
  AgentContext* ctx = self->ctx_;
  const auto& url = ctx->config.engine.url;
  auto* tls = ctx->client_tls.get();
  const bool llama = ctx->config.engine.kind == EngineKind::llama_server;
  std::string path = llama ? "/health" : "/v1/models";
  std::string none;
  auto r = co_await http_call(url, "GET", path, none, none, tls, kProbeTimeout);
  if (!r.answered || r.status != 200) {
    co_return false;
  }
  if (!self->slots_known_) {
    std::string props = "/props";
    auto p = co_await http_call(url, "GET", props, none, none, tls, kProbeTimeout);
    const std::size_t slots = p.answered && p.status == 200 ? total_slots(p.body) : 0;
    if (slots == 0) {
      log::warn("cannot read the engine's slot count from GET /props (set slots to skip this)",
                {{"error", p.answered ? "HTTP " + std::to_string(p.status) + " or no total_slots"
                                      : p.error}});
      co_return false;
    }
    if (!ctx->admission.resize(slots)) {
      co_return false;
    }
    self->slots_known_ = true;
    log::info("engine slots from /props", {{"slots", slots}});
  }
  co_return true;
}

asio::awaitable<void> EngineMonitor::probe_loop(EngineMonitor* self) {
  co_await asio::this_coro::throw_if_cancelled(false);
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    const bool ready = co_await probe_once(self);
    AgentContext* ctx = self->ctx_;
    if (ready != ctx->engine_ready) {
      ctx->engine_ready = ready;
      if (ready) {
        self->restarts_ = 0;
        log::info("engine ready", {{"engine", to_string(ctx->config.engine.kind)},
                                   {"url", ctx->config.engine.url.to_string()},
                                   {"slots", ctx->admission.total()}});
      } else {
        log::warn("engine not ready: answering 503 until it is",
                  {{"engine", to_string(ctx->config.engine.kind)}});
      }
    }
    timer.expires_after(ready ? kProbeWhileReady : kProbeWhileLoading);
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) {
      co_return;
    }
  }
}

void EngineMonitor::spawn_child() {
  const std::vector<std::string>& args = ctx_->config.engine.command;
  const pid_t pid = spawn_child_process(args);
  if (pid < 0) {
    log::error("cannot start the engine", {{"error", "fork failed"}});
    return;
  }
  pid_ = pid;
  log::info("engine started", {{"command", args[0]}, {"pid", pid}, {"restarts", restarts_}});
}

void EngineMonitor::wait_for_child() {
  child_signals_.async_wait([this](boost::system::error_code ec, int) {
    if (ec || stopped_) {
      return;
    }
    reap();
    wait_for_child();
  });
}

void EngineMonitor::reap() {
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      return;
    }
    if (pid != pid_) {
      continue;
    }
    pid_ = -1;
    ctx_->engine_ready = false;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    const auto delay = backoff_delay(restarts_, static_cast<double>(rng_() >> 11) * 0x1.0p-53);
    ++restarts_;
    log::warn("engine exited; restarting", {{"status", code},
                                            {"restart_in_ms", delay.count()},
                                            {"hint", code == 127 ? "command not found" : ""}});
    restart_timer_.expires_after(delay);
    restart_timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec && !stopped_) {
        spawn_child();
      }
    });
  }
}

void EngineMonitor::stop() {
  if (stopped_) {
    return;
  }
  stopped_ = true;
  stop_probe_.emit(asio::cancellation_type::terminal);
  restart_timer_.cancel();
  child_signals_.cancel();
  if (pid_ <= 0) {
    return;
  }
  ::kill(-pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + kStopGrace;
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno == ECHILD)) {
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      log::warn("engine did not stop in time: killing it", {{"pid", pid_}});
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  log::info("engine stopped", {{"pid", pid_}});
  pid_ = -1;
}

}  // namespace fg::agent
