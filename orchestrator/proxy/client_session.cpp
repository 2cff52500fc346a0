#include "orchestrator/proxy/client_session.hpp"

#include <array>
#include <random>

#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "common/log/log.hpp"
#include "common/net/http_io.hpp"
#include "common/net/http_session.hpp"
#include "common/net/off_thread.hpp"
#include "common/openai/errors.hpp"
#include "common/openai/inspect.hpp"
#include "common/openai/prompt_blocks.hpp"
#include "common/util/duration.hpp"
#include "common/util/json.hpp"
#include "orchestrator/batch/batch_service.hpp"
#include "orchestrator/fleet/fleet_manager.hpp"
#include "orchestrator/metrics/metrics.hpp"
#include "orchestrator/proxy/client_writer.hpp"
#include "orchestrator/proxy/public_routes.hpp"
#include "orchestrator/proxy/upstream.hpp"
#include "orchestrator/scheduling/routing_options.hpp"

namespace fg::proxy {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kHeaderLimit = 16 * 1024;
// A client's priority for this request (docs/routing.md): an integer in [-1000, 1000].
constexpr std::string_view kPriorityHeader = "x-fleetgate-priority";
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

// What one request did, for its log line. Views of strings that outlive the request (the
// route's, the request's RequestInfo) and of literals: a held stream keeps this in its frame.
struct RequestRecord {
  std::string_view model;     // empty when it is not a label value (an unknown model)
  std::string_view endpoint;  // the route's path
  std::string_view api;       // the route's api label (ProxiedRoute::api_label)
  std::string replica;
  unsigned attempts = 0;
  Clock::duration queue_wait{};
  std::optional<std::uint64_t> prompt_tokens;
  std::optional<std::uint64_t> completion_tokens;
  std::string_view outcome = "ok";
};

// How a request is answered when no replica's answer was relayed: one place, so that every way
// out of run_attempts leaves the client exactly one terminal answer (an error response, or an
// error event ending a stream already begun). Built outside coroutines (GCC 12 and braced lists).
struct Ending {
  unsigned status = 502;
  std::string message;
  std::string code = "upstream_error";
  std::vector<net::Header> headers;
  std::string_view outcome = "upstream_failed";
};

Ending deadline_ending(const config::RoutingConfig& routing) {
  Ending e;
  e.status = 504;
  e.message = "the request did not complete within routing.request_timeout (" +
              format_duration(routing.request_timeout) + ")";
  e.code = "request_timeout";
  e.outcome = "request_timeout";
  return e;
}

// The queue did not bind the request to a replica.
Ending queue_ending(const AcquireResult& acquired, const std::string& model, bool deadline_first,
                    const config::RoutingConfig& routing) {
  Ending e;
  switch (acquired.error) {
    case AcquireError::shed:
      e.status = 503;
      e.message = "every replica of model '" + model +
                  "' is busy and the request's priority is sheddable; retry later";
      e.code = "shed";
      e.headers = retry_after_headers(
          std::to_string(std::max<std::int64_t>(1, acquired.retry_after.count())));
      e.outcome = "shed";
      break;
    case AcquireError::queue_full:
      e.status = 429;
      e.message = "the queue for model '" + model + "' is full; retry later";
      e.code = "queue_full";
      e.headers = retry_after_headers("1");
      e.outcome = "queue_full";
      break;
    case AcquireError::timeout:
      if (deadline_first) {
        return deadline_ending(routing);
      }
      e.status = 503;
      e.message = "no replica of model '" + model + "' became free within routing.queue_timeout";
      e.code = "queue_timeout";
      e.headers = retry_after_headers("5");
      e.outcome = "queue_timeout";
      break;
    case AcquireError::unknown_model:
    case AcquireError::none:
    case AcquireError::cancelled:
      e.status = 404;
      e.message = "the model '" + model + "' does not exist";
      e.code = "model_not_found";
      e.outcome = "model_not_found";
      break;
  }
  return e;
}

// The last attempt failed and the retry rule says fail.
Ending failure_ending(const ExchangeResult& last, const FailedAttempt& f, unsigned attempts,
                      const config::RoutingConfig& routing) {
  if (f.deadline_passed || f.error == UpstreamError::deadline) {
    return deadline_ending(routing);
  }
  const std::string kind(to_string(f.error));
  Ending e;
  if (f.content_sent) {
    e.message = "the replica failed in the middle of the stream (" +
                (last.detail.empty() ? kind : "it " + last.detail) + ")";
    e.outcome = "upstream_failed_mid_stream";
    return e;
  }
  std::string what;
  switch (f.error) {
    case UpstreamError::busy:
      // Busy everywhere: 503 with Retry-After, as a phone says it.
      e.status = 503;
      e.headers.emplace_back("Retry-After", last.retry_after.empty() ? "5" : last.retry_after);
      what = "answered HTTP " + std::to_string(last.upstream_status);
      break;
    case UpstreamError::http_5xx:
      what = "answered HTTP " + std::to_string(last.upstream_status);
      break;
    case UpstreamError::timeout:
      e.status = 504;
      what = "timed out";
      break;
    default:
      what = last.detail.empty() ? "failed (" + kind + ")" : last.detail;
      break;
  }
  e.message = "the request failed on " + std::to_string(attempts) +
              " replica attempt(s); the last replica " + what;
  return e;
}

Ending left_fleet_ending(unsigned attempts) {
  Ending e;
  e.message = "the request failed on " + std::to_string(attempts) +
              " replica attempt(s); the last replica left the fleet";
  return e;
}

// Per-replica outcome label (fleetgate_replica_requests_total).
std::string_view replica_outcome(const FailedAttempt& f) {
  if (f.content_sent) {
    return "failed_mid_stream";
  }
  return f.error == UpstreamError::busy ? "busy" : "error";
}

// Counts a failed attempt: metrics, passive health, the log.
void note_failure(ProxyContext* ctx, const config::Config* config, fleet::Replica& replica,
                  const ExchangeResult& result, const FailedAttempt& f, const RetryDecision& d,
                  const ClientWriter& writer, const std::string& model) {
  if (d.action == RetryAction::retry_fresh_connection) {
    // A keep-alive connection the replica had closed: the connection's failure, not its.
    log::debug("stale pooled connection, sending again on a new one",
               {{"request_id", writer.request_id()}, {"replica", replica.name}});
    return;
  }
  if (d.counts_against_replica) {
    ++replica.failures;
    ctx->fleet->traffic_failure(replica.id);
  }
  ctx->metrics->upstream_error(model, std::string(to_string(f.error)));
  if (config->metrics.per_replica) {
    ctx->metrics->replica_request(replica.model, replica.name, replica_outcome(f));
  }
  log::info("upstream attempt failed", {{"request_id", writer.request_id()},
                                        {"replica", replica.name},
                                        {"error", to_string(f.error)},
                                        {"upstream_status", result.upstream_status}});
}

// A relayed answer: passive health, throughput for the admin API, per-replica metrics.
void note_done(ProxyContext* ctx, const config::Config* config, fleet::Replica& replica,
               const ExchangeResult& result, Clock::duration took) {
  if (result.stats.completion_tokens) {
    // Recent throughput: completion tokens over the whole exchange, smoothed.
    double secs = std::chrono::duration<double>(took).count();
    if (secs > 0) {
      double rate = static_cast<double>(*result.stats.completion_tokens) / secs;
      auto& r = replica.tokens_per_second;
      r = r == 0 ? rate : 0.8 * r + 0.2 * rate;
    }
  }
  ctx->fleet->traffic_success(replica.id);
  if (config->metrics.per_replica) {
    ctx->metrics->replica_request(replica.model, replica.name, "ok");
  }
}

// What a relayed answer tells the scheduler (once per grant): the usage and llama.cpp timings
// the replica reported (the stream's last events included), and the gateway's own times since
// the grant. Anything but a 200 teaches nothing.
scheduling::Completion completion_of(const ExchangeResult& result,
                                     std::optional<std::uint32_t> max_tokens,
                                     const SlotLease& lease, const ClientWriter& writer,
                                     bool stream) {
  scheduling::Completion c = scheduling::completion_from_stats(result.stats);
  c.ok = result.upstream_status == 200;
  // The answer's finish reason says whether max_tokens cut it (completion_from_stats); an
  // answer that says none and is as long as max_tokens most likely was.
  if (!result.stats.truncated) {
    c.truncated = max_tokens && c.completion_tokens && *c.completion_tokens >= *max_tokens;
  }
  const auto now = Clock::now();
  c.duration = now - lease.granted_at();
  if (stream) {
    if (auto first = writer.first_content_at(); first && *first >= lease.granted_at()) {
      c.first_token_after = *first - lease.granted_at();
    }
  }
  return c;
}

// What a proxied request keeps from its inspection to its end.
struct Proxied {
  net::Request* request = nullptr;  // the client's: its target and body go to the replica
  openai::RequestInfo info;
  // What only an attempt needs: dropped once content reached the client, since no retry can
  // follow then (retry_decision). A held stream kept it to its end: the request's head and body
  // (the whole prompt, often kilobytes of chat history), the body with usage added, the
  // scheduler's description (~0.2 KiB of the frame, and the prompt's block hashes).
  struct Attempts {
    scheduling::Request described;  // what the scheduler is told: band, tenant, prompt blocks
    // The body with stream_options.include_usage added (set when the gateway asks for usage).
    std::optional<std::string> usage_body;
  };
  std::unique_ptr<Attempts> attempts = std::make_unique<Attempts>();
  std::optional<std::uint32_t> max_tokens;  // the scheduler's, for the completion it learns from

  void release_attempts() {
    net::Request released;  // swapped, not assigned: a std::string moved into keeps its buffer
    std::swap(*request, released);
    attempts.reset();
  }
};

// One attempt's way through the queue: the grant, or (empty lease) the ending when none came
// (nullptr: the client left). Plain functions around the queue's one wait, so that a request
// granted at once, the usual case, makes no coroutine frame here: the next frame made would
// inherit that block from Asio's frame cache and keep it while the stream lasts.
struct QueueStep {
  QueueTicket queued;  // set: wait for the grant (wait_for_slot)
  Clock::duration wait{};
  bool deadline_first = false;  // the request's deadline comes before routing.queue_timeout
};

SlotLease take_acquired(ProxyContext* ctx, const config::Config* config, const std::string& model,
                        AcquireResult acquired, bool deadline_first, RequestRecord* record,
                        std::unique_ptr<Ending>* ending) {
  record->queue_wait += acquired.waited;
  switch (acquired.error) {
    case AcquireError::none:
      return std::move(acquired.lease);
    case AcquireError::cancelled:
      record->outcome = "client_gone";
      ctx->metrics->queue_rejection(model, "client_gone");
      return SlotLease{};
    case AcquireError::queue_full:
      ctx->metrics->queue_rejection(model, "full");
      break;
    case AcquireError::shed:
      ctx->metrics->request_shed(model);
      break;
    case AcquireError::timeout:
      ctx->metrics->queue_rejection(model, "timeout");
      break;
    case AcquireError::unknown_model:
      break;
  }
  *ending =
      std::make_unique<Ending>(queue_ending(acquired, model, deadline_first, config->routing));
  return SlotLease{};
}

SlotLease try_slot(ProxyContext* ctx, const config::Config* config, const UpstreamRequest* up,
                   const Proxied* p, const std::vector<ReplicaId>& tried, RequestRecord* record,
                   std::unique_ptr<Ending>* ending, QueueStep* step) {
  const auto& routing = config->routing;
  const auto left = up->deadline - Clock::now();
  if (left <= Clock::duration::zero()) {
    *ending = std::make_unique<Ending>(deadline_ending(routing));
    return SlotLease{};
  }
  // The queue wait is clipped to what is left of the request's deadline.
  step->deadline_first = left < Clock::duration(routing.queue_timeout);
  step->wait = step->deadline_first ? left : Clock::duration(routing.queue_timeout);
  // Attempts are still there: an attempt follows only while no content reached the client.
  scheduling::Request request = p->attempts->described;
  request.exclude = tried;
  AcquireStart start = ctx->broker->try_acquire(up->info->model, std::move(request));
  if (start.queued) {
    step->queued = std::move(start.queued);
    return SlotLease{};
  }
  return take_acquired(ctx, config, up->info->model, std::move(start.result), step->deadline_first,
                       record, ending);
}

asio::awaitable<SlotLease> wait_for_slot(ProxyContext* ctx, const config::Config* config,
                                         const UpstreamRequest* up, QueueStep* step,
                                         RequestRecord* record, std::unique_ptr<Ending>* ending) {
  AcquireResult acquired = co_await ctx->broker->wait_queued(std::move(step->queued), step->wait);
  co_return take_acquired(ctx, config, up->info->model, std::move(acquired), step->deadline_first,
                          record, ending);
}

// Binds the request to a replica (queueing if needed) and relays its answer, retrying as
// retry_decision says. nullptr when an answer was relayed or the client left; otherwise how the
// client must be answered (a pointer: an Ending kept in a held stream's frames would be ~0.1 KiB
// twice, in this frame's result and its caller's).
asio::awaitable<std::unique_ptr<Ending>> run_attempts(ProxyContext* ctx,
                                                      const config::Config* config,
                                                      const UpstreamRequest* up, Proxied* p,
                                                      ClientWriter* writer, RequestRecord* record) {
  const auto& routing = config->routing;
  std::vector<ReplicaId> tried;
  unsigned retries_used = 0;
  ExchangeResult result;
  for (;;) {
    std::unique_ptr<Ending> ending;
    QueueStep step;
    SlotLease lease = try_slot(ctx, config, up, p, tried, record, &ending, &step);
    if (step.queued) {
      lease = co_await wait_for_slot(ctx, config, up, &step, record, &ending);
    }
    if (!lease) {
      co_return ending;
    }
    // Shared: a replica removed meanwhile (reload, DELETE) stays valid until this ends.
    std::shared_ptr<fleet::Replica> replica = ctx->registry->find(lease.replica());
    if (replica == nullptr) {
      // Removed between the grant and now: costs an attempt, so this cannot loop.
      tried.push_back(lease.replica());
      if (retries_used++ >= routing.retries) {
        co_return std::make_unique<Ending>(left_fleet_ending(record->attempts));
      }
      continue;
    }
    ++record->attempts;
    record->replica = replica->name;
    ++replica->requests;
    // One attempt on this slot, plus at most one free retry on a new connection.
    bool fresh_retry_used = false;
    for (;;) {
      const auto exchange_start = Clock::now();
      co_await exchange_into(ctx, config, replica.get(), up, !fresh_retry_used, writer, &result);
      record->prompt_tokens = result.stats.prompt_tokens;
      record->completion_tokens = result.stats.completion_tokens;
      if (result.kind == ExchangeResult::Kind::done) {
        note_done(ctx, config, *replica, result, Clock::now() - exchange_start);
        lease.complete(completion_of(result, p->max_tokens, lease, *writer, up->info->stream));
        co_return nullptr;
      }
      if (result.kind == ExchangeResult::Kind::client_gone) {
        if (config->metrics.per_replica) {
          ctx->metrics->replica_request(replica->model, replica->name, "client_gone");
        }
        record->outcome = "client_gone";
        co_return nullptr;
      }
      FailedAttempt facts = result.failure;
      facts.content_sent = writer->content_started();
      facts.fresh_retry_used = fresh_retry_used;
      facts.attempts_left = retries_used < routing.retries;
      facts.deadline_passed = Clock::now() >= up->deadline;
      const RetryDecision decision = retry_decision(facts);
      note_failure(ctx, config, *replica, result, facts, decision, *writer, up->info->model);
      if (decision.action == RetryAction::retry_fresh_connection) {
        fresh_retry_used = true;
        continue;
      }
      if (decision.action == RetryAction::fail) {
        co_return std::make_unique<Ending>(
            failure_ending(result, facts, record->attempts, routing));
      }
      ++retries_used;
      tried.push_back(replica->id);
      ctx->metrics->retry(up->info->model);
      break;  // the lease is released before the next acquire
    }
  }
}

// Answers the client when no replica's answer was relayed.
asio::awaitable<void> send_ending(ClientWriter* writer, std::unique_ptr<Ending> ending) {
  co_await writer->send_error(ending->status, std::move(ending->message), std::move(ending->code),
                              std::move(ending->headers));
}

// What every attempt of a proxied request sends. routing.request_timeout counts from here: the
// request has been read and checked.
UpstreamRequest upstream_request(const config::Config& config, Proxied* p,
                                 const ProxiedRoute* route) {
  UpstreamRequest up;
  up.client = p->request;
  up.info = &p->info;
  up.api = route->api;
  up.deadline = Clock::now() + config.routing.request_timeout;
  // A stream the gateway asked for usage (inspect_body): stripped again on the way back.
  up.strip_usage = p->attempts->usage_body.has_value();
  up.body = up.strip_usage ? &*p->attempts->usage_body : &p->request->body();
  up.content_started = [p] { p->release_attempts(); };
  return up;
}

void log_request(ProxyContext* ctx, const ClientWriter& writer, const RequestRecord& record,
                 Clock::time_point start) {
  auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  nlohmann::json ttfb = nullptr;
  if (auto first = writer.first_content_at()) {
    ttfb = ms(*first - start);
  }
  const auto now = Clock::now();
  const std::string model(record.model);
  const std::string api(record.api);
  ctx->metrics->request_done(
      model, std::string(record.endpoint), api, writer.status(),
      std::chrono::duration<double>(now - start).count(),
      std::chrono::duration<double>(record.queue_wait).count(),
      writer.first_content_at()
          ? std::chrono::duration<double>(*writer.first_content_at() - start).count()
          : -1.0);
  if (record.prompt_tokens) {
    ctx->metrics->tokens(model, api, "prompt", static_cast<double>(*record.prompt_tokens));
  }
  if (record.completion_tokens) {
    ctx->metrics->tokens(model, api, "completion", static_cast<double>(*record.completion_tokens));
  }
  if (!log::enabled(log::Level::info)) {
    return;  // the record below costs more than the rest of a request's bookkeeping
  }
  log::info(
      "request",
      {{"request_id", writer.request_id()},
       {"model", record.model},
       {"endpoint", record.endpoint},
       {"api", record.api},
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

// The gateway's own keys, as OpenAI clients send them (Authorization: Bearer) or Anthropic's
// (x-api-key).
bool authorized(const ProxyContext* ctx, const net::Request& head) {
  if (ctx->api_keys.empty() || ctx->api_keys.matches(head[http::field::authorization])) {
    return true;
  }
  const auto key = head["x-api-key"];
  return !key.empty() && ctx->api_keys.matches("Bearer " + std::string(key));
}

// The public routes, judged from the head before any body byte is read.
std::optional<net::ErrorReply> check_head(const ProxyContext* ctx, const net::Request& head) {
  const std::string_view method(head.method_string().data(), head.method_string().size());
  const std::string_view target(head.target().data(), head.target().size());
  return route_public(method, target_path(target), authorized(ctx, head)).refusal;
}

// An upload (POST /v1/files) is taken as a stream, straight to storage, within the files' own
// limit (batch.max_file_bytes and room for the multipart framing) instead of
// server.max_body_bytes. check_head has let the head through, so its key is valid.
std::optional<net::StreamedBody> streamed_body(const ProxyContext* ctx, const net::Request& head) {
  if (ctx->batch == nullptr || head.method() != http::verb::post ||
      target_path(std::string_view(head.target().data(), head.target().size())) != "/v1/files") {
    return std::nullopt;
  }
  // held_bytes: what one upload holds while it streams (a 1 MiB storage chunk growing, the piece
  // being read, the read buffer), reserved from server.max_buffered_bytes like a whole body.
  return net::StreamedBody{batch::upload_body_limit(ctx->configs->current().batch),
                           "batch.max_file_bytes and its multipart framing", 3 * 1024 * 1024};
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
  limits.body_budget = ctx->body_budget;
  limits.body_budget_limit = server.max_buffered_bytes;
  limits.body_budget_key = "server.max_buffered_bytes";
  return limits;
}

// The row of a request that route_public lets through to a replica; nullptr for the routes the
// gateway answers itself and for refusals.
const ProxiedRoute* proxied_route_of(const net::Request& request) {
  const std::string_view target(request.target().data(), request.target().size());
  const std::string_view method(request.method_string().data(), request.method_string().size());
  const RouteDecision decision = route_public(method, target_path(target), true);
  if (!decision.route) {
    return nullptr;
  }
  switch (*decision.route) {
    case PublicRoute::models:
    case PublicRoute::model:
    case PublicRoute::files:
    case PublicRoute::batches:
      return nullptr;
    default:
      return &proxied(*decision.route);
  }
}

bool finished(const ClientWriter& writer) {
  return writer.keep_alive() && writer.finished();
}

// The routes the gateway answers itself (the model list, the Files and Batches API) and the
// refusals of route_public. Its own frame: a proxied request's stream never holds it.
asio::awaitable<bool> handle_local(ProxyContext* ctx, net::ServerRequest r,
                                   const config::Config* config) {
  ClientWriter& writer = *r.writer;
  const net::Request* request = r.request;
  const std::string_view target(request->target().data(), request->target().size());
  const std::string_view path = target_path(target);
  const std::string_view method(request->method_string().data(), request->method_string().size());
  const RouteDecision decision = route_public(method, path, true);
  if (!decision.route) {
    co_await writer.send_reply(*decision.refusal);
    co_return finished(writer);
  }
  if (*decision.route == PublicRoute::files || *decision.route == PublicRoute::batches) {
    if (ctx->batch == nullptr) {
      co_await writer.send_error(404, "the Batch API is off on this gateway (batch.enabled)",
                                 "not_found");
      co_return finished(writer);
    }
    co_return co_await ctx->batch->handle(
        r,
        *decision.route == PublicRoute::files ? batch::ApiRoute::files : batch::ApiRoute::batches,
        batch::owner_name(*request, !ctx->api_keys.empty()));
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
    co_return finished(writer);
  }
  // PublicRoute::model
  std::string id(path.substr(11));
  for (const auto& model : config->models) {
    if (model.name == id) {
      co_await writer.send_full(200, "application/json", model_object(model.name).dump());
      co_return finished(writer);
    }
  }
  co_await writer.send_error(404, "the model '" + id + "' does not exist", "model_not_found");
  co_return finished(writer);
}

// How a proxied request refused before routing is answered.
struct Refusal {
  unsigned status = 400;
  std::string message;
  std::string code;
  std::string param;
  std::string_view outcome = "bad_request";
};

// What inspecting a proxied request's body finds: one pass over the body (the request's facts
// and, for expected_finish, its prompt's blocks), and the body with include_usage spliced in when
// the gateway asks a stream for usage. Pure: it runs on the io thread for ordinary bodies and on
// the gateway's work pool for large ones (inspect_off_thread).
struct Inspected {
  std::variant<openai::RequestInfo, openai::InspectError> result;
  openai::PromptBlocks blocks;
  std::optional<std::string> usage_body;
};

// What inspection needs besides the body, read on the io thread. content_type views the
// request's header, which, like the body, nobody touches while inspection runs.
struct InspectAsk {
  openai::Api api{};
  std::string_view content_type;
  // The prompt's block hashes: expected_finish needs them (its prompt-cache model),
  // least_loaded does not, and the scan then skips the hashing.
  bool want_blocks = false;
  std::uint64_t key = 0;   // ProxyContext::prompt_key
  bool add_usage = false;  // a stream whose client did not ask for usage gets it asked
};

InspectAsk inspect_ask(ProxyContext* ctx, const config::Config& config, const ProxiedRoute* route,
                       const net::Request& request) {
  InspectAsk ask;
  ask.api = route->api;
  const auto type = request[http::field::content_type];
  ask.content_type = std::string_view(type.data(), type.size());
  ask.want_blocks = ctx->broker->scheduler().wants_prompt_blocks();
  ask.key = ctx->prompt_key;
  // Streams whose client did not ask for usage: ask the replica anyway (token counts for logs
  // and metrics) and strip it again on the way back.
  ask.add_usage = route->streams && route->adds_stream_usage && config.metrics.request_stream_usage;
  return ask;
}

void inspect_body(const InspectAsk& ask, std::string_view body, Inspected* out) {
  out->result = openai::inspect_request(ask.api, ask.content_type, body,
                                        ask.want_blocks ? &out->blocks : nullptr, ask.key);
  const auto* info = std::get_if<openai::RequestInfo>(&out->result);
  if (ask.add_usage && info != nullptr && info->stream && !info->include_usage) {
    // Spliced by bytes where inspection found the place: no second parse of the body.
    out->usage_body = openai::with_stream_usage(body, *info);
  }
}

// Bodies above net::kOffThreadBody are inspected on the work pool (ProxyContext::off_thread). On
// the io thread a 4 MiB body held every other stream's next event back by 11-13 ms
// (docs/benchmarks.md, the bigbody bench before this); a body of 64 KiB costs 1/64 of that and
// stays here, where it needs no hand-over to another thread and back (two wake-ups).
using net::kOffThreadBody;

// Inspects a large body off the io thread. The request is not touched meanwhile: it is not yet
// queued, and nothing reads its body until this returns. Only pointers go in: GCC 12 destroyed a
// temporary holding a std::string built in the caller's co_await expression twice (a double
// free), so the work is built here, named.
asio::awaitable<std::unique_ptr<Inspected>> inspect_off_thread(ProxyContext* ctx,
                                                               const config::Config* config,
                                                               const ProxiedRoute* route,
                                                               const net::Request* request) {
  auto work = [ask = inspect_ask(ctx, *config, route, *request), body = &request->body()] {
    auto out = std::make_unique<Inspected>();
    inspect_body(ask, *body, out.get());
    return out;
  };
  co_return co_await ctx->off_thread->run(std::move(work));
}

// Inspects a proxied request into *p (or takes what inspect_off_thread found); what to answer
// when it is refused. A plain function: as a coroutine its frame (928 bytes, with the refusals'
// strings) was freed just before the attempts' frame was made, and Asio's frame cache hands a
// freed block to the next frame that fits, so every held stream kept 928 bytes where the
// attempts need 592.
std::unique_ptr<Refusal> admit(ProxyContext* ctx, const config::Config& config,
                               const ProxiedRoute* route, Proxied* p, RequestRecord* record,
                               std::unique_ptr<Inspected> found) {
  const net::Request& request = *p->request;
  Inspected here;
  if (!found) {
    inspect_body(inspect_ask(ctx, config, route, request), request.body(), &here);
  }
  Inspected& in = found ? *found : here;
  const bool want_blocks = ctx->broker->scheduler().wants_prompt_blocks();
  openai::PromptBlocks& blocks = in.blocks;
  auto& inspected = in.result;
  if (auto* error = std::get_if<openai::InspectError>(&inspected)) {
    auto refusal = std::make_unique<Refusal>();
    refusal->status = static_cast<unsigned>(error->status);
    refusal->message = std::move(error->message);
    refusal->code = std::move(error->code);
    refusal->param = std::move(error->param);
    return refusal;
  }
  p->info = std::move(std::get<openai::RequestInfo>(inspected));
  openai::RequestInfo& info = p->info;
  if (!route->streams) {
    // Answered whole whatever the body says (a token count, a ranking, embeddings).
    info.stream = false;
    info.include_usage = false;
  }
  if (!ctx->broker->scheduler().has_model(info.model)) {
    // Not a label value: clients choose this string, metrics must stay bounded.
    auto refusal = std::make_unique<Refusal>();
    refusal->status = 404;
    refusal->message = "the model '" + info.model + "' does not exist";
    refusal->code = "model_not_found";
    refusal->outcome = "model_not_found";
    return refusal;
  }
  record->model = info.model;

  // What the scheduler is told: band, tenant, and (expected_finish) the prompt's blocks.
  scheduling::Request& described = p->attempts->described;
  const ApiKeyInfo* key = api_key_of(ctx, request);
  if (key != nullptr) {
    described.tenant = key->name;
    described.priority = key->priority;
  }
  if (const auto header = request[kPriorityHeader]; !header.empty()) {
    const auto priority =
        scheduling::parse_priority(std::string_view(header.data(), header.size()));
    if (!priority) {
      auto refusal = std::make_unique<Refusal>();
      refusal->message = std::string("the header ") + std::string(kPriorityHeader) +
                         " must be a whole number between -1000 and 1000";
      refusal->code = "invalid_priority";
      refusal->param = std::string(kPriorityHeader);
      return refusal;
    }
    described.priority = *priority;
  }
  described.sheddable = described.priority && scheduling::sheddable_priority(*described.priority);
  if (want_blocks) {
    described.prompt_blocks = std::move(blocks.hashes);
    described.prompt_bytes = blocks.bytes;
    described.max_tokens = info.max_tokens;
    p->max_tokens = info.max_tokens;
  }
  p->attempts->usage_body = std::move(in.usage_body);
  return nullptr;
}

asio::awaitable<void> send_refusal(ClientWriter* writer, std::unique_ptr<Refusal> refusal) {
  co_await writer->send_error(refusal->status, std::move(refusal->message),
                              std::move(refusal->code), {}, std::move(refusal->param));
}

// Serves one request whose head check_head let through; returns whether the connection may
// carry another. A proxied request may be served for minutes (a held stream), so this frame and
// those below it keep only what the request needs to its end.
asio::awaitable<bool> handle_request(ProxyContext* ctx, net::ServerRequest r) {
  const auto start = Clock::now();
  // This request's configuration, kept to its end whatever a reload does meanwhile.
  const std::shared_ptr<const config::Config> config = ctx->configs->snapshot();
  const ProxiedRoute* route = proxied_route_of(*r.request);
  if (route == nullptr) {
    co_return co_await handle_local(ctx, r, config.get());
  }
  RequestRecord record;
  record.endpoint = route->path;
  record.api = route->api_label;
  Proxied p;
  p.request = r.request;
  std::unique_ptr<Inspected> found;
  if (r.request->body().size() > kOffThreadBody && ctx->off_thread != nullptr) {
    found = co_await inspect_off_thread(ctx, config.get(), route, r.request);
  }
  if (auto refusal = admit(ctx, *config, route, &p, &record, std::move(found))) {
    record.outcome = refusal->outcome;
    co_await send_refusal(r.writer, std::move(refusal));
    log_request(ctx, *r.writer, record, start);
    co_return finished(*r.writer);
  }

  const UpstreamRequest up = upstream_request(*config, &p, route);

  // The client may vanish at any time; streamed requests get keep-alive comments while they
  // wait. Both are watched beside the flow, which a client that leaves cancels.
  r.conn->expires_never();
  net::ClientWatch watch(r.conn, r.buffer, r.pipeline_cap, r.conn->session_cancel());
  watch.start(ctx->watch_starter);
  if (p.info.stream && config->routing.keepalive_interval.count() > 0) {
    watch.keep_alive(r.writer, config->routing.keepalive_interval);
  }
  std::exception_ptr failure;
  try {
    // Relays a replica's answer, or answers the client itself, exactly once.
    std::unique_ptr<Ending> ending =
        co_await run_attempts(ctx, config.get(), &up, &p, r.writer, &record);
    if (ending) {
      record.outcome = ending->outcome;
      co_await send_ending(r.writer, std::move(ending));
    }
  } catch (...) {
    // A flow the watch cancelled ends here with operation_aborted (Asio throws at the first
    // co_await after a cancellation): expected, like any end of a request whose client left.
    failure = std::current_exception();
  }
  watch.stop();
  const bool client_gone = watch.gone();
  if (client_gone) {
    // Serve on (the log, the close) from a clean state: no co_await would work otherwise.
    co_await asio::this_coro::reset_cancellation_state();
    record.outcome = "client_gone";
  }
  co_await watch.settled();
  if (failure && !client_gone) {
    std::rethrow_exception(failure);
  }
  log_request(ctx, *r.writer, record, start);
  co_return !client_gone && finished(*r.writer);
}

}  // namespace

const ApiKeyInfo* api_key_of(const ProxyContext* ctx, const net::Request& head) {
  if (ctx->api_keys.empty() || ctx->key_info.empty()) {
    return nullptr;
  }
  if (ctx->key_info.size() == 1) {
    // The head check let the request in, so it carries the one key: no need to hash again.
    return &ctx->key_info.front();
  }
  std::optional<std::size_t> index = ctx->api_keys.match(head[http::field::authorization]);
  if (!index) {
    const auto key = head["x-api-key"];
    if (!key.empty()) {
      index = ctx->api_keys.match("Bearer " + std::string(key));
    }
  }
  if (!index || *index >= ctx->key_info.size()) {
    return nullptr;
  }
  return &ctx->key_info[*index];
}

net::SessionHooks public_session_hooks(ProxyContext* ctx) {
  net::SessionHooks hooks;
  hooks.listener = "public";
  hooks.limits = [ctx] { return session_limits(ctx); };
  hooks.check_head = [ctx](const net::Request& head) { return check_head(ctx, head); };
  hooks.error_api = [](const net::Request& head) {
    return error_api_for_path(
        target_path(std::string_view(head.target().data(), head.target().size())));
  };
  hooks.stream_body = [ctx](const net::Request& head) { return streamed_body(ctx, head); };
  hooks.handle = [ctx](net::ServerRequest r) { return handle_request(ctx, r); };
  hooks.count = [ctx](std::string_view reason) {
    ctx->metrics->session_event("public", std::string(reason));
  };
  hooks.id_rng = &id_rng();
  hooks.tracker = ctx->sessions;
  hooks.off_thread = ctx->off_thread;
  return hooks;
}

}  // namespace fg::proxy
