#include "orchestrator/proxy/upstream.hpp"

#include <boost/asio/ssl/error.hpp>
#include <boost/beast/http/error.hpp>
#include <nlohmann/json.hpp>

#include "common/log/log.hpp"
#include "common/openai/sse.hpp"

namespace fg::proxy {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;

namespace {

// Small reads keep memory per open stream low; whole answers grow the buffer as needed.
constexpr std::size_t kReadChunk = 4 * 1024;
constexpr std::uint64_t kMaxWholeBody = 64ull * 1024 * 1024;
constexpr std::uint64_t kMaxErrorBody = 1024 * 1024;
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

UpstreamError classify(const net::error_code& ec) {
  if (ec == boost::beast::error::timeout) {
    return UpstreamError::timeout;
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

void scan_usage(const nlohmann::json& doc, ExchangeResult& result) {
  if (!doc.is_object()) {
    return;
  }
  auto it = doc.find("usage");
  if (it == doc.end() || !it->is_object()) {
    return;
  }
  if (auto p = it->find("prompt_tokens"); p != it->end() && p->is_number_unsigned()) {
    result.prompt_tokens = p->get<std::uint64_t>();
  }
  if (auto c = it->find("completion_tokens"); c != it->end() && c->is_number_unsigned()) {
    result.completion_tokens = c->get<std::uint64_t>();
  }
}

// Reads "usage" from an answer without parsing the whole answer (it may be long): finds the
// member's object and parses just that. A "usage" key inside a string value is escaped (\"), so
// the exact text "usage": can only be a member name.
void scan_usage_text(std::string_view text, ExchangeResult& result) {
  for (auto at = text.find("\"usage\""); at != std::string_view::npos;
       at = text.find("\"usage\"", at + 1)) {
    auto open = text.find_first_not_of(" \t\r\n", at + 7);
    if (open == std::string_view::npos || text[open] != ':') {
      continue;
    }
    open = text.find_first_not_of(" \t\r\n", open + 1);
    if (open == std::string_view::npos || text[open] != '{') {
      continue;
    }
    // The usage object holds numbers and nested objects only: its end is the matching brace.
    int depth = 0;
    for (auto i = open; i < text.size(); ++i) {
      if (text[i] == '{') {
        ++depth;
      } else if (text[i] == '}' && --depth == 0) {
        auto usage = nlohmann::json::parse(text.substr(open, i - open + 1), nullptr, false);
        scan_usage(nlohmann::json{{"usage", std::move(usage)}}, result);
        return;
      }
    }
  }
}

std::string error_message_from(std::string_view body, unsigned status) {
  auto doc = nlohmann::json::parse(body, nullptr, false);
  if (doc.is_object()) {
    auto e = doc.find("error");
    if (e != doc.end() && e->is_object()) {
      auto m = e->find("message");
      if (m != e->end() && m->is_string()) {
        return m->get<std::string>();
      }
    }
  }
  return "replica answered HTTP " + std::to_string(status);
}

// Reads more of the answer into the parser; false (and *error set) when the replica failed.
asio::awaitable<bool> read_more(net::Conn* conn, boost::beast::flat_buffer* buffer,
                                net::ResponseParser* parser, Clock::duration timeout,
                                UpstreamError* error) {
  conn->expires_after(timeout);
  auto [rec, got] = co_await conn->read_some(buffer->prepare(kReadChunk));
  net::error_code pec;
  if (rec == asio::error::eof || rec == asio::ssl::error::stream_truncated) {
    // Only an answer delimited by the end of the connection may end here.
    parser->put_eof(pec);
    if (!pec) {
      co_return true;
    }
    *error = UpstreamError::reset;
    co_return false;
  }
  if (rec) {
    *error = classify(rec);
    co_return false;
  }
  buffer->commit(got);
  while (buffer->size() > 0 && !parser->is_done()) {
    auto used = parser->put(buffer->data(), pec);
    buffer->consume(used);
    if (pec == http::error::need_more) {
      break;
    }
    if (pec) {
      *error = UpstreamError::protocol;
      co_return false;
    }
    if (used == 0) {
      break;
    }
  }
  co_return true;
}

}  // namespace

std::string_view to_string(UpstreamError e) {
  switch (e) {
    case UpstreamError::none:
      return "none";
    case UpstreamError::connect:
      return "connect";
    case UpstreamError::tls:
      return "tls";
    case UpstreamError::timeout:
      return "timeout";
    case UpstreamError::http_5xx:
      return "http_5xx";
    case UpstreamError::busy:
      return "busy";
    case UpstreamError::reset:
      return "reset";
    case UpstreamError::protocol:
      return "protocol";
  }
  return "unknown";
}

asio::awaitable<ExchangeResult> exchange(ProxyContext* ctx, const config::Config* config,
                                         fleet::Replica* replica, const net::Request* request,
                                         const std::string* body, const openai::RequestInfo* info,
                                         bool strip_usage, ClientWriter* writer) {
  const auto& up = config->upstream;
  ExchangeResult result;
  std::string head =
      upstream_head(*ctx, *replica, *request, body->size(), *info, writer->request_id());

  net::ResponseParser parser;
  boost::beast::flat_buffer buffer;
  std::unique_ptr<net::Conn> conn;

  // Send the request. A pooled connection the replica already closed fails at once with no
  // answer; that is not the replica's fault, so it costs one fresh connection, not an attempt.
  for (int round = 0; round < 2 && !conn; ++round) {
    bool reused = false;
    if (round == 0) {
      conn = ctx->registry->take_idle(*replica, kMaxPooledIdle, Clock::now());
      reused = conn != nullptr;
    }
    if (!conn) {
      auto connected =
          co_await net::connect_to(replica->url, ctx->upstream_tls, up.connect_timeout);
      if (!connected.conn) {
        result.kind = ExchangeResult::Kind::retryable;
        result.error = connected.failure == net::ConnectFailure::tls       ? UpstreamError::tls
                       : connected.failure == net::ConnectFailure::timeout ? UpstreamError::timeout
                                                                           : UpstreamError::connect;
        log::debug("upstream connect failed",
                   {{"replica", replica->name}, {"error", connected.ec.message()}});
        co_return result;
      }
      conn = std::move(connected.conn);
    }
    conn->expires_after(up.idle_timeout);
    auto [wec, n] = co_await conn->write(asio::buffer(head), asio::buffer(*body));
    if (wec) {
      conn.reset();
      if (reused) {
        continue;
      }
      result.kind = ExchangeResult::Kind::retryable;
      result.error = classify(wec);
      co_return result;
    }
    // Wait for the answer's head: a long prompt is read before the phone answers anything.
    parser.header_limit(64 * 1024);
    parser.eager(true);
    if (info->stream) {
      parser.body_limit(boost::none);
    } else {
      parser.body_limit(kMaxWholeBody);
    }
    conn->expires_after(up.first_byte_timeout);
    while (!parser.is_header_done()) {
      auto [rec, got] = co_await conn->read_some(buffer.prepare(kReadChunk));
      if (rec) {
        bool nothing_yet = buffer.size() == 0 && !parser.got_some();
        conn.reset();
        if (reused && nothing_yet && rec != boost::beast::error::timeout) {
          buffer.clear();
          break;  // stale pooled connection: try once more on a new one
        }
        result.kind = ExchangeResult::Kind::retryable;
        result.error = classify(rec);
        co_return result;
      }
      buffer.commit(got);
      net::error_code pec;
      buffer.consume(parser.put(buffer.data(), pec));
      if (pec && pec != http::error::need_more) {
        result.kind = ExchangeResult::Kind::retryable;
        result.error = UpstreamError::protocol;
        co_return result;
      }
    }
  }
  if (!conn) {
    result.kind = ExchangeResult::Kind::retryable;
    result.error = UpstreamError::reset;
    co_return result;
  }

  result.upstream_status = parser.status();
  const unsigned status = parser.status();
  if (status >= 500 || status == 429) {
    // Busy (429/503: all its slots taken, perhaps by another gateway) or broken: another replica
    // may serve it. The connection is dropped rather than drained.
    result.kind = ExchangeResult::Kind::retryable;
    result.error = (status == 429 || status == 503) ? UpstreamError::busy : UpstreamError::http_5xx;
    result.retry_after = parser.retry_after();
    co_return result;
  }

  auto finish_conn = [&] {
    if (parser.is_done() && parser.keep_alive() && buffer.size() == 0) {
      conn->expires_never();
      ctx->registry->give_back(*replica, std::move(conn), up.max_idle_per_replica, Clock::now());
    }
  };

  if (!info->stream || status != 200) {
    // Whole answer first, then one write: a failure before the end can still go elsewhere.
    std::string body;
    const std::uint64_t cap = status == 200 ? kMaxWholeBody : kMaxErrorBody;
    for (;;) {
      body += parser.take_body();
      if (parser.is_done()) {
        break;
      }
      if (body.size() > cap) {
        result.kind = ExchangeResult::Kind::retryable;
        result.error = UpstreamError::protocol;
        co_return result;
      }
      if (!co_await read_more(conn.get(), &buffer, &parser,
                              body.empty() ? up.first_byte_timeout : up.idle_timeout,
                              &result.error)) {
        result.kind = ExchangeResult::Kind::retryable;
        co_return result;
      }
    }
    finish_conn();
    if (status == 200) {
      scan_usage_text(body, result);
    }
    bool ok;
    if (info->stream && writer->head_sent()) {
      // Keep-alive comments already opened a 200 stream: the replica's refusal becomes an
      // error event.
      ok = co_await writer->send_error(status, error_message_from(body, status), "upstream_error");
    } else {
      std::string content_type = parser.content_type();
      ok = co_await writer->send_full(status, std::move(content_type), std::move(body));
    }
    result.kind = ok ? ExchangeResult::Kind::done : ExchangeResult::Kind::client_gone;
    co_return result;
  }

  // A 200 event stream: relay each piece as it arrives.
  if (!writer->head_sent()) {
    std::string content_type =
        parser.content_type().empty() ? "text/event-stream" : parser.content_type();
    if (!co_await writer->begin_stream(200, std::move(content_type))) {
      result.kind = ExchangeResult::Kind::client_gone;
      co_return result;
    }
  }
  bool relayed = false;
  openai::SseParser sse(
      [&](const openai::SseEvent& event) { scan_usage_text(event.data, result); });
  openai::UsageStripper stripper([&](std::string_view data) { scan_usage_text(data, result); });
  for (;;) {
    std::string piece = parser.take_body();
    if (!piece.empty()) {
      relayed = true;
      if (strip_usage) {
        piece = stripper.feed(piece);
      } else {
        sse.feed(piece);
      }
      if (!co_await writer->send_chunk(std::move(piece))) {
        result.kind = ExchangeResult::Kind::client_gone;
        co_return result;
      }
    }
    if (parser.is_done()) {
      break;
    }
    if (!co_await read_more(conn.get(), &buffer, &parser,
                            relayed ? up.idle_timeout : up.first_byte_timeout, &result.error)) {
      if (!relayed && parser.pending_body() == 0) {
        result.kind = ExchangeResult::Kind::retryable;
        co_return result;
      }
      std::string piece_left = parser.take_body();
      if (strip_usage) {
        piece_left = stripper.feed(piece_left) + stripper.finish();
      }
      if (!piece_left.empty()) {
        co_await writer->send_chunk(std::move(piece_left));
      }
      co_await writer->send_error(502,
                                  "the replica failed in the middle of the stream (" +
                                      std::string(to_string(result.error)) + ")",
                                  "upstream_error");
      result.kind = ExchangeResult::Kind::failed_after_content;
      co_return result;
    }
  }
  if (strip_usage) {
    std::string rest = stripper.finish();
    if (!rest.empty() && !co_await writer->send_chunk(std::move(rest))) {
      result.kind = ExchangeResult::Kind::client_gone;
      co_return result;
    }
  }
  finish_conn();
  bool ended = co_await writer->end_stream();
  result.kind = ended ? ExchangeResult::Kind::done : ExchangeResult::Kind::client_gone;
  co_return result;
}

}  // namespace fg::proxy
