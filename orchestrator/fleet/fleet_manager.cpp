#include "orchestrator/fleet/fleet_manager.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <set>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/log/log.hpp"
#include "common/net/server.hpp"
#include "common/openai/errors.hpp"
#include "orchestrator/health/probe.hpp"
#include "orchestrator/metrics/metrics.hpp"

namespace fg::fleet {

namespace asio = boost::asio;
using health::State;

namespace {

constexpr auto kMissedHeartbeats = 3;
constexpr auto kJoiningProbeInterval = std::chrono::seconds(1);

FleetManager::Answer error_answer(unsigned status, std::string message, std::string code) {
  auto type = std::string(openai::error_type_for_status(status));
  return {status, nlohmann::json::parse(openai::error_body(message, type, code))};
}

std::string iso_time(std::chrono::system_clock::time_point t) {
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char out[32];
  std::strftime(out, sizeof out, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return out;
}

}  // namespace

FleetManager::FleetManager(asio::any_io_executor executor, const config::ConfigSource* configs,
                           Registry& registry, scheduling::Scheduler& scheduler,
                           metrics::Metrics& metrics, asio::ssl::context* tls,
                           std::string upstream_authorization, Deliver deliver, Abandon abandon)
    : executor_(executor),
      configs_(configs),
      registry_(registry),
      scheduler_(scheduler),
      metrics_(metrics),
      tls_(tls),
      upstream_authorization_(std::move(upstream_authorization)),
      deliver_(std::move(deliver)),
      abandon_(std::move(abandon)),
      sweep_timer_(executor) {}

health::Thresholds FleetManager::thresholds_for(const std::string& model) const {
  health::Thresholds t;
  const auto* m = config().find_model(model);
  const auto& h = m ? m->health : config().health;
  t.interval = h.interval;
  t.timeout = h.timeout;
  t.unhealthy_after = h.unhealthy_after;
  t.healthy_after = h.healthy_after;
  t.eject_after = h.eject_after;
  return t;
}

void FleetManager::start() {
  for (const auto& model : config().models) {
    scheduler_.add_model(model.name);
    metrics_.declare_model(model.name);
    models_.insert(model.name);
    for (const auto& endpoint : model.endpoints) {
      // The operator vouched for static endpoints: they serve at once, probes keep watching.
      add_replica(model.name, endpoint.url, endpoint.slots, Source::config, State::healthy);
    }
  }
  net::spawn_logged(executor_, sweep_loop(this), "fleet sweep");
}

void FleetManager::stop() {
  stopped_ = true;
  sweep_timer_.cancel();
  for (const auto& replica : registry_.all()) {
    if (replica->stop_probe) {
      replica->stop_probe();
    }
  }
}

std::shared_ptr<Replica> FleetManager::add_replica(const std::string& model, const net::Url& url,
                                                   std::uint32_t slots, Source source,
                                                   State initial) {
  auto replica = registry_.add(model, url, slots);
  replica->registered = source == Source::registration;
  replica->local = source == Source::local;
  tracker_.add(replica->id, model, thresholds_for(model), Clock::now(), initial);
  if (initial == State::healthy) {
    deliver_(scheduler_.add_replica(replica->id, model, slots));
  } else {
    // Not routable before it is proven: enter with no slots so nothing is granted meanwhile.
    deliver_(scheduler_.add_replica(replica->id, model, 0));
    deliver_(scheduler_.set_routable(replica->id, false));
    deliver_(scheduler_.set_slots(replica->id, slots));
  }
  log::info("replica added", {{"replica", replica->name},
                              {"model", model},
                              {"url", url.to_string()},
                              {"slots", slots},
                              {"source", source == Source::registration ? "registration"
                                         : source == Source::local      ? "local"
                                                                        : "config"},
                              {"state", health::to_string(initial)}});
  net::spawn_logged(executor_, probe_loop(this, replica), "probe");
  if (source != Source::config) {
    write_sd_file();
  }
  return replica;
}

void FleetManager::add_local_replica(const std::string& model, const net::Url& url,
                                     std::uint32_t slots) {
  add_replica(model, url, slots, Source::local, State::joining);
}

void FleetManager::apply(const std::optional<health::Transition>& transition) {
  if (!transition) {
    return;
  }
  auto replica = registry_.find(transition->id);
  if (!replica) {
    return;  // already forgotten: nothing routes to it and nothing to show
  }
  const std::string& name = replica->name;
  const std::string& model = replica->model;
  log::info("replica state changed", {{"replica", name},
                                      {"model", model},
                                      {"from", health::to_string(transition->from)},
                                      {"to", health::to_string(transition->to)},
                                      {"reason", transition->reason}});
  metrics_.replica_state_change(model, std::string(health::to_string(transition->to)));
  if (scheduler_.has_replica(transition->id)) {
    deliver_(scheduler_.set_routable(transition->id, transition->to == State::healthy));
  }
}

void FleetManager::set_slots(Replica& replica, std::uint32_t slots) {
  if (slots == replica.slots || slots == 0) {
    return;
  }
  log::info("replica slots changed",
            {{"replica", replica.name}, {"from", replica.slots}, {"to", slots}});
  replica.slots = slots;
  deliver_(scheduler_.set_slots(replica.id, slots));
}

void FleetManager::traffic_failure(ReplicaId id) {
  apply(tracker_.on_traffic_failure(id, Clock::now()));
}

void FleetManager::traffic_success(ReplicaId id) {
  tracker_.on_traffic_success(id);
}

asio::awaitable<void> FleetManager::probe_loop(FleetManager* self,
                                               std::shared_ptr<Replica> replica) {
  asio::steady_timer timer(self->executor_);
  replica->stop_probe = [&timer] { timer.cancel(); };
  struct Forget {
    Replica* replica;
    ~Forget() { replica->stop_probe = nullptr; }
  } forget{replica.get()};
  std::unique_ptr<net::Conn> conn;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto last = Clock::now();
  bool first = true;
  while (!self->stopped_ && !replica->removed) {
    if (!first) {
      auto due = self->tracker_.next_probe_at(replica->id, last, unit(self->rng_));
      if (self->tracker_.state(replica->id) == State::joining) {
        // A new phone is worth proving quickly: joining replicas are probed at least every
        // second, so a registered phone takes traffic about a second after it answers.
        due = std::min(due, last + kJoiningProbeInterval);
      }
      timer.expires_at(due);
      co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
      if (self->stopped_ || replica->removed) {
        break;
      }
    }
    first = false;
    auto state = self->tracker_.state(replica->id);
    if (state == State::draining || state == State::gone) {
      last = Clock::now();
      continue;
    }
    const auto* model = self->config().find_model(replica->model);
    const auto& h = model ? model->health : self->config().health;
    auto outcome = co_await health::probe_once(replica->url, h.path, self->tls_, h.timeout,
                                               self->upstream_authorization_, &conn);
    if (self->stopped_ || replica->removed) {
      break;
    }
    last = Clock::now();
    replica->last_probe = std::chrono::system_clock::now();
    replica->last_probe_seconds = outcome.seconds;
    if (self->config().metrics.per_replica) {
      self->metrics_.health_check(replica->name, outcome.seconds);
    }
    replica->reported_slots_idle = outcome.slots_idle;
    if (outcome.slots_total) {
      self->set_slots(*replica, *outcome.slots_total);
    }
    if (outcome.result == health::ProbeResult::fail) {
      log::debug("probe failed", {{"replica", replica->name}, {"error", outcome.error}});
    }
    if (outcome.result != health::ProbeResult::fail && self->heartbeat_stale(*replica, last)) {
      // An agent that stopped heartbeating is not trusted again on probes alone.
      continue;
    }
    self->apply(self->tracker_.on_probe(replica->id, outcome.result, last));
  }
}

asio::awaitable<void> FleetManager::sweep_loop(FleetManager* self) {
  while (!self->stopped_) {
    auto period = std::min<Clock::duration>(std::chrono::seconds(1),
                                            self->config().registration.heartbeat_interval / 2);
    self->sweep_timer_.expires_after(period);
    co_await self->sweep_timer_.async_wait(asio::as_tuple(asio::use_awaitable));
    if (self->stopped_) {
      break;
    }
    // Read after the wait: a reload may have replaced the configuration meanwhile.
    const auto& reg = self->config().registration;
    const auto now = Clock::now();
    for (const auto& replica : self->registry_.all()) {
      if (!replica->registered || !replica->last_heartbeat) {
        continue;
      }
      auto silent = now - *replica->last_heartbeat;
      if (silent > reg.expire_after) {
        log::info("registration expired", {{"replica", replica->name}});
        self->apply(self->tracker_.mark_gone(replica->id));
        self->finish_removal(replica->id);
      } else if (silent > kMissedHeartbeats * reg.heartbeat_interval) {
        self->apply(self->tracker_.mark_unhealthy(
            replica->id, "missed " + std::to_string(kMissedHeartbeats) + " heartbeats"));
      }
    }
    std::vector<ReplicaId> still;
    for (auto id : self->removing_) {
      if (self->scheduler_.in_flight(id) == 0) {
        self->apply(self->tracker_.mark_gone(id));
        self->finish_removal(id);
      } else {
        still.push_back(id);
      }
    }
    self->removing_ = std::move(still);
  }
}

void FleetManager::finish_removal(ReplicaId id) {
  auto replica = registry_.find(id);
  if (!replica) {
    return;
  }
  log::info("replica removed", {{"replica", replica->name}, {"model", replica->model}});
  metrics_.forget_replica(replica->model, replica->name);
  registry_.remove(id);
  write_sd_file();
  scheduler_.remove_replica(id);
  tracker_.remove(id);
  removing_.erase(std::remove(removing_.begin(), removing_.end(), id), removing_.end());
}

bool FleetManager::pending_removal(ReplicaId id) const {
  return std::find(removing_.begin(), removing_.end(), id) != removing_.end();
}

// The entry that serves this URL now: one being removed does not count (it only finishes work).
std::shared_ptr<Replica> FleetManager::live_by_url(const std::string& normalised_url) const {
  for (const auto& replica : registry_.all()) {
    if (replica->url.to_string() == normalised_url && !pending_removal(replica->id)) {
      return replica;
    }
  }
  return nullptr;
}

bool FleetManager::heartbeat_stale(const Replica& replica, Clock::time_point now) const {
  return replica.registered && replica.last_heartbeat &&
         now - *replica.last_heartbeat >
             kMissedHeartbeats * config().registration.heartbeat_interval;
}

std::shared_ptr<Replica> FleetManager::by_name(const std::string& name) const {
  for (const auto& replica : registry_.all()) {
    if (replica->name == name) {
      return replica;
    }
  }
  return nullptr;
}

FleetManager::Answer FleetManager::register_replica(const nlohmann::json& request) {
  if (!request.is_object()) {
    return error_answer(400, "the body must be a JSON object", "invalid_request");
  }
  auto url_it = request.find("url");
  auto model_it = request.find("model");
  if (url_it == request.end() || !url_it->is_string()) {
    return error_answer(400, "\"url\" (string) is required", "invalid_request");
  }
  if (model_it == request.end() || !model_it->is_string()) {
    return error_answer(400, "\"model\" (string) is required", "invalid_request");
  }
  std::string why;
  auto url = net::parse_url(url_it->get<std::string>(), &why);
  if (!url) {
    return error_answer(400, "\"url\" is not a valid URL: " + why, "invalid_request");
  }
  const std::string model = model_it->get<std::string>();
  const auto* model_config = config().find_model(model);
  if (!model_config) {
    log::warn("registration refused: unknown model", {{"url", url->to_string()}});
    return error_answer(404, "the model '" + model + "' is not configured", "model_not_found");
  }
  const std::string normalised = url->to_string();
  bool allowed = false;
  for (const auto& pattern : config().registration.allowed_urls) {
    allowed = allowed || config::glob_match(pattern, normalised);
  }
  if (!allowed) {
    log::warn("registration refused: URL not allowed", {{"url", normalised}, {"model", model}});
    return error_answer(403, "the URL " + normalised + " is not in registration.allowed_urls",
                        "url_not_allowed");
  }
  std::uint32_t slots = model_config->slots;
  if (auto s = request.find("slots"); s != request.end() && !s->is_null()) {
    if (!s->is_number_unsigned() || s->get<std::uint64_t>() < 1 ||
        s->get<std::uint64_t>() > config::kMaxSlots) {
      return error_answer(400, "\"slots\" must be an integer from 1 to 1024", "invalid_request");
    }
    slots = static_cast<std::uint32_t>(s->get<std::uint64_t>());
  }
  std::string agent_version;
  if (auto v = request.find("agent_version"); v != request.end() && v->is_string()) {
    agent_version = v->get<std::string>().substr(0, 64);
  }
  nlohmann::json device = nlohmann::json::object();
  if (auto d = request.find("device");
      d != request.end() && d->is_object() && d->dump().size() <= 4096) {
    device = *d;
  }

  auto replica = live_by_url(normalised);
  if (replica && !replica->registered && !replica->local) {
    if (replica->model != model) {
      // A static endpoint belongs to the YAML: a registration must not move it elsewhere.
      log::warn("registration refused: URL is a configured endpoint of another model",
                {{"url", normalised}, {"model", model}});
      return error_answer(
          409, "the URL " + normalised + " is configured for model '" + replica->model + "'",
          "url_in_use");
    }
  } else if (replica && replica->model != model) {
    // Same phone, other model: the old entry goes (drained first), a new one is made.
    remove(replica->name);
    replica.reset();
  }
  if (!replica) {
    replica = add_replica(model, *url, slots, Source::registration, State::joining);
  } else {
    set_slots(*replica, slots);
    if (tracker_.state(replica->id) == State::gone) {
      replica = add_replica(model, *url, slots, Source::registration, State::joining);
    }
  }
  replica->agent_version = agent_version;
  replica->device = device;
  replica->last_heartbeat = Clock::now();
  log::info("replica registered",
            {{"replica", replica->name}, {"model", model}, {"url", normalised}, {"slots", slots}});
  const double interval_s =
      std::chrono::duration<double>(config().registration.heartbeat_interval).count();
  return {200, {{"id", replica->name}, {"heartbeat_interval_s", interval_s}}};
}

FleetManager::Answer FleetManager::heartbeat(const std::string& name) {
  auto replica = by_name(name);
  // A static endpoint takes heartbeats only once an agent registered on its URL.
  if (!replica || pending_removal(replica->id) ||
      (!replica->registered && !replica->last_heartbeat)) {
    return error_answer(404, "no registered replica " + name + "; register again",
                        "replica_not_found");
  }
  replica->last_heartbeat = Clock::now();
  return {200, {{"id", replica->name}, {"state", health::to_string(tracker_.state(replica->id))}}};
}

FleetManager::Answer FleetManager::deregister(const std::string& name) {
  auto replica = by_name(name);
  if (!replica || !replica->registered || pending_removal(replica->id)) {
    return error_answer(404, "no registered replica " + name, "replica_not_found");
  }
  log::info("replica deregistered", {{"replica", replica->name}, {"model", replica->model}});
  return remove(name);
}

FleetManager::Answer FleetManager::drain(const std::string& name) {
  auto replica = by_name(name);
  if (!replica) {
    return error_answer(404, "no replica " + name, "replica_not_found");
  }
  apply(tracker_.drain(replica->id));
  return {200, replica_json(*replica)};
}

FleetManager::Answer FleetManager::undrain(const std::string& name) {
  auto replica = by_name(name);
  if (!replica) {
    return error_answer(404, "no replica " + name, "replica_not_found");
  }
  if (std::find(removing_.begin(), removing_.end(), replica->id) != removing_.end()) {
    return error_answer(409, "replica " + name + " is being removed", "replica_removing");
  }
  apply(tracker_.undrain(replica->id));
  return {200, replica_json(*replica)};
}

FleetManager::Answer FleetManager::remove(const std::string& name) {
  auto replica = by_name(name);
  if (!replica) {
    return error_answer(404, "no replica " + name, "replica_not_found");
  }
  apply(tracker_.drain(replica->id));
  if (std::find(removing_.begin(), removing_.end(), replica->id) == removing_.end()) {
    removing_.push_back(replica->id);
  }
  auto body = replica_json(*replica);
  body["removing"] = true;
  return {202, body};
}

nlohmann::json FleetManager::replica_json(const Replica& replica) const {
  nlohmann::json j{{"id", replica.name},
                   {"model", replica.model},
                   {"url", replica.url.to_string()},
                   {"state", health::to_string(tracker_.state(replica.id))},
                   {"source", replica.registered ? "registration"
                              : replica.local    ? "local"
                                                 : "config"},
                   {"slots", replica.slots},
                   {"in_flight", scheduler_.in_flight(replica.id)},
                   {"consecutive_failures", tracker_.consecutive_failures(replica.id)},
                   {"requests", replica.requests},
                   {"failures", replica.failures},
                   {"tokens_per_second", replica.tokens_per_second}};
  j["last_probe"] = replica.last_probe ? nlohmann::json(iso_time(*replica.last_probe)) : nullptr;
  j["last_probe_seconds"] =
      replica.last_probe ? nlohmann::json(replica.last_probe_seconds) : nlohmann::json(nullptr);
  j["reported_slots_idle"] = replica.reported_slots_idle
                                 ? nlohmann::json(*replica.reported_slots_idle)
                                 : nlohmann::json(nullptr);
  if (replica.registered) {
    j["agent_version"] = replica.agent_version;
    j["device"] = replica.device;
  }
  return j;
}

nlohmann::json FleetManager::replicas_json() const {
  auto out = nlohmann::json::array();
  for (const auto& replica : registry_.all()) {
    out.push_back(replica_json(*replica));
  }
  return out;
}

nlohmann::json FleetManager::fleet_json() const {
  auto models = nlohmann::json::array();
  const auto now = std::chrono::steady_clock::now();
  for (const auto& model : config().models) {
    std::size_t known = 0;
    for (const auto& replica : registry_.all()) {
      known += replica->model == model.name ? 1 : 0;
    }
    const auto healthy = tracker_.healthy_count(model.name);
    const auto desired = model.desired_replicas();
    double oldest = 0;
    if (auto since = scheduler_.oldest_waiter_since(model.name)) {
      oldest = std::chrono::duration<double>(now - *since).count();
    }
    models.push_back({{"model", model.name},
                      {"desired", desired},
                      {"registered", known},
                      {"healthy", healthy},
                      {"busy_slots", scheduler_.busy_slots(model.name)},
                      {"free_slots", scheduler_.free_slots(model.name)},
                      {"queue_depth", scheduler_.queue_depth(model.name)},
                      {"oldest_queued_seconds", oldest},
                      {"degraded", healthy < desired}});
  }
  return {{"models", models}};
}

void FleetManager::reload() {
  scheduler_.set_queue_max(config().routing.queue_max);
  std::set<std::string> models;
  std::map<std::string, std::pair<std::string, std::uint32_t>> wanted;  // url -> model, slots
  for (const auto& model : config().models) {
    models.insert(model.name);
    scheduler_.add_model(model.name);
    metrics_.declare_model(model.name);
    for (const auto& endpoint : model.endpoints) {
      wanted[endpoint.url.to_string()] = {model.name, endpoint.slots};
    }
  }
  for (const auto& replica : registry_.all()) {
    tracker_.set_thresholds(replica->id, thresholds_for(replica->model));
    if (!models.count(replica->model)) {
      continue;  // handled with its model below
    }
    if (replica->registered || replica->local) {
      continue;
    }
    auto it = wanted.find(replica->url.to_string());
    if (it == wanted.end() || it->second.first != replica->model) {
      if (!pending_removal(replica->id)) {
        remove(replica->name);
      }
    } else {
      if (pending_removal(replica->id)) {
        // Listed again before its removal finished: it stays, and probes prove it again.
        removing_.erase(std::remove(removing_.begin(), removing_.end(), replica->id),
                        removing_.end());
        apply(tracker_.undrain(replica->id));
      }
      set_slots(*replica, it->second.second);
      wanted.erase(it);
    }
  }
  for (const auto& [url, target] : wanted) {
    if (live_by_url(url)) {
      continue;  // the same URL registered by an agent
    }
    add_replica(target.first, *net::parse_url(url), target.second, Source::config, State::healthy);
  }
  // Models no longer configured: their replicas go, their queued requests are answered now.
  for (const auto& replica : registry_.all()) {
    if (!models.count(replica->model)) {
      finish_removal(replica->id);
    }
  }
  std::vector<std::string> gone_models;
  for (const auto& model : models_) {
    if (!models.count(model)) {
      gone_models.push_back(model);
    }
  }
  models_ = models;
  for (const auto& model : gone_models) {
    metrics_.forget_model(model);
    abandon_(scheduler_.remove_model(model));
    log::info("model removed", {{"model", model}});
  }
}

void FleetManager::write_sd_file() const {
  const auto& path = config().admin.prometheus_sd_file;
  if (path.empty()) {
    return;
  }
  // Agents (registered or local) serve their own /metrics on their public address.
  auto groups = nlohmann::json::array();
  for (const auto& replica : registry_.all()) {
    if (!replica->registered && !replica->local) {
      continue;
    }
    groups.push_back({{"targets", {replica->url.host_header()}},
                      {"labels",
                       {{"model", replica->model},
                        {"replica", replica->name},
                        {"__scheme__", replica->url.scheme},
                        {"__metrics_path__", replica->url.path_prefix + "/metrics"}}}});
  }
  // Written whole and renamed into place: Prometheus never reads half a file.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << groups.dump(2) << "\n";
    if (!out) {
      log::warn("cannot write admin.prometheus_sd_file", {{"file", path}});
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    log::warn("cannot write admin.prometheus_sd_file", {{"file", path}});
  }
}

void FleetManager::update_metrics() {
  for (const auto& model : config().models) {
    std::map<State, double> counts{
        {State::joining, 0}, {State::healthy, 0}, {State::unhealthy, 0}, {State::draining, 0}};
    for (const auto& replica : registry_.all()) {
      if (replica->model == model.name) {
        counts[tracker_.state(replica->id)] += 1;
      }
    }
    for (const auto& [state, n] : counts) {
      metrics_.set_replicas(model.name, std::string(health::to_string(state)), n);
    }
    const auto desired = model.desired_replicas();
    metrics_.set_replicas_desired(model.name, desired);
    metrics_.set_degraded(model.name, counts[State::healthy] < desired);
  }
  if (config().metrics.per_replica) {
    for (const auto& replica : registry_.all()) {
      metrics_.set_replica(replica->model, replica->name, scheduler_.in_flight(replica->id),
                           replica->tokens_per_second);
    }
  }
}

}  // namespace fg::fleet
