#include "orchestrator/admin/admin.hpp"

#include <chrono>
#include <ctime>
#include <optional>
#include <random>

#include <nlohmann/json.hpp>

#include "common/net/http_io.hpp"
#include "common/net/http_session.hpp"

#include "common/log/log.hpp"
#include "common/openai/errors.hpp"
#include "common/util/text.hpp"
#include "orchestrator/admin/static_assets.hpp"
#include "orchestrator/fleet/fleet_manager.hpp"

namespace fg::admin {

namespace asio = boost::asio;
namespace http = boost::beast::http;

namespace {

struct Reply {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<net::Header> headers = {};
};

Reply error_reply(unsigned status, std::string message, std::string code) {
  return {status, "application/json",
          openai::error_body(message, openai::error_type_for_status(status), code)};
}

Reply json_reply(unsigned status, const nlohmann::json& body) {
  return {status, "application/json", body.dump()};
}

std::string iso_time(std::chrono::system_clock::time_point t) {
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char out[32];
  std::strftime(out, sizeof out, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return out;
}

std::string_view model_check_name(health::ModelCheck check) {
  switch (check) {
    case health::ModelCheck::match:
      return "verified";
    case health::ModelCheck::mismatch:
      return "mismatch";
    case health::ModelCheck::unverified:
      break;
  }
  return "unverified";
}

nlohmann::json replica_json(const fleet::ReplicaView& r) {
  nlohmann::json j{{"id", r.id},
                   {"model", r.model},
                   {"url", r.url},
                   {"state", health::to_string(r.state)},
                   {"source", fleet::to_string(r.source)},
                   {"slots", r.slots},
                   {"in_flight", r.in_flight},
                   {"consecutive_failures", r.consecutive_failures},
                   {"requests", r.requests},
                   {"failures", r.failures},
                   {"tokens_per_second", r.tokens_per_second}};
  j["last_probe"] = r.last_probe ? nlohmann::json(iso_time(*r.last_probe)) : nullptr;
  j["last_probe_seconds"] =
      r.last_probe ? nlohmann::json(r.last_probe_seconds) : nlohmann::json(nullptr);
  j["last_probe_error"] =
      r.last_probe_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.last_probe_error);
  j["state_reason"] =
      r.state_reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.state_reason);
  j["state_seconds"] = r.state_seconds;
  if (r.speeds) {
    j["speeds"] = {{"prefill_tokens_per_second", r.speeds->prefill_tps},
                   {"decode_tokens_per_second", r.speeds->decode_tps},
                   {"source", scheduling::to_string(r.speeds->source)}};
  } else {
    j["speeds"] = nullptr;
  }
  j["model_check"] = model_check_name(r.model_check);
  j["reported_slots_idle"] =
      r.reported_slots_idle ? nlohmann::json(*r.reported_slots_idle) : nlohmann::json(nullptr);
  j["registered"] = r.registered;
  if (r.registered) {
    j["agent_version"] = r.agent_version;
    j["device"] = r.device;
    j["heartbeat_age_seconds"] = r.heartbeat_age_seconds;
    j["deployment_id"] =
        r.deployment_id.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.deployment_id);
    j["ends_at"] =
        r.ends_at ? nlohmann::json(fleet::format_rfc3339(*r.ends_at)) : nlohmann::json(nullptr);
  }
  if (r.removing) {
    j["removing"] = true;
  }
  return j;
}

nlohmann::json model_json(const fleet::ModelView& m) {
  return {{"model", m.model},
          {"desired", m.desired},
          {"registered", m.registered},
          {"healthy", m.healthy},
          {"ending_within_hour", m.ending_within_hour},
          {"short_after_endings", m.short_after_endings},
          {"busy_slots", m.busy_slots},
          {"free_slots", m.free_slots},
          {"queue_depth", m.queue_depth},
          {"oldest_queued_seconds", m.oldest_queued_seconds},
          {"degraded", m.degraded}};
}

// GET /admin/v1/status: what the status page and `fleetgate status` show, in one answer: the
// fleet summary per model with its recent rates and their history, and every replica.
nlohmann::json status_json(const AdminContext& ctx) {
  const auto now = std::chrono::steady_clock::now();
  auto models = nlohmann::json::array();
  bool degraded = false;
  for (const auto& m : ctx.fleet->models()) {
    nlohmann::json j = model_json(m);
    degraded = degraded || m.degraded;
    const RatePoint recent =
        ctx.rates != nullptr ? ctx.rates->recent(m.model, kRateWindow) : RatePoint{};
    j["requests_per_second"] = recent.requests_per_second;
    j["tokens_per_second"] = recent.tokens_per_second;
    // [seconds before now at the end of the interval, requests/s, tokens/s], oldest first.
    auto history = nlohmann::json::array();
    if (ctx.rates != nullptr) {
      for (const auto& p : ctx.rates->points(m.model)) {
        history.push_back({std::chrono::duration<double>(now - p.at).count(), p.requests_per_second,
                           p.tokens_per_second});
      }
    }
    j["history"] = std::move(history);
    models.push_back(std::move(j));
  }
  auto replicas = nlohmann::json::array();
  for (const auto& r : ctx.fleet->replicas()) {
    replicas.push_back(replica_json(r));
  }
  return {{"version", FLEETGATE_VERSION},
          {"time", iso_time(std::chrono::system_clock::now())},
          {"degraded", degraded},
          {"rate_interval_seconds", kRateInterval.count()},
          {"rate_window_seconds", kRateWindow.count()},
          {"models", std::move(models)},
          {"replicas", std::move(replicas)}};
}

// The page's files. It is a shell that fetches /admin/v1/status with the admin token; nothing in
// it is secret. The policy allows only its own files and fetches.
std::optional<Reply> static_reply(std::string_view path) {
  std::string_view name;
  if (path == "/" || path == "/status") {
    name = "index.html";
  } else if (path.substr(0, 8) == "/static/") {
    name = path.substr(8);
  } else {
    return std::nullopt;
  }
  const StaticAsset* asset = find_static_asset(name);
  if (asset == nullptr) {
    return std::nullopt;
  }
  return Reply{200,
               std::string(asset->content_type),
               std::string(asset->body),
               {{"Content-Security-Policy",
                 "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                 "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
                {"X-Content-Type-Options", "nosniff"},
                {"Referrer-Policy", "no-referrer"},
                {"Cache-Control", "no-cache"}}};
}

Reply register_reply(const fleet::RegisterResult& r) {
  using fleet::Refusal;
  switch (r.refusal) {
    case Refusal::none:
      break;
    case Refusal::unknown_model:
      return error_reply(404, r.message, "model_not_found");
    case Refusal::url_not_allowed:
      return error_reply(403, r.message, "url_not_allowed");
    case Refusal::static_endpoint:
    case Refusal::url_in_use:
      return error_reply(409, r.message, "url_in_use");
    case Refusal::url_registered:
      return error_reply(409, r.message, "url_registered");
  }
  nlohmann::json body{
      {"id", r.id},
      {"secret", r.secret},
      {"heartbeat_interval_s", std::chrono::duration<double>(r.heartbeat_interval).count()},
      {"slots", r.slots}};
  if (r.slots_capped) {
    body["slots_capped"] = true;
  }
  return json_reply(200, body);
}

// Heartbeats and deregistrations: 404 makes the agent register again; 403 says its secret is
// not (or no longer) the one of this registration.
std::optional<Reply> identity_error(const fleet::IdentityResult& r, const std::string& id) {
  if (r.check == fleet::SecretCheck::unknown) {
    return error_reply(404, "no registered replica " + id + "; register again",
                       "replica_not_found");
  }
  if (r.check == fleet::SecretCheck::wrong_secret) {
    std::string message = "the ";
    message += fleet::kSecretHeader;
    message += " header is missing or does not match replica ";
    message += id;
    return error_reply(403, message, "invalid_replica_secret");
  }
  return std::nullopt;
}

Reply operation_reply(const fleet::ReplicaOpResult& r, const std::string& id, unsigned ok_status) {
  switch (r.status) {
    case fleet::ReplicaOpResult::Status::not_found:
      return error_reply(404, "no replica " + id, "replica_not_found");
    case fleet::ReplicaOpResult::Status::removing:
      return error_reply(409, "replica " + id + " is being removed", "replica_removing");
    case fleet::ReplicaOpResult::Status::ok:
      break;
  }
  return json_reply(ok_status, replica_json(*r.replica));
}

Reply registration_route(AdminContext& ctx, const net::Request& request, std::string_view path,
                         std::string_view rest) {
  const auto secret_field = request[fleet::kSecretHeader];
  const std::string_view secret(secret_field.data(), secret_field.size());
  if (path == "/admin/v1/replicas/register") {
    auto parsed = fleet::parse_registration(request.body());
    if (!parsed.request) {
      log::warn("registration refused: bad body", {{"error", parsed.message}});
      return error_reply(400, parsed.message, "invalid_request");
    }
    return register_reply(ctx.fleet->register_replica(*parsed.request, secret));
  }
  std::string id(rest.substr(0, rest.find('/')));
  if (rest.substr(rest.find('/') + 1) == "deregister") {
    // An agent leaving (SIGTERM): drained, then removed once its requests are done.
    auto r = ctx.fleet->deregister(id, secret);
    if (auto error = identity_error(r, id)) {
      return *error;
    }
    auto body = replica_json(*r.replica);
    return json_reply(r.removing ? 202 : 200, body);
  }
  auto r = ctx.fleet->heartbeat(id, secret);
  if (auto error = identity_error(r, id)) {
    return *error;
  }
  return json_reply(200, {{"id", id}, {"state", health::to_string(r.replica->state)}});
}

// /admin/v1/...: registration (its own token) and fleet management (the admin token).
Reply route_api(AdminContext& ctx, const net::Request& request, std::string_view path) {
  const auto method = request.method();
  const auto auth = request[http::field::authorization];
  constexpr std::string_view kReplicas = "/admin/v1/replicas";
  constexpr std::string_view kReplicasSlash = "/admin/v1/replicas/";

  const std::string_view rest =
      path.size() > kReplicasSlash.size() && path.substr(0, kReplicasSlash.size()) == kReplicasSlash
          ? path.substr(kReplicasSlash.size())
          : std::string_view{};
  auto ends_with = [&](std::string_view suffix) {
    return rest.size() > suffix.size() && rest.substr(rest.size() - suffix.size()) == suffix &&
           rest.find('/') == rest.size() - suffix.size();
  };
  if (path == "/admin/v1/replicas/register" || ends_with("/heartbeat") ||
      ends_with("/deregister")) {
    if (method != http::verb::post) {
      return error_reply(405, "use POST", "method_not_allowed");
    }
    if (ctx.registration_token.empty()) {
      return error_reply(403, "registration is off (registration.token_env is not set)",
                         "registration_disabled");
    }
    if (!bearer_matches(auth, ctx.registration_token)) {
      log::warn("registration refused: missing or wrong token");
      return error_reply(401, "a valid registration token is required", "invalid_token");
    }
    return registration_route(ctx, request, path, rest);
  }

  if (!ctx.admin_token.empty() && !bearer_matches(auth, ctx.admin_token)) {
    return error_reply(401, "a valid admin token is required", "invalid_token");
  }
  if (path == kReplicas) {
    if (method != http::verb::get) {
      return error_reply(405, "use GET", "method_not_allowed");
    }
    auto list = nlohmann::json::array();
    for (const auto& r : ctx.fleet->replicas()) {
      list.push_back(replica_json(r));
    }
    return json_reply(200, nlohmann::json{{"replicas", list}});
  }
  if (path == "/admin/v1/fleet") {
    if (method != http::verb::get) {
      return error_reply(405, "use GET", "method_not_allowed");
    }
    auto models = nlohmann::json::array();
    for (const auto& m : ctx.fleet->models()) {
      models.push_back(model_json(m));
    }
    return json_reply(200, nlohmann::json{{"models", models}});
  }
  if (path == "/admin/v1/status") {
    if (method != http::verb::get) {
      return error_reply(405, "use GET", "method_not_allowed");
    }
    Reply reply = json_reply(200, status_json(ctx));
    reply.headers.push_back({"Cache-Control", "no-store"});
    return reply;
  }
  if (!rest.empty()) {
    auto slash = rest.find('/');
    std::string id(rest.substr(0, slash));
    std::string_view action = slash == std::string_view::npos ? "" : rest.substr(slash + 1);
    if (action.empty() && method == http::verb::delete_) {
      return operation_reply(ctx.fleet->remove(id), id, 202);
    }
    if (action == "drain" && method == http::verb::post) {
      return operation_reply(ctx.fleet->drain(id), id, 200);
    }
    if (action == "undrain" && method == http::verb::post) {
      return operation_reply(ctx.fleet->undrain(id), id, 200);
    }
    return error_reply(405, "use POST .../drain, POST .../undrain or DELETE", "method_not_allowed");
  }
  return error_reply(404, "no admin route for " + std::string(path), "not_found");
}

Reply route(AdminContext& ctx, const net::Request& request) {
  std::string_view target(request.target().data(), request.target().size());
  std::string_view path = target.substr(0, target.find('?'));
  if (path.substr(0, 10) == "/admin/v1/") {
    return route_api(ctx, request, path);
  }
  if (request.method() != http::verb::get) {
    return {405, "application/json",
            openai::error_body("the admin routes answer GET", "invalid_request_error",
                               "method_not_allowed")};
  }
  if (path == "/healthz") {
    return {200, "application/json", R"({"status":"ok"})"};
  }
  if (path == "/readyz") {
    nlohmann::json models = nlohmann::json::object();
    bool ready = false;
    for (const auto& model : ctx.configs->current().models) {
      auto healthy = ctx.fleet->healthy_count(model.name);
      models[model.name] = healthy;
      ready = ready || healthy > 0;
    }
    nlohmann::json body{{"status", ready ? "ready" : "not_ready"}, {"healthy_replicas", models}};
    return {ready ? 200u : 503u, "application/json", body.dump()};
  }
  if (path == "/metrics") {
    return {200, "text/plain; version=0.0.4; charset=utf-8", ctx.metrics->scrape()};
  }
  if (auto page = static_reply(path)) {
    return std::move(*page);
  }
  return {404, "application/json",
          openai::error_body("no admin route for " + std::string(path), "invalid_request_error",
                             "not_found")};
}

// The admin listener's requests are small: registrations, heartbeats, admin calls, scrapes.
net::SessionLimits admin_session_limits() {
  net::SessionLimits limits;
  limits.header_limit = 16 * 1024;
  limits.body_limit = 64 * 1024;
  limits.body_limit_key = "the admin listener's body limit";
  limits.timeouts = {std::chrono::seconds(60), std::chrono::seconds(10), std::chrono::seconds(10)};
  limits.write_timeout = std::chrono::seconds(10);
  return limits;
}

// The tokens, checked from the head so that no body is read for a client that will get 401:
// registration routes need the registration token (or the admin token), the rest of /admin/v1
// the admin token when one is set. Everything else is left to route().
std::optional<net::ErrorReply> admin_head_refusal(const AdminContext* ctx,
                                                  const net::Request& head) {
  const std::string_view target(head.target().data(), head.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  if (path.substr(0, 10) != "/admin/v1/") {
    return std::nullopt;
  }
  const auto auth = head[http::field::authorization];
  const bool admin_ok = !ctx->admin_token.empty() && bearer_matches(auth, ctx->admin_token);
  constexpr std::string_view kReplicas = "/admin/v1/replicas/";
  const std::string_view rest =
      path.size() > kReplicas.size() && path.substr(0, kReplicas.size()) == kReplicas
          ? path.substr(kReplicas.size())
          : std::string_view{};
  // "{id}/heartbeat", "{id}/deregister": one path segment before the action.
  const auto ends_with = [&](std::string_view suffix) {
    return rest.size() > suffix.size() && rest.substr(rest.size() - suffix.size()) == suffix &&
           rest.find('/') == rest.size() - suffix.size();
  };
  if (path == "/admin/v1/replicas/register" || ends_with("/heartbeat") ||
      ends_with("/deregister")) {
    if (ctx->registration_token.empty() || admin_ok ||
        bearer_matches(auth, ctx->registration_token)) {
      return std::nullopt;
    }
    return net::ErrorReply{401, "invalid_token", "a valid registration token is required", {}};
  }
  if (ctx->admin_token.empty() || admin_ok) {
    return std::nullopt;
  }
  return net::ErrorReply{401, "invalid_token", "a valid admin token is required", {}};
}

asio::awaitable<bool> serve_admin_request(AdminContext* ctx, net::ServerRequest r) {
  Reply reply = route(*ctx, *r.request);
  co_await r.writer->send_full(reply.status, reply.content_type, std::move(reply.body),
                               std::move(reply.headers));
  co_return r.writer->keep_alive() && r.writer->finished();
}

std::mt19937_64& admin_id_rng() {
  static std::mt19937_64 rng{std::random_device{}()};
  return rng;
}

}  // namespace

asio::awaitable<void> run_admin_session(AdminContext* ctx, std::unique_ptr<net::Conn> conn) {
  net::SessionHooks hooks;
  hooks.listener = "admin";
  hooks.limits = [] { return admin_session_limits(); };
  hooks.check_head = [ctx](const net::Request& head) { return admin_head_refusal(ctx, head); };
  hooks.handle = [ctx](net::ServerRequest r) { return serve_admin_request(ctx, r); };
  hooks.count = [ctx](std::string_view reason) {
    ctx->metrics->session_event("admin", std::string(reason));
  };
  hooks.id_rng = &admin_id_rng();
  co_await net::serve_session(&hooks, std::move(conn));
}

}  // namespace fg::admin
