#include "orchestrator/admin/admin.hpp"

#include <random>

#include <nlohmann/json.hpp>

#include "common/net/http_io.hpp"
#include "common/net/http_session.hpp"

#include "common/log/log.hpp"
#include "common/openai/errors.hpp"
#include "common/util/text.hpp"
#include "orchestrator/fleet/fleet_manager.hpp"

namespace fg::admin {

namespace asio = boost::asio;
namespace http = boost::beast::http;

namespace {

struct Reply {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
};

Reply error_reply(unsigned status, std::string message, std::string code) {
  return {status, "application/json",
          openai::error_body(message, openai::error_type_for_status(status), code)};
}

Reply json_reply(unsigned status, const nlohmann::json& body) {
  return {status, "application/json", body.dump()};
}

// /admin/v1/...: registration (its own token) and fleet management (the admin token).
Reply route_api(AdminContext& ctx, const net::Request& request, std::string_view path) {
  const auto method = request.method();
  const auto auth = request[http::field::authorization];
  constexpr std::string_view kReplicas = "/admin/v1/replicas";

  auto ends_with = [&](std::string_view suffix) {
    return path.size() > kReplicas.size() + 1 + suffix.size() &&
           path.substr(0, kReplicas.size() + 1) == "/admin/v1/replicas/" &&
           path.substr(path.size() - suffix.size()) == suffix;
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
    if (path == "/admin/v1/replicas/register") {
      auto body = nlohmann::json::parse(request.body(), nullptr, false);
      auto answer = ctx.fleet->register_replica(body);
      return json_reply(answer.status, answer.body);
    }
    std::string_view rest = path.substr(kReplicas.size() + 1);
    std::string id(rest.substr(0, rest.find('/')));
    if (ends_with("/deregister")) {
      // An agent leaving (SIGTERM): drained, then removed once its requests are done.
      auto answer = ctx.fleet->deregister(id);
      return json_reply(answer.status, answer.body);
    }
    auto answer = ctx.fleet->heartbeat(id);
    return json_reply(answer.status, answer.body);
  }

  if (!ctx.admin_token.empty() && !bearer_matches(auth, ctx.admin_token)) {
    return error_reply(401, "a valid admin token is required", "invalid_token");
  }
  if (path == kReplicas) {
    if (method != http::verb::get) {
      return error_reply(405, "use GET", "method_not_allowed");
    }
    return json_reply(200, nlohmann::json{{"replicas", ctx.fleet->replicas_json()}});
  }
  if (path == "/admin/v1/fleet") {
    if (method != http::verb::get) {
      return error_reply(405, "use GET", "method_not_allowed");
    }
    return json_reply(200, ctx.fleet->fleet_json());
  }
  if (path.size() > kReplicas.size() + 1 &&
      path.substr(0, kReplicas.size() + 1) == "/admin/v1/replicas/") {
    std::string_view rest = path.substr(kReplicas.size() + 1);
    auto slash = rest.find('/');
    std::string id(rest.substr(0, slash));
    std::string_view action = slash == std::string_view::npos ? "" : rest.substr(slash + 1);
    fleet::FleetManager::Answer answer;
    if (action.empty() && method == http::verb::delete_) {
      answer = ctx.fleet->remove(id);
    } else if (action == "drain" && method == http::verb::post) {
      answer = ctx.fleet->drain(id);
    } else if (action == "undrain" && method == http::verb::post) {
      answer = ctx.fleet->undrain(id);
    } else {
      return error_reply(405, "use POST .../drain, POST .../undrain or DELETE",
                         "method_not_allowed");
    }
    return json_reply(answer.status, answer.body);
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
  co_await r.writer->send_full(reply.status, reply.content_type, std::move(reply.body));
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
