#include "orchestrator/fleet/health_checker.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/net/server.hpp"

namespace fg::fleet {

namespace asio = boost::asio;

HealthChecker::HealthChecker(asio::any_io_executor executor, const config::ConfigSource* configs,
                             asio::ssl::context* tls, std::string authorization, Hooks hooks)
    : executor_(executor),
      configs_(configs),
      tls_(tls),
      authorization_(std::move(authorization)),
      hooks_(std::move(hooks)),
      timer_(executor) {}

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
  probed_[id].replica = std::move(replica);
  const auto now = Clock::now();
  schedule_.set(id, now);
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
  // a second call finds nothing. A probe in flight finds the entry gone and reports nothing.
  schedule_.remove(id);
  probed_.erase(id);
}

void HealthChecker::wake_if_before(Clock::time_point due) {
  if (due < sleeping_until_) {
    sleeping_until_ = Clock::time_point::min();  // one cancel is enough until it sleeps again
    timer_.cancel();
  }
}

void HealthChecker::schedule_next(Probed& probed, Clock::time_point last) {
  const auto due = hooks_.next_probe_at(*probed.replica, last);
  schedule_.set(probed.replica->id, due, health::ProbeSchedule::allowed_early(due - last));
  wake_if_before(due);
}

void HealthChecker::start_due(Clock::time_point now) {
  for (ReplicaId id : schedule_.take_due(now)) {
    auto it = probed_.find(id);
    if (it == probed_.end()) {
      continue;
    }
    Probed& probed = it->second;
    if (probed.replica->removed) {
      probed_.erase(it);
      continue;
    }
    if (hooks_.paused(*probed.replica)) {
      schedule_next(probed, now);
      continue;
    }
    net::spawn_logged(executor_, probe(this, id), "probe");
  }
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
    self->start_due(Clock::now());
  }
}

asio::awaitable<void> HealthChecker::probe(HealthChecker* self, ReplicaId id) {
  auto it = self->probed_.find(id);
  if (it == self->probed_.end()) {
    co_return;
  }
  // Held here while the probe runs: forget() may drop the entry meanwhile.
  std::shared_ptr<Replica> replica = it->second.replica;
  std::unique_ptr<net::Conn> conn = std::move(it->second.conn);
  // Read for each probe: a reload may have replaced the settings meanwhile.
  const auto config = self->configs_->snapshot();
  const auto* model = config->find_model(replica->model);
  const auto& h = model ? model->health : config->health;
  auto outcome = co_await health::probe_once(replica->url, h.path, replica->model, self->tls_,
                                             h.timeout, self->authorization_, &conn);
  if (self->stopped_ || replica->removed || !self->probed_.contains(id)) {
    co_return;
  }
  const auto last = Clock::now();
  self->probed_[id].conn = std::move(conn);
  self->hooks_.on_outcome(*replica, outcome);
  // The outcome may have removed the replica (and so forgotten it).
  if (auto again = self->probed_.find(id); again != self->probed_.end() && !self->stopped_) {
    self->schedule_next(again->second, last);
  }
}

}  // namespace fg::fleet
