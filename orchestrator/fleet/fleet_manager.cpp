#include "orchestrator/fleet/fleet_manager.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/log/log.hpp"
#include "common/net/resolver.hpp"
#include "common/net/server.hpp"
#include "common/net/tls_sessions.hpp"
#include "orchestrator/fleet/local_fleet.hpp"
#include "orchestrator/fleet/url_challenge.hpp"
#include "orchestrator/fleet/url_challenge_fetch.hpp"
#include "orchestrator/metrics/metrics.hpp"

namespace fg::fleet {

namespace asio = boost::asio;
using health::State;

namespace {

constexpr auto kJoiningProbeInterval = std::chrono::seconds(1);

std::string_view refusal_reason(Refusal refusal) {
  switch (refusal) {
    case Refusal::unknown_model:
      return "registration refused: unknown model";
    case Refusal::url_not_allowed:
      return "registration refused: URL not allowed";
    case Refusal::static_endpoint:
      return "registration refused: URL is a configured endpoint of another model";
    case Refusal::url_in_use:
      return "registration refused: URL is a local agent";
    case Refusal::url_registered:
      return "registration refused: URL registered by another agent";
    case Refusal::none:
      break;
  }
  return "registration refused";
}

}  // namespace

FleetManager::FleetManager(asio::any_io_executor executor, const config::ConfigSource* configs,
                           Registry& registry, scheduling::Scheduler& scheduler,
                           metrics::Metrics& metrics, asio::ssl::context* tls,
                           std::string upstream_authorization, Deliver deliver, Abandon abandon)
    : executor_(executor),
      configs_(configs),
      tls_(tls),
      upstream_authorization_(upstream_authorization),
      registry_(registry),
      scheduler_(scheduler),
      metrics_(metrics),
      deliver_(std::move(deliver)),
      abandon_(std::move(abandon)),
      checker_(
          executor, configs, tls, std::move(upstream_authorization),
          HealthChecker::Hooks{
              [this](const Replica& r, Clock::time_point last) { return next_probe_at(r, last); },
              [this](const Replica& r) { return probe_paused(r); },
              [this](Replica& r, const health::ProbeOutcome& o) { on_probe(r, o); },
          }),
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
  net::resolver_for(executor_).set_cache_ttl(config().upstream.dns_cache_ttl);
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
  checker_.stop();
  sweep_timer_.cancel();
  for (const auto& replica : registry_.all()) {
    if (replica->stop_probe) {
      replica->stop_probe();
    }
    if (replica->stop_challenge) {
      replica->stop_challenge();
    }
  }
}

std::shared_ptr<Replica> FleetManager::add_replica(const std::string& model, const net::Url& url,
                                                   std::uint32_t slots, Source source,
                                                   State initial) {
  auto replica = registry_.add(model, url, slots);
  replica->source = source;
  replica->configured_slots = source == Source::config ? slots : 0;
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
                              {"source", to_string(source)},
                              {"state", health::to_string(initial)}});
  checker_.watch(replica);
  if (source != Source::config) {
    write_sd_file();
  }
  return replica;
}

ReplicaId FleetManager::add_local_replica(const std::string& model, const net::Url& url,
                                          std::uint32_t slots) {
  return add_replica(model, url, slots, Source::local, State::joining)->id;
}

void FleetManager::remove_local_replica(ReplicaId id) {
  if (auto replica = registry_.find(id); replica && !pending_removal(id)) {
    begin_removal(*replica);
  }
}

void FleetManager::apply(const std::optional<health::Transition>& transition) {
  if (!transition) {
    return;
  }
  auto replica = registry_.find(transition->id);
  if (!replica) {
    return;  // already forgotten: nothing routes to it and nothing to show
  }
  log::info("replica state changed", {{"replica", replica->name},
                                      {"model", replica->model},
                                      {"from", health::to_string(transition->from)},
                                      {"to", health::to_string(transition->to)},
                                      {"reason", transition->reason}});
  metrics_.replica_state_change(replica->model, std::string(health::to_string(transition->to)));
  replica->state_reason = transition->reason;
  replica->state_since = Clock::now();
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

Clock::time_point FleetManager::next_probe_at(const Replica& replica, Clock::time_point last) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto due = tracker_.next_probe_at(replica.id, last, unit(rng_));
  if (tracker_.state(replica.id) == State::joining) {
    // A new phone is worth proving quickly: joining replicas are probed at least every
    // second, so a registered phone takes traffic about a second after it answers.
    due = std::min(due, last + kJoiningProbeInterval);
  }
  return due;
}

// What the agent's /health says that routing learns from (docs/routing.md, "Integration").
void FleetManager::pass_on_routing_facts(Replica& replica, const health::ProbeOutcome& outcome) {
  // Most probes (every plain server's) carry none of these facts: no scheduler lookup then.
  if (!outcome.prefill_tps && !outcome.decode_tps && !outcome.host_prompt_cache_tokens &&
      !outcome.engine_starts) {
    return;
  }
  if (!scheduler_.has_replica(replica.id)) {
    return;
  }
  if (outcome.prefill_tps || outcome.decode_tps) {
    // A missing one stays as it is (seed ignores a non-positive speed).
    scheduler_.set_measured_speeds(replica.id, outcome.prefill_tps.value_or(0),
                                   outcome.decode_tps.value_or(0));
  }
  if (outcome.host_prompt_cache_tokens) {
    scheduler_.set_host_prompt_cache(replica.id, *outcome.host_prompt_cache_tokens);
  }
  if (outcome.engine_starts) {
    if (replica.engine_starts && *outcome.engine_starts > *replica.engine_starts) {
      log::info("replica engine restarted: its prompt cache is forgotten",
                {{"replica", replica.name}});
      scheduler_.forget_prompt_cache(replica.id);
    }
    replica.engine_starts = outcome.engine_starts;
  }
}

bool FleetManager::probe_paused(const Replica& replica) const {
  const auto state = tracker_.state(replica.id);
  return state == State::draining || state == State::gone;
}

void FleetManager::on_probe(Replica& replica, const health::ProbeOutcome& outcome) {
  const auto now = Clock::now();
  replica.last_probe = std::chrono::system_clock::now();
  replica.last_probe_seconds = outcome.seconds;
  if (config().metrics.per_replica) {
    if (replica.health_check_series == nullptr) {
      replica.health_check_series = &metrics_.health_check_series(replica.name);
    }
    replica.health_check_series->Observe(outcome.seconds);
  }
  const bool wrong_model = outcome.model == health::ModelCheck::mismatch;
  if (wrong_model && replica.last_probe_error != outcome.error) {
    log::warn("replica serves another model",
              {{"replica", replica.name}, {"model", replica.model}, {"reason", outcome.error}});
  }
  replica.last_probe_error = outcome.error;
  if (outcome.result != health::ProbeResult::fail || wrong_model) {
    replica.model_check = outcome.model;
  }
  replica.reported_slots_idle = outcome.slots_idle;
  if (outcome.slots_total) {
    set_slots(replica, *outcome.slots_total);
  }
  pass_on_routing_facts(replica, outcome);
  if (outcome.result == health::ProbeResult::fail) {
    log::debug("probe failed", {{"replica", replica.name}, {"error", outcome.error}});
  }
  if (replica.challenge_pending) {
    // Whatever the URL answers, it is not this agent's until it passed the challenge: it stays
    // joining, with the challenge's reason. The tracker holds it and counts the probes, so the
    // pass applies them at once.
    tracker_.on_probe(replica.id, outcome.result, now);
    return;
  }
  if (wrong_model) {
    // A definite answer, not a flaky one: out of rotation at once, with the reason.
    apply(tracker_.mark_unhealthy(replica.id, outcome.error));
  }
  // A pass changes no state of a healthy replica (the sweep takes one that stopped heartbeating
  // out of rotation), so the heartbeat check, a walk of the registration map (~7% of the
  // gateway's CPU probing 5,000 registered replicas, perf), is made only where it matters.
  const bool changes_nothing =
      outcome.result == health::ProbeResult::pass && tracker_.state(replica.id) == State::healthy;
  if (outcome.result != health::ProbeResult::fail && replica.source == Source::registration &&
      !changes_nothing &&
      book_.missed_heartbeats(replica.id, config().registration.heartbeat_interval, now)) {
    // An agent that stopped heartbeating is not trusted again on probes alone.
    return;
  }
  apply(tracker_.on_probe(replica.id, outcome.result, now));
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
    self->sweep();
  }
}

void FleetManager::sweep() {
  // Read now: a reload may have replaced the configuration since the last sweep.
  const auto& reg = config().registration;
  const auto now = Clock::now();
  const Clock::duration missed = kMissedHeartbeats * reg.heartbeat_interval;
  const Clock::duration expire_after = reg.expire_after;
  // One walk of the registrations for both checks: at 5,000 registered replicas each walk was ~4%
  // of the gateway's CPU (perf), and it ran twice a second.
  for (ReplicaId id : book_.silent_for(std::min(expire_after, missed), now)) {
    const Registration* registration = book_.find(id);
    if (registration == nullptr) {
      continue;
    }
    auto replica = registry_.find(id);
    if (now - registration->last_heartbeat > expire_after) {
      if (!replica || replica->source != Source::registration) {
        // A static endpoint only loses its registration: the YAML keeps the endpoint.
        if (replica) {
          log::info("registration expired; the static endpoint stays",
                    {{"replica", replica->name}});
        }
        book_.forget(id);
        continue;
      }
      log::info("registration expired", {{"replica", replica->name}});
      apply(tracker_.mark_gone(id));
      finish_removal(id);
      continue;
    }
    if (replica && replica->source == Source::registration) {
      apply(tracker_.mark_unhealthy(id,
                                    "missed " + std::to_string(kMissedHeartbeats) + " heartbeats"));
    }
  }
  // A copy: finish_removal takes entries out of removing_.
  const std::vector<ReplicaId> pending = removing_;
  for (auto id : pending) {
    if (scheduler_.in_flight(id) == 0) {
      apply(tracker_.mark_gone(id));
      finish_removal(id);
    }
  }
}

void FleetManager::start_challenge(const std::shared_ptr<Replica>& replica) {
  replica->challenge_pending = true;
  replica->challenge_failures = 0;
  replica->state_reason = "url_challenge_pending";
  tracker_.hold(replica->id);
  net::spawn_logged(executor_, challenge_loop(this, replica), "url challenge");
}

asio::awaitable<void> FleetManager::challenge_loop(FleetManager* self,
                                                   std::shared_ptr<Replica> replica) {
  asio::steady_timer timer(self->executor_);
  replica->stop_challenge = [&timer] { timer.cancel(); };
  struct Forget {
    Replica* replica;
    ~Forget() { replica->stop_challenge = nullptr; }
  } forget{replica.get()};
  const auto ended = [self, &replica] {
    return self->stopped_ || replica->removed || self->book_.find(replica->id) == nullptr;
  };
  std::string last_why;
  while (!ended()) {
    // Read for each attempt: the secret is the one issued now, the timeout the one in force.
    const std::string secret = self->book_.find(replica->id)->secret;
    const auto config = self->configs_->snapshot();
    const auto* model = config->find_model(replica->model);
    const auto timeout = model ? model->health.timeout : config->health.timeout;
    const std::string nonce = make_challenge_nonce();
    const ChallengeFetch fetch = co_await fetch_challenge(replica->url, nonce, self->tls_, timeout,
                                                          self->upstream_authorization_);
    if (ended()) {
      break;
    }
    const ChallengeVerdict verdict = judge_challenge(fetch, secret, nonce);
    if (verdict.passed) {
      replica->challenge_pending = false;
      replica->state_reason = "url challenge passed";
      self->apply(self->tracker_.release(replica->id));
      log::info("url challenge passed", {{"replica", replica->name},
                                         {"url", replica->url.to_string()},
                                         {"attempts", replica->challenge_failures + 1}});
      break;
    }
    ++replica->challenge_failures;
    replica->state_reason = std::string(kChallengeFailedPrefix) + verdict.why;
    if (verdict.why != last_why) {
      // Once per distinct reason: an agent still starting answers 503 once or twice.
      log::warn("url challenge failed; the replica stays joining",
                {{"replica", replica->name},
                 {"url", replica->url.to_string()},
                 {"reason", verdict.why},
                 {"attempts", replica->challenge_failures}});
      last_why = verdict.why;
    }
    timer.expires_after(challenge_retry_delay(replica->challenge_failures));
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  }
}

void FleetManager::begin_removal(Replica& replica) {
  apply(tracker_.drain(replica.id));
  if (!pending_removal(replica.id)) {
    removing_.push_back(replica.id);
  }
  // Its identity ends now: heartbeats get 404 and the URL is free to register again.
  book_.forget(replica.id);
}

net::TlsSessions* FleetManager::tls_sessions() const {
  return tls_ != nullptr ? net::TlsSessions::of(tls_->native_handle()) : nullptr;
}

void FleetManager::finish_removal(ReplicaId id) {
  removing_.erase(std::remove(removing_.begin(), removing_.end(), id), removing_.end());
  book_.forget(id);
  auto replica = registry_.find(id);
  if (!replica) {
    return;
  }
  log::info("replica removed", {{"replica", replica->name}, {"model", replica->model}});
  metrics_.forget_replica(replica->model, replica->name);
  replica->health_check_series = nullptr;
  registry_.remove(id);
  // Its TLS sessions go with it, unless another entry serves the URL already (a replica that
  // registered again).
  if (net::TlsSessions* sessions = tls_sessions()) {
    const std::string url = replica->url.to_string();
    if (live_by_url(url) == nullptr) {
      sessions->forget_server(url);
    }
  }
  write_sd_file();
  scheduler_.remove_replica(id);
  tracker_.remove(id);
  if (replica->source == Source::local && local_ != nullptr) {
    local_->replica_removed(id);
  }
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

std::shared_ptr<Replica> FleetManager::by_name(std::string_view name) const {
  for (const auto& replica : registry_.all()) {
    if (replica->name == name) {
      return replica;
    }
  }
  return nullptr;
}

RegisterResult FleetManager::register_replica(const RegistrationRequest& request,
                                              std::string_view secret) {
  using Action = RegistrationPlan::Action;
  const auto now = Clock::now();
  const std::string url = request.url.to_string();
  auto holder = live_by_url(url);
  std::optional<UrlHolder> held;
  if (holder) {
    held = UrlHolder{holder->id, holder->model, holder->source};
  }
  const RegistrationPlan plan = book_.plan(request, secret, held, config(), now);
  RegisterResult result;
  if (plan.action == Action::refuse) {
    log::warn(refusal_reason(plan.refusal), {{"url", url}});
    result.refusal = plan.refusal;
    result.message = plan.message;
    return result;
  }
  std::optional<std::string> keep;
  std::shared_ptr<Replica> replica;
  switch (plan.action) {
    case Action::create:
      replica =
          add_replica(request.model, request.url, plan.slots, Source::registration, State::joining);
      break;
    case Action::update:
      replica = holder;
      keep = book_.find(holder->id)->secret;
      set_slots(*replica, plan.slots);
      break;
    case Action::attach:
      replica = holder;
      set_slots(*replica, plan.slots);
      break;
    case Action::replace:
      // Same phone, other model, or a registration that went silent: the old entry goes
      // (drained first), a new one is made.
      if (plan.keep_secret) {
        keep = book_.find(holder->id)->secret;
      }
      begin_removal(*holder);
      replica =
          add_replica(request.model, request.url, plan.slots, Source::registration, State::joining);
      break;
    case Action::refuse:
      break;
  }
  if (plan.took_over) {
    log::warn("registration taken over: the previous one missed its heartbeats",
              {{"replica", replica->name}, {"previous", holder->name}, {"url", url}});
  }
  if (plan.slots_capped) {
    log::warn("registration asked for more slots than its static endpoint has; capped",
              {{"replica", replica->name}, {"slots", plan.slots}});
  }
  result.secret = book_.record(replica->id, request, now, std::move(keep));
  if ((plan.action == Action::create || plan.action == Action::replace) &&
      config().registration.url_challenge) {
    start_challenge(replica);
  }
  result.id = replica->name;
  result.heartbeat_interval = config().registration.heartbeat_interval;
  result.slots = replica->slots;
  result.slots_capped = plan.slots_capped;
  log::info("replica registered",
            {{"replica", replica->name},
             {"model", request.model},
             {"url", url},
             {"slots", replica->slots},
             {"deployment_id", request.deployment_id},
             {"ends_at", request.ends_at ? format_rfc3339(*request.ends_at) : std::string()}});
  return result;
}

IdentityResult FleetManager::heartbeat(std::string_view name, std::string_view secret) {
  IdentityResult result;
  auto replica = by_name(name);
  if (!replica || pending_removal(replica->id)) {
    return result;
  }
  result.check = book_.check(replica->id, secret);
  if (result.check == SecretCheck::ok) {
    book_.heartbeat(replica->id, Clock::now());
  } else if (result.check == SecretCheck::wrong_secret) {
    log::warn("heartbeat refused: wrong or missing replica secret", {{"replica", replica->name}});
  }
  result.replica = view_of(*replica);
  return result;
}

IdentityResult FleetManager::deregister(std::string_view name, std::string_view secret) {
  IdentityResult result;
  auto replica = by_name(name);
  if (!replica || pending_removal(replica->id)) {
    return result;
  }
  result.check = book_.check(replica->id, secret);
  if (result.check != SecretCheck::ok) {
    if (result.check == SecretCheck::wrong_secret) {
      log::warn("deregistration refused: wrong or missing replica secret",
                {{"replica", replica->name}});
    }
    return result;
  }
  log::info("replica deregistered", {{"replica", replica->name}, {"model", replica->model}});
  if (replica->source == Source::registration) {
    begin_removal(*replica);
    result.removing = true;
  } else {
    book_.forget(replica->id);
  }
  result.replica = view_of(*replica);
  return result;
}

ReplicaOpResult FleetManager::drain(std::string_view name) {
  auto replica = by_name(name);
  if (!replica) {
    return {ReplicaOpResult::Status::not_found, std::nullopt};
  }
  apply(tracker_.drain(replica->id));
  return {ReplicaOpResult::Status::ok, view_of(*replica)};
}

ReplicaOpResult FleetManager::undrain(std::string_view name) {
  auto replica = by_name(name);
  if (!replica) {
    return {ReplicaOpResult::Status::not_found, std::nullopt};
  }
  if (pending_removal(replica->id)) {
    return {ReplicaOpResult::Status::removing, view_of(*replica)};
  }
  apply(tracker_.undrain(replica->id));
  return {ReplicaOpResult::Status::ok, view_of(*replica)};
}

ReplicaOpResult FleetManager::remove(std::string_view name) {
  auto replica = by_name(name);
  if (!replica) {
    return {ReplicaOpResult::Status::not_found, std::nullopt};
  }
  begin_removal(*replica);
  return {ReplicaOpResult::Status::ok, view_of(*replica)};
}

ReplicaView FleetManager::view_of(const Replica& replica) const {
  ReplicaView v;
  v.id = replica.name;
  v.model = replica.model;
  v.url = replica.url.to_string();
  v.state = tracker_.state(replica.id);
  v.state_reason = replica.state_reason;
  v.state_seconds = std::chrono::duration<double>(Clock::now() - replica.state_since).count();
  v.source = replica.source;
  v.slots = replica.slots;
  v.in_flight = scheduler_.in_flight(replica.id);
  v.consecutive_failures = tracker_.consecutive_failures(replica.id);
  v.requests = replica.requests;
  v.failures = replica.failures;
  v.tokens_per_second = replica.tokens_per_second;
  v.speeds = scheduler_.speeds(replica.id);
  v.prompt_cache = scheduler_.prompt_cache().summary(replica.id);
  v.last_probe = replica.last_probe;
  v.last_probe_seconds = replica.last_probe_seconds;
  v.last_probe_error = replica.last_probe_error;
  v.model_check = replica.model_check;
  v.reported_slots_idle = replica.reported_slots_idle;
  v.removing = pending_removal(replica.id);
  if (const Registration* r = book_.find(replica.id)) {
    v.registered = true;
    v.agent_version = r->agent_version;
    v.device = r->device;
    v.heartbeat_age_seconds =
        std::chrono::duration<double>(Clock::now() - r->last_heartbeat).count();
    v.deployment_id = r->deployment_id;
    v.ends_at = r->ends_at;
  }
  return v;
}

std::vector<ReplicaView> FleetManager::replicas() const {
  std::vector<ReplicaView> out;
  for (const auto& replica : registry_.all()) {
    out.push_back(view_of(*replica));
  }
  return out;
}

std::vector<EndingFacts> FleetManager::ending_facts(const std::string& model) const {
  std::vector<EndingFacts> facts;
  for (const auto& replica : registry_.all()) {
    if (replica->model != model) {
      continue;
    }
    EndingFacts f;
    f.healthy = tracker_.state(replica->id) == State::healthy;
    if (const Registration* r = book_.find(replica->id)) {
      f.ends_at = r->ends_at;
    }
    facts.push_back(f);
  }
  return facts;
}

std::vector<ModelView> FleetManager::models() const {
  std::vector<ModelView> out;
  const auto now = Clock::now();
  const auto wall_now = std::chrono::system_clock::now();
  const auto all = registry_.all();
  for (const auto& model : config().models) {
    ModelView m;
    m.model = model.name;
    for (const auto& replica : all) {
      m.registered += replica->model == model.name ? 1 : 0;
    }
    m.ending_within_hour = count_ending(ending_facts(model.name), wall_now);
    m.healthy = tracker_.healthy_count(model.name);
    m.desired = model.desired_replicas();
    m.busy_slots = scheduler_.busy_slots(model.name);
    m.free_slots = scheduler_.free_slots(model.name);
    m.queue_depth = scheduler_.queue_depth(model.name);
    if (auto since = scheduler_.oldest_waiter_since(model.name)) {
      m.oldest_queued_seconds = std::chrono::duration<double>(now - *since).count();
    }
    m.degraded = m.healthy < m.desired;
    m.short_after_endings = short_after_endings(m.healthy, m.ending_within_hour, m.desired);
    out.push_back(std::move(m));
  }
  return out;
}

RunningFleet FleetManager::running() const {
  RunningFleet old;
  old.models = models_;
  for (const auto& replica : registry_.all()) {
    if (replica->source == Source::config) {
      old.statics.push_back({replica->id, replica->model, replica->url.to_string(),
                             replica->configured_slots, pending_removal(replica->id)});
    } else if (!pending_removal(replica->id)) {
      old.other_urls.insert(replica->url.to_string());
    }
  }
  if (local_ != nullptr) {
    old.locals = local_->running();
  }
  return old;
}

void FleetManager::reload() {
  net::resolver_for(executor_).set_cache_ttl(config().upstream.dns_cache_ttl);
  scheduler_.set_queue_max(config().routing.queue_max);
  const ReloadPlan plan = plan_reload(running(), config());
  apply_plan(plan);
  for (const auto& replica : registry_.all()) {
    tracker_.set_thresholds(replica->id, thresholds_for(replica->model));
  }
  if (local_ != nullptr) {
    local_->apply(plan.locals);
  }
}

void FleetManager::apply_plan(const ReloadPlan& plan) {
  for (const auto& model : config().models) {
    scheduler_.add_model(model.name);
    metrics_.declare_model(model.name);
    models_.insert(model.name);
  }
  for (const auto& model : plan.add_models) {
    log::info("model added", {{"model", model}});
  }
  for (ReplicaId id : plan.remove_statics) {
    if (auto replica = registry_.find(id)) {
      begin_removal(*replica);
    }
  }
  for (const auto& keep : plan.keep_statics) {
    auto replica = registry_.find(keep.id);
    if (!replica) {
      continue;
    }
    if (keep.restore) {
      // Listed again before its removal finished: it stays, and probes prove it again.
      removing_.erase(std::remove(removing_.begin(), removing_.end(), keep.id), removing_.end());
      apply(tracker_.undrain(keep.id));
    }
    replica->configured_slots = keep.slots;
    set_slots(*replica, keep.slots);
  }
  for (const auto& add : plan.add_statics) {
    add_replica(add.model, add.url, add.slots, Source::config, State::healthy);
  }
  for (const auto& url : plan.shadowed_statics) {
    log::warn("static endpoint not added: an agent's registration serves this URL", {{"url", url}});
  }
  // Models no longer configured: their replicas go, their queued requests are answered now.
  for (const auto& model : plan.remove_models) {
    for (const auto& replica : registry_.all()) {
      if (replica->model == model) {
        finish_removal(replica->id);
      }
    }
    models_.erase(model);
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
    if (replica->source == Source::config) {
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
    metrics_.set_replicas_ending(
        model.name, static_cast<double>(
                        count_ending(ending_facts(model.name), std::chrono::system_clock::now())));
  }
  if (config().metrics.per_replica) {
    for (const auto& replica : registry_.all()) {
      metrics_.set_replica(replica->model, replica->name, scheduler_.in_flight(replica->id),
                           replica->tokens_per_second);
      if (auto speeds = scheduler_.speeds(replica->id)) {
        metrics_.set_replica_speeds(replica->model, replica->name, speeds->prefill_tps,
                                    speeds->decode_tps);
      }
    }
  }
  const auto& cache = scheduler_.prompt_cache();
  metrics_.set_prompt_cache(static_cast<double>(cache.blocks_held()),
                            static_cast<double>(cache.bytes_used()));
  const auto& stats = cache.stats();
  metrics_.set_prompt_cache_accuracy({.reports = stats.reports,
                                      .predicted_blocks = stats.predicted_blocks,
                                      .reported_blocks = stats.reported_blocks,
                                      .under = stats.under,
                                      .over = stats.over});
  if (const net::TlsSessions* sessions = tls_sessions()) {
    metrics_.set_upstream_tls(static_cast<double>(sessions->size()), sessions->full_handshakes(),
                              sessions->resumed_handshakes());
  }
}

}  // namespace fg::fleet
