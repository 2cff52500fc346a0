#include "orchestrator/admin/admin.hpp"

#include <nlohmann/json.hpp>

#include "common/net/http_io.hpp"
#include "common/openai/errors.hpp"

namespace fg::admin {

namespace asio = boost::asio;
namespace http = boost::beast::http;

namespace {

struct Reply {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
};

Reply route(AdminContext& ctx, const net::Request& request) {
  std::string_view target(request.target().data(), request.target().size());
  std::string_view path = target.substr(0, target.find('?'));
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
    for (const auto& model : ctx.config->models) {
      std::size_t routable = 0;
      for (auto* replica : ctx.registry->all()) {
        if (replica->model == model.name && ctx.scheduler->routable(replica->id)) {
          ++routable;
        }
      }
      models[model.name] = routable;
      ready = ready || routable > 0;
    }
    nlohmann::json body{{"status", ready ? "ready" : "not_ready"}, {"routable_replicas", models}};
    return {ready ? 200u : 503u, "application/json", body.dump()};
  }
  if (path == "/metrics") {
    return {200, "text/plain; version=0.0.4; charset=utf-8", ctx.metrics->scrape()};
  }
  return {404, "application/json",
          openai::error_body("no admin route for " + std::string(path), "invalid_request_error",
                             "not_found")};
}

}  // namespace

asio::awaitable<void> run_admin_session(AdminContext* ctx, std::unique_ptr<net::Conn> conn) {
  net::RequestLimits limits;
  limits.body_limit = 1024 * 1024;
  limits.timeout = std::chrono::seconds(10);
  boost::beast::flat_buffer buffer;
  for (;;) {
    net::Request request;
    auto outcome =
        co_await net::read_request(*conn, buffer, limits, std::chrono::seconds(60), request);
    if (outcome != net::ReadOutcome::ok) {
      break;
    }
    Reply reply = route(*ctx, request);
    bool keep_alive = request.keep_alive();
    conn->expires_after(std::chrono::seconds(10));
    auto bytes = net::full_response(reply.status, reply.content_type, reply.body, {}, keep_alive);
    auto [ec, n] = co_await conn->write(asio::buffer(bytes));
    if (ec || !keep_alive) {
      break;
    }
  }
  co_await conn->shutdown();
  conn->close();
}

}  // namespace fg::admin
