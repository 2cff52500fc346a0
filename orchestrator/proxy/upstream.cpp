#include "orchestrator/proxy/upstream.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <span>

#include <boost/asio/ssl/error.hpp>
#include <boost/beast/http/error.hpp>

#include "common/log/log.hpp"
#include "common/openai/errors.hpp"
#include "common/openai/sse.hpp"

namespace fg::proxy {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;

namespace {

// Small reads keep memory per open stream low; whole answers grow their body as needed.
constexpr std::size_t kReadChunk = 4 * 1024;
constexpr std::size_t kHeaderLimit = 64 * 1024;
// An error answer is a short JSON document; a longer one is a broken replica.
constexpr std::uint64_t kMaxErrorBody = 1024 * 1024;
// 100, 102 and 103 may each come before the final answer; a replica sending more is broken.
constexpr int kMaxInterimAnswers = 16;
// Idle pooled connections older than this are not reused (llama.cpp's server closes idle
// keep-alive connections after 5 s; a tunnel may close them sooner or later).
constexpr auto kMaxPooledIdle = std::chrono::seconds(4);

std::string upstream_head(const ProxyContext& ctx, const fleet::Replica& replica,
                          const net::Request& request, std::size_t body_size,
                          const openai::RequestInfo& info, std::string_view request_id) {
  std::string head;
  head.reserve(512);
  head += "POST ";
  head += replica.url.path_prefix;
  head.append(request.target().data(), request.target().size());
  head += " HTTP/1.1\r\nHost: ";
  head += replica.url.host_header();
  head += "\r\nContent-Type: application/json\r\nContent-Length: ";
  head += std::to_string(body_size);
  head += "\r\nAccept: ";
  head += info.stream ? "text/event-stream" : "application/json";
  if (!ctx.upstream_authorization.empty()) {
    head += "\r\nAuthorization: ";
    head += ctx.upstream_authorization;
  }
  head += "\r\nX-Request-Id: ";
  head += request_id;
  head += "\r\nUser-Agent: fleetgate/" FLEETGATE_VERSION "\r\n";
  head += "\r\n";
  return head;
}

// A per-operation timeout clipped to what is left of the request's deadline.
Clock::duration clipped(Clock::duration timeout, Clock::time_point deadline) {
  return std::clamp(deadline - Clock::now(), Clock::duration::zero(), timeout);
}

// A timeout that fired once the request's deadline had passed is the request's own.
UpstreamError timed_out(Clock::time_point deadline) {
  return Clock::now() >= deadline ? UpstreamError::deadline : UpstreamError::timeout;
}

UpstreamError classify(const net::error_code& ec, Clock::time_point deadline) {
  if (ec == boost::beast::error::timeout) {
    return timed_out(deadline);
  }
  if (ec.category() == asio::error::get_ssl_category() ||
      ec == asio::ssl::error::stream_truncated) {
    return UpstreamError::tls;
  }
  if (ec.category() == boost::beast::http::make_error_code(http::error::bad_version).category()) {
    return UpstreamError::protocol;
  }
  return UpstreamError::reset;
}

ExchangeResult& fail(ExchangeResult& result, Phase phase, UpstreamError error,
                     std::string detail = {}) {
  result.kind = ExchangeResult::Kind::failed;
  result.failure.phase = phase;
  result.failure.error = error;
  result.detail = std::move(detail);
  return result;
}

void reset_parser(std::optional<net::ResponseParser>* parser) {
  parser->emplace();
  (*parser)->header_limit(kHeaderLimit);
  (*parser)->eager(true);
  // Bodies are taken piece by piece and capped here, by kind of answer.
  (*parser)->body_limit(boost::none);
}

// ---- pool checkout and return ----

struct Checkout {
  std::unique_ptr<net::Conn> conn;
  bool pooled = false;
  UpstreamError error = UpstreamError::none;
};

// A clean idle pooled connection (Registry::take_idle drops those with unread bytes or closed by
// the replica), else a new one within upstream.connect_timeout.
asio::awaitable<Checkout> checkout(ProxyContext* ctx, fleet::Replica* replica, bool allow_pooled,
                                   Clock::duration connect_timeout, Clock::time_point deadline) {
  Checkout out;
  if (allow_pooled) {
    out.conn = ctx->registry->take_idle(*replica, kMaxPooledIdle, Clock::now());
    if (out.conn) {
      out.pooled = true;
      co_return out;
    }
  }
  auto connected =
      co_await net::connect_to(replica->url, ctx->upstream_tls, clipped(connect_timeout, deadline));
  if (!connected.conn) {
    out.error = connected.failure == net::ConnectFailure::tls       ? UpstreamError::tls
                : connected.failure == net::ConnectFailure::timeout ? timed_out(deadline)
                                                                    : UpstreamError::connect;
    log::debug("upstream connect failed",
               {{"replica", replica->name}, {"error", connected.ec.message()}});
    co_return out;
  }
  out.conn = std::move(connected.conn);
  co_return out;
}

// Keeps the connection for the next request when the answer ended cleanly and nothing of a
// later answer was read with it.
void give_back(ProxyContext* ctx, fleet::Replica* replica, std::unique_ptr<net::Conn> conn,
               const net::ResponseParser& parser, const boost::beast::flat_buffer& buffer,
               std::size_t max_idle) {
  if (parser.is_done() && parser.keep_alive() && buffer.size() == 0) {
    conn->expires_never();
    ctx->registry->give_back(*replica, std::move(conn), max_idle, Clock::now());
  }
}

// ---- reading the answer ----

// Parses what is buffered into parser; protocol when it is not a valid answer.
UpstreamError parse_buffered(boost::beast::flat_buffer* buffer, net::ResponseParser* parser) {
  while (buffer->size() > 0 && !parser->is_done()) {
    net::error_code pec;
    auto used = parser->put(buffer->data(), pec);
    buffer->consume(used);
    if (pec == http::error::need_more) {
      break;
    }
    if (pec) {
      return UpstreamError::protocol;
    }
    if (used == 0) {
      break;
    }
  }
  return UpstreamError::none;
}

// One read buffer for every relay of the thread (the gateway runs one io thread). A held stream
// waits with Conn::wait_readable and owns no read buffer: each had a 4 KiB one (16 KiB before
// that), most of a held stream's memory after its coroutine frames. Safe without locks: it is
// filled and handed to the parser with no co_await in between.
std::span<char> relay_read_buffer() {
  static thread_local std::array<char, 16 * 1024> buffer;
  return buffer;
}

// Feeds bytes to the parser as far as it takes them now; what it cannot take yet (a head or a
// chunk-size line split between reads) is kept in *pending.
UpstreamError parse_bytes(std::string_view bytes, boost::beast::flat_buffer* pending,
                          net::ResponseParser* parser) {
  while (!bytes.empty() && !parser->is_done()) {
    net::error_code pec;
    const std::size_t used = parser->put(asio::buffer(bytes.data(), bytes.size()), pec);
    bytes.remove_prefix(used);
    if (pec == http::error::need_more || (!pec && used == 0)) {
      break;
    }
    if (pec) {
      return UpstreamError::protocol;
    }
  }
  if (!bytes.empty()) {
    pending->commit(asio::buffer_copy(pending->prepare(bytes.size()), asio::buffer(bytes)));
  }
  return UpstreamError::none;
}

// Reads more of the answer into the parser within timeout (clipped to the deadline). May return
// without progress (a wake-up with nothing to read): callers loop until the parser is done.
asio::awaitable<UpstreamError> read_more(net::Conn* conn, boost::beast::flat_buffer* buffer,
                                         net::ResponseParser* parser, Clock::duration timeout,
                                         Clock::time_point deadline) {
  net::error_code rec;
  std::size_t got = 0;
  std::span<char> shared;
  if (conn->can_read_now()) {
    if (buffer->size() == 0) {
      buffer->shrink_to_fit();  // nothing pending: hold no buffer while waiting
    }
    if (auto wec = co_await conn->wait_readable(clipped(timeout, deadline))) {
      co_return classify(wec, deadline);
    }
    shared = relay_read_buffer();
    const net::IoResult now = conn->read_now(asio::buffer(shared.data(), shared.size()));
    rec = now.ec;
    got = now.bytes;
    if (rec == asio::error::would_block) {
      co_return UpstreamError::none;
    }
  } else {
    conn->expires_after(clipped(timeout, deadline));
    auto result = co_await conn->read_some(buffer->prepare(kReadChunk));
    rec = result.ec;
    got = result.bytes;
  }
  if (rec == asio::error::eof || rec == asio::ssl::error::stream_truncated) {
    // Only an answer delimited by the end of the connection may end here.
    net::error_code pec;
    parser->put_eof(pec);
    co_return pec ? UpstreamError::reset : UpstreamError::none;
  }
  if (rec) {
    co_return classify(rec, deadline);
  }
  if (shared.empty()) {
    buffer->commit(got);
    co_return parse_buffered(buffer, parser);
  }
  if (buffer->size() == 0) {
    co_return parse_bytes(std::string_view(shared.data(), got), buffer, parser);
  }
  // Rare: a split head or chunk-size line waits in *buffer; the new bytes join it.
  buffer->commit(asio::buffer_copy(buffer->prepare(got), asio::buffer(shared.data(), got)));
  co_return parse_buffered(buffer, parser);
}

// Reads the head of the final answer within timeout, skipping interim answers (100 Continue,
// 102 Processing, 103 Early Hints: a head and no body each). 101 is refused: the gateway never
// asks for an upgrade.
asio::awaitable<UpstreamError> read_head(net::Conn* conn, boost::beast::flat_buffer* buffer,
                                         std::optional<net::ResponseParser>* parser,
                                         Clock::duration timeout, Clock::time_point deadline,
                                         bool* answer_started) {
  conn->expires_after(clipped(timeout, deadline));
  int interim = 0;
  for (;;) {
    if (buffer->size() > 0) {
      *answer_started = true;
      net::error_code pec;
      buffer->consume((*parser)->put(buffer->data(), pec));
      if (pec && pec != http::error::need_more) {
        co_return UpstreamError::protocol;
      }
    }
    if ((*parser)->is_header_done()) {
      const unsigned status = (*parser)->status();
      if (status >= 200) {
        co_return UpstreamError::none;
      }
      if (status == 101 || ++interim > kMaxInterimAnswers) {
        co_return UpstreamError::protocol;
      }
      reset_parser(parser);
      continue;
    }
    auto [rec, got] = co_await conn->read_some(buffer->prepare(kReadChunk));
    if (rec) {
      co_return classify(rec, deadline);
    }
    buffer->commit(got);
  }
}

// Reads the rest of a whole answer into *body: at most cap bytes.
asio::awaitable<UpstreamError> read_whole_body(net::Conn* conn, boost::beast::flat_buffer* buffer,
                                               net::ResponseParser* parser, std::uint64_t cap,
                                               const config::UpstreamConfig* up,
                                               Clock::time_point deadline, std::string* body) {
  if (parser->declared_length() && *parser->declared_length() > cap) {
    co_return UpstreamError::too_large;
  }
  for (;;) {
    if (body->empty()) {
      *body = parser->take_body();  // the first piece is moved, not copied into a new string
    } else {
      *body += parser->take_body();
    }
    if (body->size() > cap) {
      co_return UpstreamError::too_large;
    }
    if (parser->is_done()) {
      co_return UpstreamError::none;
    }
    auto error = co_await read_more(
        conn, buffer, parser, body->empty() ? up->first_byte_timeout : up->idle_timeout, deadline);
    if (error != UpstreamError::none) {
      co_return error;
    }
  }
}

std::string event_cap_detail(std::uint64_t cap) {
  return "sent a server-sent event longer than upstream.max_event_bytes (" + std::to_string(cap) +
         " bytes)";
}

// ---- relaying ----

// Relays a whole answer (any status, or a non-stream 200) read in full first.
asio::awaitable<ExchangeResult> relay_whole(ProxyContext* ctx, const config::Config* config,
                                            fleet::Replica* replica, const UpstreamRequest* request,
                                            std::unique_ptr<net::Conn> conn,
                                            boost::beast::flat_buffer* buffer,
                                            net::ResponseParser* parser, ClientWriter* writer,
                                            ExchangeResult result) {
  const auto& up = config->upstream;
  const unsigned status = parser->status();
  const std::uint64_t cap =
      status == 200 ? up.max_response_bytes : std::min(kMaxErrorBody, up.max_response_bytes);
  std::string body;
  auto error =
      co_await read_whole_body(conn.get(), buffer, parser, cap, &up, request->deadline, &body);
  if (error == UpstreamError::too_large && status != 200) {
    error = UpstreamError::protocol;  // a huge error answer is a broken replica
  }
  if (error != UpstreamError::none) {
    std::string detail;
    if (error == UpstreamError::too_large) {
      detail = "answered more than upstream.max_response_bytes (" + std::to_string(cap) + " bytes)";
    }
    co_return fail(result, Phase::body, error, std::move(detail));
  }
  give_back(ctx, replica, std::move(conn), *parser, *buffer, up.max_idle_per_replica);

  std::optional<openai::ErrorInfo> replica_error;
  if (status != 200) {
    replica_error = openai::read_error(body);
  }
  if (status == 404 && replica_error && replica_error->code == "model_not_found") {
    // Serving another model than the fleet says: the replica's fault, not the client's.
    co_return fail(result, Phase::body, UpstreamError::model_not_found,
                   "does not serve the model '" + request->info->model + "'");
  }
  if (status == 200) {
    openai::read_stats_from_body(request->api, body, result.stats);
  }
  bool ok;
  if (request->info->stream && writer->head_sent()) {
    // Keep-alive comments already opened a 200 stream: the refusal becomes an error event.
    std::string message = replica_error && !replica_error->message.empty()
                              ? std::move(replica_error->message)
                              : "replica answered HTTP " + std::to_string(status);
    ok = co_await writer->send_error(status, std::move(message), "upstream_error");
  } else {
    std::string content_type = parser->content_type();
    if (status >= 400) {
      // The engines answer every route with OpenAI errors; the client gets its API's shape.
      if (auto reshaped = openai::reshaped_error(request->api, static_cast<int>(status), body)) {
        body = std::move(*reshaped);
        content_type = "application/json";
      }
    }
    ok = co_await writer->send_full(status, std::move(content_type), std::move(body));
  }
  result.kind = ok ? ExchangeResult::Kind::done : ExchangeResult::Kind::client_gone;
  co_return result;
}

// Relays a 200 event stream event by event, each at most upstream.max_event_bytes.
asio::awaitable<ExchangeResult> relay_stream(ProxyContext* ctx, const config::Config* config,
                                             fleet::Replica* replica,
                                             const UpstreamRequest* request,
                                             std::unique_ptr<net::Conn> conn,
                                             boost::beast::flat_buffer* buffer,
                                             net::ResponseParser* parser, ClientWriter* writer,
                                             ExchangeResult result) {
  const auto& up = config->upstream;
  if (!writer->head_sent()) {
    std::string content_type =
        parser->content_type().empty() ? "text/event-stream" : parser->content_type();
    if (!co_await writer->begin_stream(200, std::move(content_type))) {
      result.kind = ExchangeResult::Kind::client_gone;
      co_return result;
    }
  }
  openai::AnswerStats* stats = &result.stats;
  const openai::Api api = request->api;
  openai::SseRelay relay(up.max_event_bytes, request->strip_usage,
                         [stats, api](const openai::SseEvent& event) {
                           openai::read_stats_from_event(api, event, *stats);
                         });
  bool received = false;
  std::string out;
  for (;;) {
    std::string piece = parser->take_body();
    if (!piece.empty()) {
      received = true;
      out.clear();
      const bool within_cap = relay.feed(piece, out);
      // Whole events before an oversized one still go out, so the stream stays well formed.
      // (send_chunk of nothing costs nothing; no co_await inside && for GCC 12.)
      if (!co_await writer->send_chunk(std::move(out))) {
        result.kind = ExchangeResult::Kind::client_gone;
        co_return result;
      }
      if (!within_cap) {
        co_return fail(result, Phase::stream, UpstreamError::protocol,
                       event_cap_detail(up.max_event_bytes));
      }
    }
    if (parser->is_done()) {
      break;
    }
    auto error =
        co_await read_more(conn.get(), buffer, parser,
                           received ? up.idle_timeout : up.first_byte_timeout, request->deadline);
    if (error != UpstreamError::none) {
      // The events completed before the failure still go out; an incomplete one is dropped.
      out.clear();
      relay.feed(parser->take_body(), out);
      co_await writer->send_chunk(std::move(out));
      co_return fail(result, Phase::stream, error);
    }
  }
  if (!co_await writer->send_chunk(relay.finish())) {
    result.kind = ExchangeResult::Kind::client_gone;
    co_return result;
  }
  give_back(ctx, replica, std::move(conn), *parser, *buffer, up.max_idle_per_replica);
  const bool ended = co_await writer->end_stream();
  result.kind = ended ? ExchangeResult::Kind::done : ExchangeResult::Kind::client_gone;
  co_return result;
}

}  // namespace

asio::awaitable<ExchangeResult> exchange(ProxyContext* ctx, const config::Config* config,
                                         fleet::Replica* replica, const UpstreamRequest* request,
                                         bool allow_pooled, ClientWriter* writer) {
  const auto& up = config->upstream;
  const auto deadline = request->deadline;
  ExchangeResult result;
  FailedAttempt& facts = result.failure;

  auto checked = co_await checkout(ctx, replica, allow_pooled, up.connect_timeout, deadline);
  if (!checked.conn) {
    co_return fail(result, Phase::connect, checked.error);
  }
  std::unique_ptr<net::Conn> conn = std::move(checked.conn);
  facts.pooled = checked.pooled;

  const std::string head = upstream_head(*ctx, *replica, *request->client, request->body->size(),
                                         *request->info, writer->request_id());
  conn->expires_after(clipped(up.idle_timeout, deadline));
  auto [wec, written] = co_await conn->write(asio::buffer(head), asio::buffer(*request->body));
  if (wec) {
    co_return fail(result, Phase::send, classify(wec, deadline));
  }
  facts.request_written = true;
  const auto written_at = Clock::now();

  // A long prompt is read before the phone answers anything: first_byte_timeout.
  boost::beast::flat_buffer buffer;
  std::optional<net::ResponseParser> parser;
  reset_parser(&parser);
  auto error = co_await read_head(conn.get(), &buffer, &parser, up.first_byte_timeout, deadline,
                                  &facts.answer_started);
  if (error != UpstreamError::none) {
    facts.since_written = Clock::now() - written_at;
    co_return fail(result, Phase::head, error);
  }
  const unsigned status = parser->status();
  result.upstream_status = status;
  if (status >= 500 || status == 429) {
    // Busy (429/503: all its slots taken, perhaps by another gateway) or broken: another replica
    // may serve it. The connection is dropped rather than drained.
    result.retry_after = parser->retry_after();
    co_return fail(result, Phase::head,
                   status == 429 || status == 503 ? UpstreamError::busy : UpstreamError::http_5xx);
  }
  if (request->info->stream && status == 200) {
    co_return co_await relay_stream(ctx, config, replica, request, std::move(conn), &buffer,
                                    &*parser, writer, std::move(result));
  }
  co_return co_await relay_whole(ctx, config, replica, request, std::move(conn), &buffer, &*parser,
                                 writer, std::move(result));
}

}  // namespace fg::proxy
