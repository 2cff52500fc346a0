#include "orchestrator/fleet/registrations.hpp"

#include <algorithm>

#include "common/util/json.hpp"
#include "common/util/secret.hpp"

namespace fg::fleet {

namespace {

constexpr std::size_t kMaxAgentVersion = 64;
constexpr std::size_t kExcerpt = 80;

// A short excerpt of network text for a message: never echo a megabyte back.
std::string excerpt(std::string_view text) {
  if (text.size() <= kExcerpt) {
    return std::string(text);
  }
  return std::string(text.substr(0, kExcerpt)) + "...";
}

ParsedRegistration refuse(RequestError error, std::string message) {
  ParsedRegistration out;
  out.error = error;
  out.message = std::move(message);
  return out;
}

RegistrationPlan refusal(Refusal why, std::string message) {
  RegistrationPlan plan;
  plan.action = RegistrationPlan::Action::refuse;
  plan.refusal = why;
  plan.message = std::move(message);
  return plan;
}

// The static endpoint with this normalised URL in the configuration, with its model.
struct StaticEndpoint {
  const config::ModelConfig* model = nullptr;
  const config::Endpoint* endpoint = nullptr;
};

StaticEndpoint find_static(const config::Config& config, const std::string& url) {
  for (const auto& model : config.models) {
    for (const auto& endpoint : model.endpoints) {
      if (endpoint.url.to_string() == url) {
        return {&model, &endpoint};
      }
    }
  }
  return {};
}

}  // namespace

std::string_view to_string(Source source) {
  switch (source) {
    case Source::config:
      return "config";
    case Source::registration:
      return "registration";
    case Source::local:
      return "local";
  }
  return "config";
}

ParsedRegistration parse_registration(std::string_view body) {
  JsonError json_error = JsonError::none;
  const nlohmann::json doc = parse_network_json(body, &json_error);
  if (json_error == JsonError::too_deep) {
    return refuse(RequestError::too_deep,
                  "the body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  if (doc.is_discarded()) {
    return refuse(RequestError::not_json, "the body is not valid JSON");
  }
  if (!doc.is_object()) {
    return refuse(RequestError::not_object, "the body must be a JSON object");
  }
  auto url_it = doc.find("url");
  if (url_it == doc.end() || !url_it->is_string()) {
    return refuse(RequestError::missing_url, "\"url\" (string) is required");
  }
  auto model_it = doc.find("model");
  if (model_it == doc.end() || !model_it->is_string()) {
    return refuse(RequestError::missing_model, "\"model\" (string) is required");
  }
  const auto& url_text = url_it->get_ref<const std::string&>();
  std::string why;
  auto url = net::parse_url(url_text, &why);
  if (!url) {
    return refuse(RequestError::bad_url,
                  "\"url\" is not a valid URL (" + why + "): " + excerpt(url_text));
  }
  RegistrationRequest request;
  request.url = *url;
  request.model = model_it->get<std::string>();
  if (auto s = doc.find("slots"); s != doc.end() && !s->is_null()) {
    if (!s->is_number_unsigned() || s->get<std::uint64_t>() < 1 ||
        s->get<std::uint64_t>() > config::kMaxSlots) {
      return refuse(RequestError::bad_slots,
                    "\"slots\" must be an integer from 1 to " + std::to_string(config::kMaxSlots));
    }
    request.slots = static_cast<std::uint32_t>(s->get<std::uint64_t>());
  }
  if (auto v = doc.find("agent_version"); v != doc.end() && v->is_string()) {
    request.agent_version = v->get_ref<const std::string&>().substr(0, kMaxAgentVersion);
  }
  if (auto d = doc.find("deployment_id"); d != doc.end() && !d->is_null()) {
    if (!d->is_string() || d->get_ref<const std::string&>().empty() ||
        d->get_ref<const std::string&>().size() > kMaxDeploymentId) {
      return refuse(RequestError::bad_deployment, "\"deployment_id\" must be a string of 1 to " +
                                                      std::to_string(kMaxDeploymentId) +
                                                      " characters");
    }
    request.deployment_id = d->get<std::string>();
  }
  if (auto e = doc.find("ends_at"); e != doc.end() && !e->is_null()) {
    std::optional<SystemTime> ends;
    if (e->is_string()) {
      ends = parse_rfc3339(e->get_ref<const std::string&>());
    }
    if (!ends) {
      return refuse(RequestError::bad_deployment,
                    "\"ends_at\" must be an RFC 3339 time such as \"2026-12-04T18:00:00Z\"" +
                        (e->is_string() ? ", got \"" + excerpt(e->get<std::string>()) + "\""
                                        : std::string()));
    }
    request.ends_at = ends;
  }
  // The document is within the depth limit, so dumping and copying the device are bounded.
  if (auto d = doc.find("device");
      d != doc.end() && d->is_object() && d->dump().size() <= kMaxDeviceBytes) {
    request.device = *d;
  }
  ParsedRegistration out;
  out.request = std::move(request);
  return out;
}

RegistrationBook::RegistrationBook(SecretSource make_secret)
    : make_secret_(make_secret ? std::move(make_secret) : [] { return random_secret(); }) {}

RegistrationPlan RegistrationBook::plan(const RegistrationRequest& request,
                                        std::string_view presented_secret,
                                        const std::optional<UrlHolder>& holder,
                                        const config::Config& config, Clock::time_point now) const {
  using Action = RegistrationPlan::Action;
  const std::string url = request.url.to_string();
  const auto* model = config.find_model(request.model);
  if (model == nullptr) {
    return refusal(Refusal::unknown_model,
                   "the model '" + excerpt(request.model) + "' is not configured");
  }
  const bool allowed =
      std::any_of(config.registration.allowed_urls.begin(), config.registration.allowed_urls.end(),
                  [&](const std::string& pattern) { return config::glob_match(pattern, url); });
  if (!allowed) {
    return refusal(Refusal::url_not_allowed,
                   "the URL " + url + " is not in registration.allowed_urls");
  }
  const StaticEndpoint fixed = find_static(config, url);
  if (fixed.model != nullptr && fixed.model->name != request.model) {
    // A static endpoint belongs to the YAML: a registration must not move it elsewhere.
    return refusal(Refusal::static_endpoint,
                   "the URL " + url + " is configured for model '" + fixed.model->name + "'");
  }
  RegistrationPlan plan;
  plan.slots = request.slots.value_or(model->slots);
  if (fixed.endpoint != nullptr && plan.slots > fixed.endpoint->slots) {
    // The operator set this phone's capacity; an agent may offer less, never more.
    plan.slots = fixed.endpoint->slots;
    plan.slots_capped = true;
  }
  if (!holder) {
    plan.action = Action::create;
    return plan;
  }
  if (holder->source == Source::local) {
    return refusal(Refusal::url_in_use, "the URL " + url + " is a local agent of this gateway");
  }
  const Registration* current = find(holder->id);
  const bool authenticated = current != nullptr && !presented_secret.empty() &&
                             secrets_equal(presented_secret, current->secret);
  const bool abandoned = current != nullptr &&
                         missed_heartbeats(holder->id, config.registration.heartbeat_interval, now);
  if (holder->source == Source::config) {
    if (current != nullptr && authenticated) {
      plan.action = Action::update;
    } else {
      plan.action = Action::attach;
      plan.took_over = current != nullptr;
      if (current != nullptr && !abandoned) {
        return refusal(Refusal::url_registered, "the URL " + url +
                                                    " is registered by an agent; send its " +
                                                    std::string(kSecretHeader) + " header");
      }
    }
    return plan;
  }
  if (authenticated) {
    plan.action = holder->model == request.model ? Action::update : Action::replace;
    plan.keep_secret = plan.action == Action::replace;
    return plan;
  }
  if (current == nullptr || abandoned) {
    plan.action = Action::replace;
    plan.took_over = true;
    return plan;
  }
  return refusal(Refusal::url_registered, "the URL " + url + " is registered (as " +
                                              excerpt(holder->model) + "); send its " +
                                              std::string(kSecretHeader) +
                                              " header, or wait until that registration misses " +
                                              std::to_string(kMissedHeartbeats) + " heartbeats");
}

const std::string& RegistrationBook::record(ReplicaId id, const RegistrationRequest& request,
                                            Clock::time_point now,
                                            std::optional<std::string> keep) {
  Registration& r = registrations_[id];
  r.secret = keep ? std::move(*keep) : make_secret_();
  r.last_heartbeat = now;
  heard_at(now);
  r.agent_version = request.agent_version;
  r.device = request.device;
  r.deployment_id = request.deployment_id;
  r.ends_at = request.ends_at;
  return r.secret;
}

const Registration* RegistrationBook::find(ReplicaId id) const {
  auto it = registrations_.find(id);
  return it == registrations_.end() ? nullptr : &it->second;
}

SecretCheck RegistrationBook::check(ReplicaId id, std::string_view presented_secret) const {
  const Registration* r = find(id);
  if (r == nullptr) {
    return SecretCheck::unknown;
  }
  return secrets_equal(presented_secret, r->secret) ? SecretCheck::ok : SecretCheck::wrong_secret;
}

void RegistrationBook::heartbeat(ReplicaId id, Clock::time_point now) {
  if (auto it = registrations_.find(id); it != registrations_.end()) {
    it->second.last_heartbeat = now;
    heard_at(now);
  }
}

void RegistrationBook::heard_at(Clock::time_point t) {
  heard_since_ = heard_since_ ? std::min(*heard_since_, t) : t;
}

void RegistrationBook::forget(ReplicaId id) {
  registrations_.erase(id);
}

bool RegistrationBook::missed_heartbeats(ReplicaId id, Clock::duration heartbeat_interval,
                                         Clock::time_point now) const {
  const Registration* r = find(id);
  return r != nullptr && now - r->last_heartbeat > kMissedHeartbeats * heartbeat_interval;
}

std::vector<ReplicaId> RegistrationBook::silent_for(Clock::duration silence,
                                                    Clock::time_point now) {
  std::vector<ReplicaId> out;
  if (!heard_since_ || now - *heard_since_ <= silence) {
    return out;  // every last heartbeat is at or after heard_since_: none is that old
  }
  std::optional<Clock::time_point> oldest;
  for (const auto& [id, r] : registrations_) {
    if (now - r.last_heartbeat > silence) {
      out.push_back(id);
    }
    oldest = oldest ? std::min(*oldest, r.last_heartbeat) : r.last_heartbeat;
  }
  heard_since_ = oldest;
  return out;
}

}  // namespace fg::fleet
