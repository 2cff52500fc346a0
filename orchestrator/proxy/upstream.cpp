#include "orchestrator/proxy/upstream.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/deferred.hpp>
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

constexpr auto kDeferredTuple = asio::as_tuple(asio::deferred);
// What a std::string holds without a heap block (15 bytes in libstdc++).
const std::size_t kInlineBytes = std::string().capacity();
// A read's buffer, held for that read only: a TLS one, or a whole answer's on plain TCP (a
// stream's head and events are read into the thread's shared buffer).
constexpr std::size_t kReadChunk = 4 * 1024;
constexpr std::size_t kHeaderLimit = 64 * 1024;
// The most of a request body sent to a replica in one write (send_request).
constexpr std::size_t kBodySlice = 256 * 1024;
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
               const net::ResponseParser& parser, const std::string& pending,
               std::size_t max_idle) {
  if (parser.is_done() && parser.keep_alive() && pending.empty()) {
    conn->expires_never();
    ctx->registry->give_back(*replica, std::move(conn), max_idle, Clock::now());
  }
}

// ---- reading the answer ----

// One read buffer for every stream of the thread (the gateway runs one io thread). A stream's
// relay waits with Conn::wait_readable and owns no read buffer: each held a 4 KiB one, which it
// kept for its whole life (the parser leaves the CRLF that ends a chunk until the next chunk's
// size line arrives, so the buffer was never empty when the relay shrank it). Safe without locks:
// it is filled and handed to the parser with no co_await in between.
std::span<char> shared_read_buffer() {
  static thread_local std::array<char, 16 * 1024> buffer;
  return buffer;
}

// Feeds bytes to the parser as far as it takes them now; how many it took. *error: protocol
// when they are not a valid answer.
std::size_t put_all(std::string_view bytes, net::ResponseParser* parser, UpstreamError* error) {
  std::size_t used = 0;
  while (used < bytes.size() && !parser->is_done()) {
    net::error_code pec;
    const std::size_t n = parser->put(asio::buffer(bytes.data() + used, bytes.size() - used), pec);
    used += n;
    if (pec == http::error::need_more || (!pec && n == 0)) {
      break;
    }
    if (pec) {
      *error = UpstreamError::protocol;
      break;
    }
  }
  return used;
}

// Feeds bytes to the parser as far as it takes them now. What it cannot take yet (a head or a
// chunk-size line split between reads, the CRLF ending a chunk) waits in *pending, which is
// almost always a few bytes (std::string holds up to 15 without allocating) and never keeps a
// heap block once short.
UpstreamError parse_bytes(std::string_view bytes, std::string* pending,
                          net::ResponseParser* parser) {
  UpstreamError error = UpstreamError::none;
  constexpr std::size_t kJoin = 128;
  if (!pending->empty() && pending->size() < kJoin / 2) {
    // Mostly the CRLF that ends the previous chunk, which the parser takes only with the next
    // chunk-size line: joined on the stack with the start of the new bytes instead of copying
    // the whole piece into *pending (a heap block and a copy per event).
    std::array<char, kJoin> join;
    const std::size_t old = pending->size();
    const std::size_t take = std::min(bytes.size(), join.size() - old);
    std::memcpy(join.data(), pending->data(), old);
    std::memcpy(join.data() + old, bytes.data(), take);
    const std::string_view joined(join.data(), old + take);
    const std::size_t used = put_all(joined, parser, &error);
    if (error != UpstreamError::none) {
      return error;
    }
    if (used >= old) {
      std::string().swap(*pending);
      bytes.remove_prefix(used - old);  // the rest goes on below, from the bytes themselves
    } else if (take == bytes.size()) {
      pending->assign(joined.substr(used));
      return error;
    }
    // Else a line longer than the join: appended whole below (rare).
  }
  if (!pending->empty()) {
    pending->append(bytes);
    const std::size_t used = put_all(*pending, parser, &error);
    pending->erase(0, used);
  } else {
    const std::size_t used = put_all(bytes, parser, &error);
    pending->assign(bytes.substr(used));
  }
  if (pending->capacity() > kInlineBytes && pending->size() <= kInlineBytes) {
    pending->shrink_to_fit();  // back into the string itself: a stream keeps no heap block here
  }
  return error;
}

// Feeds what a read returned to the parser (parse_bytes). The end of the connection may only end
// an answer delimited by it. *received (when given): whether any byte came.
UpstreamError take_read(const net::IoResult& read, const char* data, std::string* pending,
                        net::ResponseParser* parser, Clock::time_point deadline, bool* received) {
  if (read.bytes > 0 && received != nullptr) {
    *received = true;
  }
  if (read.ec == asio::error::eof || read.ec == asio::ssl::error::stream_truncated) {
    if (!parser->got_some()) {
      return UpstreamError::reset;  // closed before any byte of an answer
    }
    net::error_code pec;
    parser->put_eof(pec);
    return pec ? UpstreamError::reset : UpstreamError::none;
  }
  if (read.ec) {
    return classify(read.ec, deadline);
  }
  return parse_bytes(std::string_view(data, read.bytes), pending, parser);
}

// After a wait on plain TCP: reads what has arrived into the thread's shared buffer, at once.
UpstreamError read_arrived(net::Conn* conn, std::string* pending, net::ResponseParser* parser,
                           Clock::time_point deadline, bool* received = nullptr) {
  const std::span<char> into = shared_read_buffer();
  const net::IoResult read = conn->read_now(asio::buffer(into.data(), into.size()));
  if (read.ec == asio::error::would_block) {
    return UpstreamError::none;  // woken for nothing
  }
  return take_read(read, into.data(), pending, parser, deadline, received);
}

// A whole answer's reads on plain TCP: a read started at once, into a buffer of its own, not a
// wait for input. Asio starts a wait with an epoll_ctl(2) every time, and a read with a recv(2)
// that, when the replica answered fast, already takes the answer: one system call instead of
// two (a replica that has not answered yet costs two either way). That epoll_ctl was one of 7
// system calls per proxied request (HAProxy makes 4; one costs ~1.2 µs on this machine). The
// buffer comes from the thread's spares: no heap block per read. A stream still waits without
// one, for its head and between its events (a held stream spends its life there;
// docs/benchmarks.md).
class SpareBuffer {
 public:
  SpareBuffer() {
    auto& spares = pool();
    if (spares.empty()) {
      data_ = std::make_unique<char[]>(kReadChunk);
    } else {
      data_ = std::move(spares.back());
      spares.pop_back();
    }
  }
  ~SpareBuffer() {
    if (auto& spares = pool(); spares.size() < kKept) {
      spares.push_back(std::move(data_));
    }
  }
  SpareBuffer(const SpareBuffer&) = delete;
  SpareBuffer& operator=(const SpareBuffer&) = delete;
  char* data() const { return data_.get(); }

 private:
  // At most this many spares per thread (1 MiB): a burst's buffers are not all kept.
  static constexpr std::size_t kKept = 256;
  static std::vector<std::unique_ptr<char[]>>& pool() {
    static thread_local std::vector<std::unique_ptr<char[]>> spares;
    return spares;
  }
  std::unique_ptr<char[]> data_;
};

// After a wait on TLS: OpenSSL reads the socket itself, so the bytes need a buffer of this
// exchange (a spare), held for this read only (the wait held none).
asio::awaitable<UpstreamError> read_arrived_tls(net::Conn* conn, std::string* pending,
                                                net::ResponseParser* parser,
                                                Clock::duration timeout, Clock::time_point deadline,
                                                bool* received = nullptr) {
  const SpareBuffer into;
  conn->expires_after(clipped(timeout, deadline));
  const net::IoResult read = co_await conn->read_some(asio::buffer(into.data(), kReadChunk));
  co_return take_read(read, into.data(), pending, parser, deadline, received);
}

// Reads more of the answer within timeout (clipped to the deadline) and feeds what came to the
// parser. May return without progress (a wake-up with nothing to read): callers loop until the
// parser has what they wait for. at_once: a read into a spare buffer started at once (a whole
// answer's reads, SpareBuffer), else a wait that holds no buffer (a stream's head: a phone sends
// it with the first token, after the prompt, which may take minutes).
asio::awaitable<UpstreamError> read_more(net::Conn* conn, std::string* pending,
                                         net::ResponseParser* parser, Clock::duration timeout,
                                         Clock::time_point deadline, bool at_once,
                                         bool* received = nullptr) {
  if (at_once && conn->can_read_now()) {
    const SpareBuffer into;
    conn->expires_after(clipped(timeout, deadline));
    const net::IoResult read = co_await conn->read_some(asio::buffer(into.data(), kReadChunk));
    const UpstreamError error = take_read(read, into.data(), pending, parser, deadline, received);
    if (error != UpstreamError::none || read.bytes < kReadChunk || parser->is_done()) {
      co_return error;
    }
    // A full read: what else of a larger answer has arrived is read at once into the thread's
    // 16 KiB shared buffer, not 4 KiB per round through the event loop.
    co_return read_arrived(conn, pending, parser, deadline, received);
  }
  auto [wec] = co_await conn->async_wait_readable(clipped(timeout, deadline), kDeferredTuple);
  if (wec) {
    co_return classify(wec, deadline);
  }
  if (conn->can_read_now()) {
    co_return read_arrived(conn, pending, parser, deadline, received);
  }
  co_return co_await read_arrived_tls(conn, pending, parser, timeout, deadline, received);
}

// Reads the head of the final answer within timeout, skipping interim answers (100 Continue,
// 102 Processing, 103 Early Hints: a head and no body each). 101 is refused: the gateway never
// asks for an upgrade.
asio::awaitable<UpstreamError> read_head(net::Conn* conn, std::string* pending,
                                         std::optional<net::ResponseParser>* parser,
                                         Clock::duration timeout, Clock::time_point deadline,
                                         bool at_once, bool* answer_started) {
  // One limit for the whole head, however its bytes trickle in.
  const auto head_deadline = Clock::now() + clipped(timeout, deadline);
  int interim = 0;
  for (;;) {
    if ((*parser)->is_header_done()) {
      const unsigned status = (*parser)->status();
      if (status >= 200) {
        co_return UpstreamError::none;
      }
      if (status == 101 || ++interim > kMaxInterimAnswers) {
        co_return UpstreamError::protocol;
      }
      reset_parser(parser);
      if (!pending->empty()) {
        // The next answer's bytes came with the interim one.
        const std::string rest = std::move(*pending);
        pending->clear();
        if (parse_bytes(rest, pending, &**parser) != UpstreamError::none) {
          co_return UpstreamError::protocol;
        }
      }
      continue;
    }
    const auto left = head_deadline - Clock::now();
    if (left <= Clock::duration::zero()) {
      co_return timed_out(deadline);
    }
    auto error =
        co_await read_more(conn, pending, &**parser, left, deadline, at_once, answer_started);
    if (error != UpstreamError::none) {
      co_return error;
    }
  }
}

// Reads the rest of a whole answer into *body: at most cap bytes.
asio::awaitable<UpstreamError> read_whole_body(net::Conn* conn, std::string* pending,
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
    auto error = co_await read_more(conn, pending, parser,
                                    body->empty() ? up->first_byte_timeout : up->idle_timeout,
                                    deadline, true);
    if (error != UpstreamError::none) {
      co_return error;
    }
  }
}

std::string event_cap_detail(std::uint64_t cap) {
  return "sent a server-sent event longer than upstream.max_event_bytes (" + std::to_string(cap) +
         " bytes)";
}

// What an attempt holds from the request's head on: every frame below exchange_into points here
// instead of taking copies (a coroutine keeps each parameter and local for its whole life).
struct Answer {
  std::unique_ptr<net::Conn> conn;
  std::string pending;  // bytes the parser cannot take yet (see parse_bytes)
  std::optional<net::ResponseParser> parser;
};

// ---- relaying ----

// Relays a whole answer (any status, or a non-stream 200) read in full first.
asio::awaitable<void> relay_whole(ProxyContext* ctx, const config::Config* config,
                                  fleet::Replica* replica, const UpstreamRequest* request,
                                  Answer* answer, ClientWriter* writer, ExchangeResult* result) {
  const auto& up = config->upstream;
  net::ResponseParser* parser = &*answer->parser;
  const unsigned status = parser->status();
  const std::uint64_t cap =
      status == 200 ? up.max_response_bytes : std::min(kMaxErrorBody, up.max_response_bytes);
  std::string body;
  auto error = co_await read_whole_body(answer->conn.get(), &answer->pending, parser, cap, &up,
                                        request->deadline, &body);
  if (error == UpstreamError::too_large && status != 200) {
    error = UpstreamError::protocol;  // a huge error answer is a broken replica
  }
  if (error != UpstreamError::none) {
    std::string detail;
    if (error == UpstreamError::too_large) {
      detail = "answered more than upstream.max_response_bytes (" + std::to_string(cap) + " bytes)";
    }
    fail(*result, Phase::body, error, std::move(detail));
    co_return;
  }
  give_back(ctx, replica, std::move(answer->conn), *parser, answer->pending,
            up.max_idle_per_replica);

  std::optional<openai::ErrorInfo> replica_error;
  if (status != 200) {
    replica_error = openai::read_error(body);
  }
  if (status == 404 && replica_error && replica_error->code == "model_not_found") {
    // Serving another model than the fleet says: the replica's fault, not the client's.
    fail(*result, Phase::body, UpstreamError::model_not_found,
         "does not serve the model '" + request->info->model + "'");
    co_return;
  }
  if (status == 200) {
    openai::read_stats_from_body(request->api, body, result->stats);
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
  result->kind = ok ? ExchangeResult::Kind::done : ExchangeResult::Kind::client_gone;
}

// The stream's head, unless keep-alive comments sent it; false when the client is gone. Its own
// frame, like close_stream: the strings of these calls are not held between events.
asio::awaitable<bool> open_stream(ClientWriter* writer, const net::ResponseParser* parser) {
  if (writer->head_sent()) {
    co_return true;
  }
  std::string content_type =
      parser->content_type().empty() ? "text/event-stream" : parser->content_type();
  const bool opened = co_await writer->begin_stream(200, std::move(content_type));
  co_return opened;
}

// What is left of the stream (an event without its blank line), then its end. (Each result in a
// local: `if (!co_await writer->send_chunk(relay->finish()))` here compiled to an illegal
// instruction with GCC 12.)
asio::awaitable<bool> close_stream(ClientWriter* writer, openai::SseRelay* relay) {
  std::string rest = relay->finish();
  const bool sent = co_await writer->send_chunk(std::move(rest));
  bool ended = false;
  if (sent) {
    ended = co_await writer->end_stream();
  }
  co_return ended;
}

// Relays a 200 event stream event by event, each at most upstream.max_event_bytes.
asio::awaitable<void> relay_stream(ProxyContext* ctx, const config::Config* config,
                                   fleet::Replica* replica, const UpstreamRequest* request,
                                   Answer* answer, ClientWriter* writer, ExchangeResult* result) {
  const auto& up = config->upstream;
  net::ResponseParser* parser = &*answer->parser;
  if (!co_await open_stream(writer, parser)) {
    result->kind = ExchangeResult::Kind::client_gone;
    co_return;
  }
  openai::AnswerStats* stats = &result->stats;
  const openai::Api api = request->api;
  openai::SseRelay relay(up.max_event_bytes, request->strip_usage,
                         [stats, api](const openai::SseEvent& event) {
                           openai::read_stats_from_event(api, event, *stats);
                         });
  bool received = false;
  bool content = false;
  for (;;) {
    if (parser->pending_body() > 0) {
      received = true;
      // Whole events before an oversized one still go out, so the stream stays well formed.
      // (send_chunk of nothing costs nothing; the string is moved out before the next wait.)
      std::string out;
      const bool within_cap = relay.feed(parser->take_body(), out);
      const bool sent = co_await writer->send_chunk(std::move(out));
      if (!sent) {
        result->kind = ExchangeResult::Kind::client_gone;
        co_return;
      }
      if (!content && writer->content_started()) {
        content = true;
        if (request->content_started) {
          request->content_started();
        }
      }
      if (!within_cap) {
        fail(*result, Phase::stream, UpstreamError::protocol, event_cap_detail(up.max_event_bytes));
        co_return;
      }
    }
    if (parser->is_done()) {
      break;
    }
    // The wait is awaited here, not in read_more: a held stream spends its life in it, and a
    // frame of its own (read_more's, wait_readable's) was ~0.6 KiB more per stream.
    const auto timeout = received ? up.idle_timeout : up.first_byte_timeout;
    auto [wec] = co_await answer->conn->async_wait_readable(clipped(timeout, request->deadline),
                                                            kDeferredTuple);
    UpstreamError error = wec ? classify(wec, request->deadline) : UpstreamError::none;
    if (error == UpstreamError::none && answer->conn->can_read_now()) {
      error = read_arrived(answer->conn.get(), &answer->pending, parser, request->deadline);
    } else if (error == UpstreamError::none) {
      error = co_await read_arrived_tls(answer->conn.get(), &answer->pending, parser, timeout,
                                        request->deadline);
    }
    if (error != UpstreamError::none) {
      // The events completed before the failure still go out; an incomplete one is dropped.
      std::string out;
      relay.feed(parser->take_body(), out);
      co_await writer->send_chunk(std::move(out));
      fail(*result, Phase::stream, error);
      co_return;
    }
  }
  give_back(ctx, replica, std::move(answer->conn), *parser, answer->pending,
            up.max_idle_per_replica);
  const bool ended = co_await close_stream(writer, &relay);
  result->kind = ended ? ExchangeResult::Kind::done : ExchangeResult::Kind::client_gone;
}

// Takes a connection (checkout) and writes the request on it. Its own frame, which ends with the
// write: the request's head (~300 bytes) is not kept for the answer's whole life.
asio::awaitable<void> send_request(ProxyContext* ctx, const config::Config* config,
                                   fleet::Replica* replica, const UpstreamRequest* request,
                                   bool allow_pooled, const ClientWriter* writer,
                                   std::unique_ptr<net::Conn>* conn, ExchangeResult* result) {
  const auto& up = config->upstream;
  const auto deadline = request->deadline;
  FailedAttempt& facts = result->failure;
  auto checked = co_await checkout(ctx, replica, allow_pooled, up.connect_timeout, deadline);
  if (!checked.conn) {
    fail(*result, Phase::connect, checked.error);
    co_return;
  }
  *conn = std::move(checked.conn);
  facts.pooled = checked.pooled;
  const std::string head = upstream_head(*ctx, *replica, *request->client, request->body->size(),
                                         *request->info, writer->request_id());
  (*conn)->expires_after(clipped(up.idle_timeout, deadline));
  // A large body goes in slices: one write of a 4 MiB body is one system call that copies as
  // much as the socket takes (on loopback the replica's receive path runs inside it too), which
  // every other stream would wait out; other work runs between slices. Not measured alone.
  const std::string_view body = *request->body;
  std::size_t sent = std::min(body.size(), kBodySlice);
  net::IoResult w = co_await (*conn)->write(asio::buffer(head), asio::buffer(body.data(), sent));
  while (!w.ec && sent < body.size()) {
    const std::size_t n = std::min(body.size() - sent, kBodySlice);
    w = co_await (*conn)->write(asio::buffer(body.data() + sent, n));
    sent += n;
  }
  if (w.ec) {
    fail(*result, Phase::send, classify(w.ec, deadline));
    co_return;
  }
  facts.request_written = true;
}

}  // namespace

asio::awaitable<void> exchange_into(ProxyContext* ctx, const config::Config* config,
                                    fleet::Replica* replica, const UpstreamRequest* request,
                                    bool allow_pooled, ClientWriter* writer,
                                    ExchangeResult* result) {
  *result = ExchangeResult{};
  Answer answer;
  co_await send_request(ctx, config, replica, request, allow_pooled, writer, &answer.conn, result);
  if (result->kind == ExchangeResult::Kind::failed) {
    co_return;
  }
  const auto written_at = Clock::now();
  const auto& up = config->upstream;
  FailedAttempt& facts = result->failure;

  // A long prompt is read before the phone answers anything: first_byte_timeout.
  reset_parser(&answer.parser);
  // A whole answer's head is read at once; a stream's is waited for without a buffer (read_more).
  auto error =
      co_await read_head(answer.conn.get(), &answer.pending, &answer.parser, up.first_byte_timeout,
                         request->deadline, !request->info->stream, &facts.answer_started);
  if (error != UpstreamError::none) {
    facts.since_written = Clock::now() - written_at;
    fail(*result, Phase::head, error);
    co_return;
  }
  const unsigned status = answer.parser->status();
  result->upstream_status = status;
  if (status >= 500 || status == 429) {
    // Busy (429/503: all its slots taken, perhaps by another gateway) or broken: another replica
    // may serve it. The connection is dropped rather than drained.
    result->retry_after = answer.parser->retry_after();
    fail(*result, Phase::head,
         status == 429 || status == 503 ? UpstreamError::busy : UpstreamError::http_5xx);
    co_return;
  }
  if (request->info->stream && status == 200) {
    co_await relay_stream(ctx, config, replica, request, &answer, writer, result);
  } else {
    co_await relay_whole(ctx, config, replica, request, &answer, writer, result);
  }
}

asio::awaitable<ExchangeResult> exchange(ProxyContext* ctx, const config::Config* config,
                                         fleet::Replica* replica, const UpstreamRequest* request,
                                         bool allow_pooled, ClientWriter* writer) {
  ExchangeResult result;
  co_await exchange_into(ctx, config, replica, request, allow_pooled, writer, &result);
  co_return result;
}

}  // namespace fg::proxy
