#include "orchestrator/proxy/client_session.hpp"

#include <array>
#include <random>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "common/log/log.hpp"
#include "common/net/http_io.hpp"
#include "common/net/http_session.hpp"
#include "common/openai/errors.hpp"
#include "common/openai/inspect.hpp"
#include "orchestrator/fleet/fleet_manager.hpp"
#include "orchestrator/metrics/metrics.hpp"
#include "orchestrator/proxy/client_writer.hpp"
#include "orchestrator/proxy/public_routes.hpp"
#include "orchestrator/proxy/upstream.hpp"

namespace fg::proxy {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;
using namespace asio::experimental::awaitable_operators;

namespace {

constexpr std::size_t kHeaderLimit = 16 * 1024;
// Pipelined bytes a client may send while its previous request is served before we stop reading
// (and so stop noticing a disconnect) for that connection.
constexpr std::size_t kPipelineCap = 64 * 1024;

// Built outside co_await expressions: GCC 12 cannot keep braced lists of string literals in a
// coroutine frame.
// One generator for the process (a single thread uses it).
std::mt19937_64& id_rng() {
  static std::mt19937_64 rng{std::random_device{}()};
  return rng;
}

std::vector<net::Header> one_header(std::string name, std::string value) {
  std::vector<net::Header> headers;
  headers.emplace_back(std::move(name), std::move(value));
  return headers;
}

std::vector<net::Header> retry_after_headers(std::string seconds) {
  return one_header("Retry-After", std::move(seconds));
}

nlohmann::json model_object(const std::string& name) {
  return {{"id", name}, {"object", "model"}, {"created", 0}, {"owned_by", "fleetgate"}};
}

// Sends ": keep-alive" comments while a streamed request waits (queue, first token). Never
// completes by itself: it is cancelled when the request ends.
asio::awaitable<void> keepalive_loop(ClientWriter* writer, Clock::duration interval) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    timer.expires_after(interval);
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (writer->content_started() || writer->finished()) {
      timer.expires_at(asio::steady_timer::time_point::max());
      co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
      co_return;
    }
    co_await writer->keepalive();
  }
}

// What one request did, for its log line.
struct RequestRecord {
  std::string model;
  std::string endpoint;
  std::string replica;
  unsigned attempts = 0;
  Clock::duration queue_wait{};
  std::optional<std::uint64_t> prompt_tokens;
  std::optional<std::uint64_t> completion_tokens;
  std::string outcome = "ok";
};

std::string replica_outcome(const ExchangeResult& r) {
  switch (r.kind) {
    case ExchangeResult::Kind::done:
      return "ok";
    case ExchangeResult::Kind::client_gone:
      return "client_gone";
    case ExchangeResult::Kind::failed_after_content:
      return "failed_mid_stream";
    case ExchangeResult::Kind::retryable:
      return r.error == UpstreamError::busy ? "busy" : "error";
  }
  return "error";
}

// Passive health: connect, TLS, timeout, protocol and 5xx failures count against the replica;
// a busy answer (429/503: its slots are taken, perhaps by another gateway) does not.
void report_outcome(ProxyContext* ctx, const fleet::Replica& replica, const ExchangeResult& r) {
  switch (r.error) {
    case UpstreamError::none:
      if (r.kind == ExchangeResult::Kind::done) {
        ctx->fleet->traffic_success(replica.id);
      }
      break;
    case UpstreamError::busy:
      break;
    default:
      ctx->fleet->traffic_failure(replica.id);
      break;
  }
}

// Binds the request to a replica (queueing if needed), relays, and fails over while nothing has
// reached the client. Ends with exactly one response (or error event).
asio::awaitable<void> proxy_flow(ProxyContext* ctx, const config::Config* config,
                                 const net::Request* request, const openai::RequestInfo* info,
                                 ClientWriter* writer, RequestRecord* record) {
  // Streams whose client did not ask for usage: ask the replica anyway (token counts for logs
  // and metrics) and strip it again on the way back.
  std::string usage_body;
  bool strip_usage = false;
  if (info->stream && !info->include_usage && config->metrics.request_stream_usage) {
    if (auto body = openai::with_stream_usage(request->body())) {
      usage_body = std::move(*body);
      strip_usage = true;
    }
  }
  const std::string* body = strip_usage ? &usage_body : &request->body();
  const auto& routing = config->routing;
  std::vector<ReplicaId> tried;
  ExchangeResult last;
  for (unsigned attempt = 0; attempt <= routing.retries; ++attempt) {
    auto acquired = co_await ctx->broker->acquire(info->model, tried, routing.queue_timeout);
    record->queue_wait += acquired.waited;
    switch (acquired.error) {
      case AcquireError::none:
        break;
      case AcquireError::queue_full:
        record->outcome = "queue_full";
        ctx->metrics->queue_rejection(info->model, "full");
        co_await writer->send_error(
            429, "the queue for model '" + info->model + "' is full; retry later", "queue_full",
            retry_after_headers("1"));
        co_return;
      case AcquireError::timeout:
        record->outcome = "queue_timeout";
        ctx->metrics->queue_rejection(info->model, "timeout");
        co_await writer->send_error(
            503,
            "no replica of model '" + info->model + "' became free within routing.queue_timeout",
            "queue_timeout", retry_after_headers("5"));
        co_return;
      case AcquireError::unknown_model:
        record->outcome = "model_not_found";
        co_await writer->send_error(404, "the model '" + info->model + "' does not exist",
                                    "model_not_found");
        co_return;
      case AcquireError::cancelled:
        record->outcome = "client_gone";
        ctx->metrics->queue_rejection(info->model, "client_gone");
        co_return;
    }
    SlotLease lease = std::move(acquired.lease);
    // Shared: a replica removed meanwhile (reload, DELETE) stays valid until this ends.
    std::shared_ptr<fleet::Replica> replica = ctx->registry->find(lease.replica());
    if (replica == nullptr) {
      continue;
    }
    ++record->attempts;
    record->replica = replica->name;
    ++replica->requests;
    const auto exchange_start = Clock::now();
    last = co_await exchange(ctx, config, replica.get(), request, body, info, strip_usage, writer);
    if (last.kind == ExchangeResult::Kind::done && last.completion_tokens) {
      // Recent throughput for the admin API: completion tokens over the whole exchange, smoothed.
      double secs = std::chrono::duration<double>(Clock::now() - exchange_start).count();
      if (secs > 0) {
        double rate = static_cast<double>(*last.completion_tokens) / secs;
        auto& r = replica->tokens_per_second;
        r = r == 0 ? rate : 0.8 * r + 0.2 * rate;
      }
    }
    report_outcome(ctx, *replica, last);
    if (config->metrics.per_replica) {
      ctx->metrics->replica_request(replica->model, replica->name, replica_outcome(last));
    }
    record->prompt_tokens = last.prompt_tokens;
    record->completion_tokens = last.completion_tokens;
    switch (last.kind) {
      case ExchangeResult::Kind::done:
        co_return;
      case ExchangeResult::Kind::client_gone:
        record->outcome = "client_gone";
        co_return;
      case ExchangeResult::Kind::failed_after_content:
        ++replica->failures;
        ctx->metrics->upstream_error(info->model, std::string(to_string(last.error)));
        record->outcome = "upstream_failed_mid_stream";
        co_return;
      case ExchangeResult::Kind::retryable:
        ++replica->failures;
        tried.push_back(replica->id);
        ctx->metrics->upstream_error(info->model, std::string(to_string(last.error)));
        if (attempt < routing.retries) {
          ctx->metrics->retry(info->model);
        }
        log::info("upstream attempt failed", {{"request_id", writer->request_id()},
                                              {"replica", replica->name},
                                              {"error", to_string(last.error)},
                                              {"upstream_status", last.upstream_status}});
        break;
    }
  }
  // Every attempt failed before anything reached the client.
  record->outcome = "upstream_failed";
  std::vector<net::Header> extra;
  unsigned status = 502;
  std::string what;
  if (last.error == UpstreamError::busy || last.error == UpstreamError::http_5xx) {
    // Busy everywhere: 503 with Retry-After, as a phone says it. Broken: 502, the gateway's own.
    const bool busy = last.upstream_status == 429 || last.upstream_status == 503;
    status = busy ? 503 : 502;
    if (busy) {
      extra.emplace_back("Retry-After", last.retry_after.empty() ? "5" : last.retry_after);
    }
    what = "answered HTTP " + std::to_string(last.upstream_status);
  } else if (last.error == UpstreamError::timeout) {
    status = 504;
    what = "timed out";
  } else {
    what = "failed (" + std::string(to_string(last.error)) + ")";
  }
  co_await writer->send_error(status,
                              "the request failed on " + std::to_string(record->attempts) +
                                  " replica attempt(s); the last replica " + what,
                              "upstream_error", std::move(extra));
}

void log_request(ProxyContext* ctx, const ClientWriter& writer, const RequestRecord& record,
                 Clock::time_point start) {
  auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  nlohmann::json ttfb = nullptr;
  if (auto first = writer.first_content_at()) {
    ttfb = ms(*first - start);
  }
  const auto now = Clock::now();
  ctx->metrics->request_done(
      record.model, record.endpoint, writer.status(),
      std::chrono::duration<double>(now - start).count(),
      std::chrono::duration<double>(record.queue_wait).count(),
      writer.first_content_at()
          ? std::chrono::duration<double>(*writer.first_content_at() - start).count()
          : -1.0);
  if (record.prompt_tokens) {
    ctx->metrics->tokens(record.model, "prompt", static_cast<double>(*record.prompt_tokens));
  }
  if (record.completion_tokens) {
    ctx->metrics->tokens(record.model, "completion",
                         static_cast<double>(*record.completion_tokens));
  }
  if (!log::enabled(log::Level::info)) {
    return;  // the record below costs more than the rest of a request's bookkeeping
  }
  log::info(
      "request",
      {{"request_id", writer.request_id()},
       {"model", record.model},
       {"endpoint", record.endpoint},
       {"replica", record.replica},
       {"status", writer.status()},
       {"outcome", record.outcome},
       {"attempts", record.attempts},
       {"queue_wait_ms", ms(record.queue_wait)},
       {"ttfb_ms", ttfb},
       {"duration_ms", ms(now - start)},
       {"prompt_tokens",
        record.prompt_tokens ? nlohmann::json(*record.prompt_tokens) : nlohmann::json(nullptr)},
       {"completion_tokens", record.completion_tokens ? nlohmann::json(*record.completion_tokens)
                                                      : nlohmann::json(nullptr)}});
}

// The public routes, judged from the head before any body byte is read.
std::optional<net::ErrorReply> check_head(const ProxyContext* ctx, const net::Request& head) {
  const bool authorized =
      ctx->api_keys.empty() || ctx->api_keys.matches(head[http::field::authorization]);
  const std::string_view method(head.method_string().data(), head.method_string().size());
  const std::string_view target(head.target().data(), head.target().size());
  return route_public(method, target_path(target), authorized).refusal;
}

net::SessionLimits session_limits(const ProxyContext* ctx) {
  const auto& server = ctx->configs->current().server;
  net::SessionLimits limits;
  limits.header_limit = kHeaderLimit;
  limits.body_limit = server.max_body_bytes;
  limits.body_limit_key = "server.max_body_bytes";
  limits.timeouts = {server.idle_timeout, server.header_timeout, server.body_timeout};
  limits.write_timeout = server.write_timeout;
  limits.pipeline_cap = kPipelineCap;
  return limits;
}

// Serves one request whose head check_head let through; returns whether the connection may
// carry another.
asio::awaitable<bool> handle_request(ProxyContext* ctx, net::ServerRequest r) {
  const auto start = Clock::now();
  // This request's configuration, kept to its end whatever a reload does meanwhile.
  const std::shared_ptr<const config::Config> config = ctx->configs->snapshot();
  ClientWriter& writer = *r.writer;
  const net::Request* request = r.request;
  RequestRecord record;

  const std::string_view target(request->target().data(), request->target().size());
  const std::string_view path = target_path(target);
  record.endpoint = std::string(path);
  const std::string_view method(request->method_string().data(), request->method_string().size());

  auto finish = [&]() -> bool { return writer.keep_alive() && writer.finished(); };

  const RouteDecision decision = route_public(method, path, true);
  if (!decision.route) {
    co_await writer.send_reply(*decision.refusal);
    co_return finish();
  }
  if (*decision.route == PublicRoute::models) {
    auto data = nlohmann::json::array();
    for (const auto& model : config->models) {
      data.push_back(model_object(model.name));
    }
    nlohmann::json list;
    list["object"] = "list";
    list["data"] = std::move(data);
    co_await writer.send_full(200, "application/json", list.dump());
    co_return finish();
  }
  if (*decision.route == PublicRoute::model) {
    std::string id(path.substr(11));
    for (const auto& model : config->models) {
      if (model.name == id) {
        co_await writer.send_full(200, "application/json", model_object(model.name).dump());
        co_return finish();
      }
    }
    co_await writer.send_error(404, "the model '" + id + "' does not exist", "model_not_found");
    co_return finish();
  }

  auto inspected = openai::inspect_request((*request)[http::field::content_type], request->body());
  if (auto* error = std::get_if<openai::InspectError>(&inspected)) {
    record.outcome = "bad_request";
    co_await writer.send_error(static_cast<unsigned>(error->status), error->message, error->code,
                               {}, error->param);
    log_request(ctx, writer, record, start);
    co_return finish();
  }
  auto info = std::get<openai::RequestInfo>(inspected);
  record.model = info.model;
  if (!ctx->broker->scheduler().has_model(info.model)) {
    // Not a label value: clients choose this string, metrics must stay bounded.
    record.model.clear();
    record.outcome = "model_not_found";
    co_await writer.send_error(404, "the model '" + info.model + "' does not exist",
                               "model_not_found");
    log_request(ctx, writer, record, start);
    co_return finish();
  }

  // The client may vanish at any time (watch_client); streamed requests get keep-alive comments
  // while they wait. Whichever ends first cancels the others.
  r.conn->expires_never();
  const auto interval = config->routing.keepalive_interval;
  bool client_gone = false;
  if (info.stream && interval.count() > 0) {
    auto done = co_await (net::watch_client(r) ||
                          proxy_flow(ctx, config.get(), request, &info, &writer, &record) ||
                          keepalive_loop(&writer, interval));
    client_gone = done.index() == 0;
  } else {
    auto done = co_await (net::watch_client(r) ||
                          proxy_flow(ctx, config.get(), request, &info, &writer, &record));
    client_gone = done.index() == 0;
  }
  if (client_gone) {
    record.outcome = "client_gone";
  }
  log_request(ctx, writer, record, start);
  co_return !client_gone && finish();
}

}  // namespace

net::SessionHooks public_session_hooks(ProxyContext* ctx) {
  net::SessionHooks hooks;
  hooks.listener = "public";
  hooks.limits = [ctx] { return session_limits(ctx); };
  hooks.check_head = [ctx](const net::Request& head) { return check_head(ctx, head); };
  hooks.handle = [ctx](net::ServerRequest r) { return handle_request(ctx, r); };
  hooks.count = [ctx](std::string_view reason) {
    ctx->metrics->session_event("public", std::string(reason));
  };
  hooks.id_rng = &id_rng();
  hooks.tracker = ctx->sessions;
  return hooks;
}

}  // namespace fg::proxy
