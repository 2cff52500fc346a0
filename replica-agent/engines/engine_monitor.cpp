#include "replica-agent/engines/engine_monitor.hpp"

#include <algorithm>
#include <chrono>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "common/log/log.hpp"
#include "common/util/json.hpp"
#include "common/util/process.hpp"
#include "replica-agent/core/backoff.hpp"
#include "replica-agent/core/http_client.hpp"

namespace fg::agent {

namespace asio = boost::asio;

namespace {

constexpr std::chrono::milliseconds kProbeTimeout{2000};
constexpr std::chrono::milliseconds kProbeWhileLoading{250};
constexpr std::chrono::milliseconds kProbeWhileReady{2000};
constexpr auto kStopGrace = std::chrono::seconds(5);
// Autotune: a candidate gets this long to load its model (a phone reading a 9B model from flash
// takes tens of seconds) and this long for the reference job (minutes for a long prompt on a slow
// phone). The warm-up job (the first request after a load pages the weights in) is short.
constexpr std::chrono::milliseconds kAutotuneLoadTimeout{5 * 60 * 1000};
constexpr std::chrono::milliseconds kAutotuneJobTimeout{15 * 60 * 1000};
constexpr std::uint32_t kWarmupPromptTokens = 8;
constexpr std::uint32_t kWarmupPredictTokens = 2;

nlohmann::json optional_json(const std::optional<std::uint32_t>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// The error of a failed engine call for the autotune report: llama.cpp's message when it sent
// one ("request (300 tokens) exceeds the available context size ..."), else the status or error.
std::string call_error(const char* what, const HttpResult& r) {
  if (!r.answered) {
    return std::string(what) + ": " + r.error;
  }
  std::string text = std::string(what) + ": HTTP " + std::to_string(r.status);
  auto doc = parse_network_json(r.body);
  if (doc.is_object() && doc.contains("error") && doc["error"].is_object() &&
      doc["error"].contains("message") && doc["error"]["message"].is_string()) {
    text += " (" + doc["error"]["message"].get<std::string>() + ")";
  }
  return text;
}

// total_slots of llama-server's GET /props; 0 when absent or out of range.
std::size_t total_slots(const std::string& body) {
  auto doc = parse_network_json(body);
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
      watcher_(executor),
      restart_timer_(executor),
      candidate_exit_(executor),
      slots_known_(ctx->config.slots.has_value() ||
                   ctx->config.engine.kind != EngineKind::llama_server),
      command_(ctx->config.engine.command),
      rng_(std::random_device{}()) {}

EngineMonitor::~EngineMonitor() {
  kill_now();
}

void EngineMonitor::start() {
  asio::co_spawn(executor_, run(this),
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

asio::awaitable<void> EngineMonitor::run(EngineMonitor* self) {
  co_await asio::this_coro::throw_if_cancelled(false);
  const AgentConfig& config = self->ctx_->config;
  if (config.engine.autotune.enabled && !config.engine.command.empty()) {
    co_await tune(self);
    if (self->stopped_) {
      co_return;
    }
  }
  if (!self->command_.empty()) {
    self->spawn_child();
  }
  co_await probe_loop(self);
}

asio::awaitable<void> EngineMonitor::tune(EngineMonitor* self) {
  AgentContext* ctx = self->ctx_;
  const AutotuneConfig& tune = ctx->config.engine.autotune;
  const std::vector<std::string>& command = ctx->config.engine.command;
  const std::vector<autotune::Candidate> candidates = autotune::expand_candidates(tune, command);
  autotune::Report& report = ctx->autotune;
  report.state = autotune::Report::State::running;
  report.results.clear();
  for (const auto& c : candidates) {
    autotune::Result pending;
    pending.candidate = c;
    report.results.push_back(pending);
  }
  log::info("autotune: trying llama-server settings", {{"candidates", candidates.size()},
                                                       {"prompt_tokens", tune.prompt_tokens},
                                                       {"predict_tokens", tune.predict_tokens}});
  const auto started = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    autotune::Result result = co_await try_candidate(self, candidates[i]);
    if (self->stopped_) {
      co_return;
    }
    const auto& c = result.candidate;
    if (result.measured) {
      ctx->metrics.autotune_measured(autotune::label(c.threads), autotune::label(c.batch_size),
                                     result.speeds.prefill_tps, result.speeds.decode_tps,
                                     result.seconds);
      log::info("autotune: measured", {{"threads", optional_json(c.threads)},
                                       {"batch_size", optional_json(c.batch_size)},
                                       {"prefill_tps", result.speeds.prefill_tps},
                                       {"decode_tps", result.speeds.decode_tps},
                                       {"seconds", result.seconds}});
    } else {
      log::warn("autotune: candidate failed; skipping it",
                {{"threads", optional_json(c.threads)},
                 {"batch_size", optional_json(c.batch_size)},
                 {"error", result.error}});
    }
    report.results[i] = std::move(result);
  }
  const auto took_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::steady_clock::now() - started)
                           .count();
  report.chosen = autotune::pick_fastest(report.results);
  if (!report.chosen) {
    report.state = autotune::Report::State::failed;
    log::error("autotune: every candidate failed; starting the engine with the command as given",
               {{"candidates", candidates.size()}, {"took_ms", took_ms}});
    co_return;
  }
  report.state = autotune::Report::State::done;
  const autotune::Result& best = report.results[*report.chosen];
  self->command_ = autotune::candidate_command(command, best.candidate);
  ctx->metrics.autotune_chosen(autotune::label(best.candidate.threads),
                               autotune::label(best.candidate.batch_size));
  log::info("autotune: chosen", {{"threads", optional_json(best.candidate.threads)},
                                 {"batch_size", optional_json(best.candidate.batch_size)},
                                 {"prefill_tps", best.speeds.prefill_tps},
                                 {"decode_tps", best.speeds.decode_tps},
                                 {"seconds", best.seconds},
                                 {"took_ms", took_ms}});
}

asio::awaitable<autotune::Result> EngineMonitor::try_candidate(EngineMonitor* self,
                                                               autotune::Candidate candidate) {
  AgentContext* ctx = self->ctx_;
  const AutotuneConfig& tune = ctx->config.engine.autotune;
  autotune::Result result;
  result.candidate = candidate;
  const std::vector<std::string> argv =
      autotune::candidate_command(ctx->config.engine.command, candidate);
  const pid_t pid = spawn_child_process(argv);
  if (pid < 0) {
    result.error = "cannot start the engine: fork failed";
    co_return result;
  }
  self->pid_ = pid;
  self->candidate_exited_ = false;
  self->watcher_.watch(pid, [self, pid](int status) { self->on_candidate_exit(pid, status); });
  log::info("autotune: engine started", {{"pid", pid},
                                         {"threads", optional_json(candidate.threads)},
                                         {"batch_size", optional_json(candidate.batch_size)}});
  std::string why;
  const bool loaded = co_await wait_until_loaded(self, &why);
  if (!loaded) {
    result.error = why;
  } else {
    const auto& url = ctx->config.engine.url;
    auto* tls = ctx->client_tls.get();
    std::string path = "/completion";
    std::string none;
    std::string warmup = autotune::reference_request(
        std::min(tune.prompt_tokens, kWarmupPromptTokens), kWarmupPredictTokens);
    auto w = co_await http_call(url, "POST", path, none, warmup, tls, kAutotuneJobTimeout);
    if (self->stopped_) {
      co_return result;
    }
    if (!w.answered || w.status != 200) {
      result.error = call_error("warm-up request", w);
    } else {
      std::string job = autotune::reference_request(tune.prompt_tokens, tune.predict_tokens);
      auto r = co_await http_call(url, "POST", path, none, job, tls, kAutotuneJobTimeout);
      if (self->stopped_) {
        co_return result;
      }
      if (!r.answered || r.status != 200) {
        result.error = call_error("reference job", r);
      } else if (auto speeds = autotune::parse_timings(r.body, &why)) {
        result.measured = true;
        result.speeds = *speeds;
        result.seconds =
            autotune::reference_seconds(tune.prompt_tokens, tune.predict_tokens, *speeds);
      } else {
        result.error = "reference job: " + why;
      }
    }
  }
  // A candidate that is gone was not what answered (another server holding the port, say).
  if (self->candidate_exited_) {
    if (result.measured || result.error.empty()) {
      result.measured = false;
      result.error = "the engine exited during the measurement (another server on its port?)";
    }
  }
  co_await stop_candidate(self);
  co_return result;
}

asio::awaitable<bool> EngineMonitor::wait_until_loaded(EngineMonitor* self, std::string* why) {
  AgentContext* ctx = self->ctx_;
  const auto& url = ctx->config.engine.url;
  auto* tls = ctx->client_tls.get();
  const auto deadline = std::chrono::steady_clock::now() + kAutotuneLoadTimeout;
  asio::steady_timer timer(co_await asio::this_coro::executor);
  std::string path = "/health";
  std::string none;
  for (;;) {
    if (self->stopped_ || self->pid_ <= 0) {
      *why = "stopped";
      co_return false;
    }
    if (self->candidate_exited_) {
      const int code = net::exit_code(self->candidate_status_);
      *why = "the engine exited with status " + std::to_string(code) + " before it was ready" +
             (code == 127 ? " (command not found)" : "");
      co_return false;
    }
    auto r = co_await http_call(url, "GET", path, none, none, tls, kProbeTimeout);
    if (r.answered && r.status == 200) {
      co_return true;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      *why = "the engine did not answer GET /health with 200 within " +
             std::to_string(kAutotuneLoadTimeout.count() / 1000) + " s";
      co_return false;
    }
    timer.expires_after(kProbeWhileLoading);
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) {
      *why = "stopped";
      co_return false;
    }
  }
}

asio::awaitable<void> EngineMonitor::stop_candidate(EngineMonitor* self) {
  if (self->pid_ <= 0 || self->candidate_exited_ || self->stopped_) {
    co_return;  // already gone (it exited, or stop() took care of it)
  }
  const pid_t pid = self->pid_;
  self->watcher_.terminate(pid, kStopGrace);
  while (!self->candidate_exited_) {
    self->candidate_exit_.expires_at(std::chrono::steady_clock::time_point::max());
    co_await self->candidate_exit_.async_wait(asio::as_tuple(asio::use_awaitable));
    if (self->stopped_) {
      co_return;  // stop() waits for it
    }
  }
  log::info("autotune: engine stopped", {{"pid", pid}});
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
  const std::vector<std::string>& args = command_;
  const pid_t pid = spawn_child_process(args);
  if (pid < 0) {
    log::error("cannot start the engine", {{"error", "fork failed"}});
    return;
  }
  pid_ = pid;
  watcher_.watch(pid, [this](int status) { on_child_exit(status); });
  log::info("engine started", {{"command", args[0]}, {"pid", pid}, {"restarts", restarts_}});
}

void EngineMonitor::on_child_exit(int wait_status) {
  const pid_t pid = pid_;
  pid_ = -1;
  if (stopped_) {
    log::info("engine stopped", {{"pid", pid}});
    finish_stop();
    return;
  }
  ctx_->engine_ready = false;
  const int code = net::exit_code(wait_status);
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

void EngineMonitor::on_candidate_exit(pid_t pid, int wait_status) {
  if (pid_ == pid) {
    pid_ = -1;
  }
  candidate_exited_ = true;
  candidate_status_ = wait_status;
  candidate_exit_.cancel();
  if (stopped_) {
    finish_stop();
  }
}

void EngineMonitor::stop(std::function<void()> done) {
  if (done) {
    on_stopped_ = [first = std::move(on_stopped_), then = std::move(done)] {
      if (first) {
        first();
      }
      then();
    };
  }
  if (!stopped_) {
    stopped_ = true;
    stop_probe_.emit(asio::cancellation_type::terminal);
    restart_timer_.cancel();
    candidate_exit_.cancel();
    if (pid_ > 0) {
      watcher_.terminate(pid_, kStopGrace);
      return;  // on_child_exit or on_candidate_exit finishes
    }
  }
  if (pid_ <= 0) {
    finish_stop();
  }
}

void EngineMonitor::finish_stop() {
  if (auto done = std::move(on_stopped_)) {
    on_stopped_ = nullptr;
    done();
  }
}

void EngineMonitor::kill_now() {
  stopped_ = true;
  stop_probe_.emit(asio::cancellation_type::terminal);
  restart_timer_.cancel();
  candidate_exit_.cancel();
  watcher_.kill_all();
}

}  // namespace fg::agent
