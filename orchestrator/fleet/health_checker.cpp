#include "orchestrator/fleet/health_checker.hpp"

#include <array>
#include <ctime>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/net/server.hpp"

namespace fg::fleet {

namespace asio = boost::asio;

namespace {

// An answer larger than this (head and body, read in pieces) is refused.
constexpr std::size_t kMaxAnswerBytes = 2 * health::ProbeParser::kMaxProbeBody;

std::int64_t unix_now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

health::ProbeOutcome failed(std::string why, Clock::duration took) {
  health::ProbeOutcome outcome;
  outcome.result = health::ProbeResult::fail;
  outcome.error = std::move(why);
  outcome.seconds = seconds(took);
  return outcome;
}

const char* connect_failure(net::ConnectFailure failure) {
  return failure == net::ConnectFailure::timeout ? "timeout"
         : failure == net::ConnectFailure::tls   ? "tls"
                                                 : "connect";
}

}  // namespace

HealthChecker::HealthChecker(asio::any_io_executor executor, const config::ConfigSource* configs,
                             asio::ssl::context* tls, std::string authorization, Hooks hooks)
    : executor_(executor),
      configs_(configs),
      tls_(tls),
      authorization_(std::move(authorization)),
      hooks_(std::move(hooks)),
      timer_(executor),
      config_(configs->snapshot()) {}

HealthChecker::~HealthChecker() {
  for (auto& [id, probed] : probed_) {
    probed.replica->stop_probe = nullptr;
  }
}

void HealthChecker::watch(std::shared_ptr<Replica> replica) {
  if (stopped_) {
    return;
  }
  const ReplicaId id = replica->id;
  replica->stop_probe = [this, id] { forget(id); };
  auto [it, added] = probed_.try_emplace(id);
  if (added) {
    it->second.slot = schedule_.add(id);
  }
  it->second.replica = std::move(replica);
  const auto now = Clock::now();
  schedule_.set(it->second.slot, now);
  if (!started_) {
    started_ = true;
    net::spawn_logged(executor_, tick_loop(this), "probe ticks");
  }
  wake_if_before(now);
}

void HealthChecker::stop() {
  stopped_ = true;
  timer_.cancel();
}

void HealthChecker::forget(ReplicaId id) {
  // Replica::stop_probe (which runs this) stays set: it must not be destroyed while it runs, and
  // a second call finds nothing. A coroutine still working on it finds the entry gone; a probe
  // in flight on its socket ends with the socket (closed here).
  if (auto it = probed_.find(id); it != probed_.end()) {
    schedule_.remove(it->second.slot);
    probed_.erase(it);
  }
}

void HealthChecker::wake_if_before(Clock::time_point due) {
  if (due < sleeping_until_) {
    sleeping_until_ = Clock::time_point::min();  // one cancel is enough until it sleeps again
    timer_.cancel();
  }
}

const config::HealthConfig& HealthChecker::health_of(const Replica& replica) const {
  const auto* model = config_->find_model(replica.model);
  return model ? model->health : config_->health;
}

void HealthChecker::schedule_next(Probed& probed, Clock::time_point last) {
  const auto due = hooks_.next_probe_at(*probed.replica, last);
  schedule_.set(probed.slot, due, health::ProbeSchedule::allowed_early(due - last));
  wake_if_before(due);
}

asio::awaitable<void> HealthChecker::tick_loop(HealthChecker* self) {
  while (!self->stopped_) {
    self->sleeping_until_ = self->schedule_.next_wake().value_or(Clock::time_point::max());
    self->timer_.expires_at(self->sleeping_until_);
    co_await self->timer_.async_wait(asio::as_tuple(asio::use_awaitable));
    self->sleeping_until_ = Clock::time_point::min();  // awake: watch() need not wake it
    if (self->stopped_) {
      break;
    }
    self->on_wake(Clock::now());
  }
}

void HealthChecker::on_wake(Clock::time_point now) {
  // Read once per wake-up: a reload may have replaced the settings since the last one.
  config_ = configs_->snapshot();
  // Answers first: a probe whose answer arrived must not be taken for timed out below.
  read_answers(now);
  for (ReplicaId id : schedule_.take_due(now)) {
    on_due(id, now);
  }
}

void HealthChecker::read_answers(Clock::time_point now) {
  std::array<std::uint64_t, health::ProbePoller::kBatch> keys;
  for (;;) {
    const std::size_t n = poller_.ready(keys);
    for (std::size_t i = 0; i < n; ++i) {
      // Reading one answer may end another replica (its outcome removes it): look each up.
      if (auto it = probed_.find(keys[i]); it != probed_.end()) {
        read_answer(it->first, it->second, now);
      }
    }
    if (n < keys.size()) {
      return;
    }
  }
}

void HealthChecker::read_answer(ReplicaId id, Probed& probed, Clock::time_point now) {
  if (!probed.socket.is_open()) {
    return;
  }
  if (!probed.flight) {
    // Input on an idle connection: the replica closed it (its keep-alive ended) or sent bytes
    // nobody asked for. Either way it must not carry the next probe, which connects anew.
    probed.socket.close();
    return;
  }
  const health::ProbeFlight flight = *probed.flight;
  std::string_view bytes;  // the answer so far
  bool eof = false;
  std::optional<std::int64_t> arrived;
  std::optional<health::ProbeAnswer> parsed;  // TLS: the whole answer, parsed in the loop
  for (;;) {
    const auto got = probed.socket.receive_now(read_buffer_);
    if (got.error) {
      finish(id, failed("read", now - flight.sent), now, false);
      return;
    }
    if (got.would_block) {
      break;
    }
    if (got.eof) {
      eof = true;
      break;
    }
    arrived = got.arrived_unix_ns ? got.arrived_unix_ns : arrived;
    if (probed.partial.empty() && got.bytes < read_buffer_.size()) {
      // The usual case: the whole answer in one read, parsed where it lies. Plain TCP: a short
      // read emptied the socket. TLS: OpenSSL returns a record at a time, so only a whole answer
      // ends the reading early (one more read would find nothing: a system call less per probe;
      // with read-ahead too, the https probes' CPU moved within noise, 2.83% -> 2.77% of a core).
      const std::string_view here(read_buffer_.data(), got.bytes);
      if (probed.socket.tls()) {
        body_.clear();
        parsed = health::read_probe_answer(here, false, &body_);
        if (parsed->state != health::ProbeAnswer::State::done) {
          parsed.reset();
        }
      }
      if (!probed.socket.tls() || parsed) {
        bytes = here;
        break;
      }
    }
    probed.partial.append(read_buffer_.data(), got.bytes);
    if (probed.partial.size() > kMaxAnswerBytes) {
      finish(id, failed("bad response", now - flight.sent), now, false);
      return;
    }
  }
  if (!probed.partial.empty()) {
    if (!bytes.empty()) {
      probed.partial.append(bytes);
    }
    bytes = probed.partial;
  }
  if (bytes.empty()) {
    if (eof) {
      finish(id, failed("read", now - flight.sent), now, false);
    }
    return;  // nothing new (the next look is scheduled)
  }
  if (!parsed) {
    body_.clear();
    parsed = health::read_probe_answer(bytes, eof, &body_);
  }
  const health::ProbeAnswer answer = *parsed;
  if (answer.state == health::ProbeAnswer::State::more && !eof) {
    if (probed.partial.empty()) {
      probed.partial.assign(bytes);  // the rest comes later; its look is scheduled
    }
    return;
  }
  if (answer.state != health::ProbeAnswer::State::done) {
    finish(id, failed(eof ? "read" : "bad response", now - flight.sent), now, false);
    return;
  }
  const auto took = flight.answer_took(arrived, now);
  if (!flight.in_time(took)) {
    finish(id, failed("timeout", took), now, false);
    return;
  }
  auto outcome =
      health::judge_answer(answer.status, body_, probed.replica->model, &probed.body_memo);
  outcome.seconds = seconds(took);
  finish(id, std::move(outcome), flight.sent + took, answer.keep_alive && !answer.extra_bytes);
}

void HealthChecker::on_due(ReplicaId id, Clock::time_point now) {
  auto it = probed_.find(id);
  if (it == probed_.end()) {
    return;
  }
  Probed& probed = it->second;
  if (probed.replica->removed) {
    forget(id);
    return;
  }
  if (probed.flight) {
    // Its answer was not among those just read: look again later, or it timed out.
    if (auto look = probed.flight->next_look(now)) {
      schedule_.set(probed.slot, *look);
      return;
    }
    finish(id, failed("timeout", now - probed.flight->sent), now, false);
    return;
  }
  if (probed.busy) {
    return;  // its coroutine schedules it when done
  }
  if (hooks_.paused(*probed.replica)) {
    schedule_next(probed, now);
    return;
  }
  if (!probed.socket.is_open()) {
    probed.busy = true;
    net::spawn_logged(executor_, connect_and_send(this, id), "probe connect");
    return;
  }
  send(id, probed, Clock::now(), unix_now_ns(), now);
}

void HealthChecker::send(ReplicaId id, Probed& probed, Clock::time_point started,
                         std::int64_t started_unix_ns, Clock::time_point now) {
  const auto& h = health_of(*probed.replica);
  if (probed.request.empty() || probed.request_path != h.path) {
    probed.request = health::probe_request(probed.replica->url, h.path, authorization_);
    probed.request_path = h.path;
  }
  probed.flight = health::ProbeFlight{started, started_unix_ns, h.timeout,
                                      health::ProbeSchedule::allowed_early(h.interval)};
  if (!probed.socket.send_now(probed.request)) {
    finish(id, failed("write", Clock::now() - started), now, false);
    return;
  }
  const auto look = probed.flight->next_look(now);
  if (!look) {
    finish(id, failed("timeout", now - started), now, false);
    return;
  }
  schedule_.set(probed.slot, *look);
  wake_if_before(*look);
}

void HealthChecker::finish(ReplicaId id, health::ProbeOutcome outcome, Clock::time_point last,
                           bool keep) {
  auto it = probed_.find(id);
  if (it == probed_.end()) {
    return;
  }
  Probed& probed = it->second;
  probed.flight.reset();
  std::string().swap(probed.partial);
  if (!keep) {
    probed.socket.close();
  }
  if (stopped_) {
    return;
  }
  if (probed.replica->removed) {
    forget(id);
    return;
  }
  // Held here: the outcome may remove the replica (and so forget it).
  const std::shared_ptr<Replica> replica = probed.replica;
  hooks_.on_outcome(*replica, outcome);
  if (auto again = probed_.find(id); again != probed_.end() && !stopped_) {
    schedule_next(again->second, last);
  }
}

asio::awaitable<void> HealthChecker::connect_and_send(HealthChecker* self, ReplicaId id) {
  auto it = self->probed_.find(id);
  if (it == self->probed_.end()) {
    co_return;
  }
  const std::shared_ptr<Replica> replica = it->second.replica;
  self->config_ = self->configs_->snapshot();
  const auto started = Clock::now();
  const auto started_unix_ns = unix_now_ns();
  const auto timeout = self->health_of(*replica).timeout;
  const bool tls = replica->url.tls();
  auto connected = co_await net::connect_to(replica->url, tls ? self->tls_ : nullptr, timeout);
  it = self->probed_.find(id);
  if (it == self->probed_.end() || self->stopped_) {
    co_return;  // forgotten meanwhile
  }
  it->second.busy = false;
  const auto now = Clock::now();
  if (!connected.conn) {
    self->finish(id, failed(connect_failure(connected.failure), now - started), now, false);
    co_return;
  }
  // Out of Asio's event loop: its answers are read at the checker's wake-ups (https: by its
  // OpenSSL connection, on the same socket).
  net::error_code ec;
  health::ProbeSocket socket;
  if (tls) {
    if (auto released = net::release_tls(*connected.conn)) {
      socket = health::ProbeSocket(released->fd, released->ssl);
    } else {
      ec = net::asio::error::bad_descriptor;
    }
  } else {
    socket = health::ProbeSocket(connected.conn->socket().release(ec));
  }
  if (ec || !self->poller_.add(socket, id)) {
    self->finish(id, failed("connect", now - started), now, false);
    co_return;
  }
  it->second.socket = std::move(socket);
  self->config_ = self->configs_->snapshot();
  self->send(id, it->second, started, started_unix_ns, now);
}

}  // namespace fg::fleet
