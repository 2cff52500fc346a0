#include "replica-agent/engines/proxy.hpp"

#include <chrono>
#include <optional>

#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <nlohmann/json.hpp>

#include "common/log/log.hpp"
#include "common/openai/answer.hpp"
#include "common/openai/errors.hpp"
#include "common/openai/sse.hpp"
#include "common/util/json.hpp"

namespace fg::agent {

namespace asio = boost::asio;
namespace http = boost::beast::http;

namespace {

constexpr auto kConnectTimeout = std::chrono::seconds(5);
// A phone may read a long prompt for minutes before the first byte: the gateway's own
// first-byte timeout governs; this only catches an engine that hangs forever.
constexpr auto kFirstByteTimeout = std::chrono::minutes(30);
constexpr auto kIdleTimeout = std::chrono::minutes(5);
constexpr auto kWriteTimeout = std::chrono::seconds(30);
constexpr std::size_t kReadChunk = 16 * 1024;
constexpr std::size_t kMaxScannedBody = 1024 * 1024;

// The usage of a Responses or Anthropic answer (a body, or one event of a stream).
void scan_api(openai::Api api, const openai::SseEvent* event, std::string_view body,
              ProxyProgress* progress) {
  openai::AnswerStats stats;
  if (event != nullptr) {
    openai::read_stats_from_event(api, *event, stats);
  } else {
    openai::read_stats_from_body(api, body, stats);
  }
  if (stats.prompt_tokens) {
    progress->prompt_tokens = *stats.prompt_tokens;
  }
  if (stats.completion_tokens) {
    progress->completion_tokens = *stats.completion_tokens;
  }
}

// Usage and llama.cpp timings of a response body or stream event.
void scan(std::string_view text, ProxyProgress* progress) {
  if (text.find("\"usage\"") == std::string_view::npos &&
      text.find("\"timings\"") == std::string_view::npos) {
    return;
  }
  auto doc = parse_network_json(text);
  if (!doc.is_object()) {
    return;
  }
  if (auto u = doc.find("usage"); u != doc.end() && u->is_object()) {
    if (auto p = u->find("prompt_tokens"); p != u->end() && p->is_number_unsigned()) {
      progress->prompt_tokens = p->get<std::uint64_t>();
    }
    if (auto c = u->find("completion_tokens"); c != u->end() && c->is_number_unsigned()) {
      progress->completion_tokens = c->get<std::uint64_t>();
    }
  }
  if (auto t = doc.find("timings"); t != doc.end() && t->is_object()) {
    if (auto p = t->find("prompt_per_second"); p != t->end() && p->is_number()) {
      progress->prefill_tps = p->get<double>();
    }
    if (auto d = t->find("predicted_per_second"); d != t->end() && d->is_number()) {
      progress->decode_tps = d->get<double>();
    }
    // llama.cpp reports timings but no usage on streams without include_usage.
    if (progress->prompt_tokens == 0) {
      std::uint64_t n = 0;
      for (const char* key : {"prompt_n", "cache_n"}) {
        if (auto v = t->find(key); v != t->end() && v->is_number_unsigned()) {
          n += v->get<std::uint64_t>();
        }
      }
      progress->prompt_tokens = n;
    }
    if (progress->completion_tokens == 0) {
      if (auto v = t->find("predicted_n"); v != t->end() && v->is_number_unsigned()) {
        progress->completion_tokens = v->get<std::uint64_t>();
      }
    }
  }
}

std::string engine_head(const AgentContext& ctx, const net::Request& request,
                        const std::string& request_id) {
  const auto& url = ctx.config.engine.url;
  std::string head;
  head += std::string(request.method_string());
  head += " ";
  head += url.path_prefix;
  head.append(request.target().data(), request.target().size());
  head += " HTTP/1.1\r\nHost: ";
  head += url.host_header();
  head += "\r\nContent-Type: application/json\r\nContent-Length: ";
  head += std::to_string(request.body().size());
  auto accept = request[http::field::accept];
  if (!accept.empty()) {
    head += "\r\nAccept: ";
    head.append(accept.data(), accept.size());
  }
  head += "\r\nX-Request-Id: ";
  head += request_id;
  head += "\r\nUser-Agent: fleetgate-agent/" FLEETGATE_VERSION "\r\n\r\n";
  return head;
}

}  // namespace

asio::awaitable<void> forward_to_engine(AgentContext* ctx, net::ResponseWriter* client,
                                        const net::Request* request, ProxyProgress* progress) {
  const std::string& request_id = client->request_id();
  auto connected =
      co_await net::connect_to(ctx->config.engine.url, ctx->client_tls.get(), kConnectTimeout);
  if (!connected.conn) {
    log::warn("cannot reach the engine", {{"request_id", request_id},
                                          {"url", ctx->config.engine.url.to_string()},
                                          {"error", connected.ec.message()}});
    progress->status = 502;
    progress->outcome = "engine_unreachable";
    progress->finished = co_await client->send_error(
        502, "the inference engine cannot be reached; retry", "engine_unreachable");
    co_return;
  }
  std::unique_ptr<net::Conn> engine = std::move(connected.conn);
  std::string head = engine_head(*ctx, *request, request_id);
  engine->expires_after(kWriteTimeout);
  auto [wec, wn] = co_await engine->write(asio::buffer(head), asio::buffer(request->body()));

  net::ResponseParser parser;
  parser.header_limit(64 * 1024);
  parser.eager(true);
  parser.body_limit(boost::none);
  boost::beast::flat_buffer buffer;
  net::error_code failure = wec;
  // The response head: a long prompt is read before the engine answers anything.
  engine->expires_after(kFirstByteTimeout);
  while (!failure && !parser.is_header_done()) {
    auto [rec, got] = co_await engine->read_some(buffer.prepare(kReadChunk));
    if (rec) {
      failure = rec;
      break;
    }
    buffer.commit(got);
    net::error_code pec;
    buffer.consume(parser.put(buffer.data(), pec));
    if (pec && pec != http::error::need_more) {
      failure = pec;
    }
  }
  if (failure) {
    log::warn("the engine failed before answering",
              {{"request_id", request_id}, {"error", failure.message()}});
    progress->status = 502;
    progress->outcome = "engine_failed";
    progress->finished = co_await client->send_error(
        502, "the inference engine failed before answering", "engine_failed");
    co_return;
  }

  // The head to the client: the engine's status and content type; its length when it gave one,
  // else chunked (an event stream is relayed chunk by chunk as the engine sends it).
  progress->status = parser.status();
  const std::string content_type =
      parser.content_type().empty() ? "application/json" : parser.content_type();
  const bool event_stream = content_type.rfind("text/event-stream", 0) == 0;
  const std::optional<std::uint64_t> length = parser.declared_length();
  std::vector<net::Header> headers;
  if (event_stream) {
    headers.emplace_back("Cache-Control", "no-cache");
  }
  if (!parser.retry_after().empty()) {
    headers.emplace_back("Retry-After", parser.retry_after());
  }
  bool opened =
      co_await client->begin_body(progress->status, content_type, length, std::move(headers));
  if (!opened) {
    co_return;
  }

  std::string scanned;  // a whole (non-stream) body, for its usage
  openai::SseParser sse([&](const openai::SseEvent& event) {
    if (progress->api == openai::Api::openai) {
      scan(event.data, progress);
    } else {
      scan_api(progress->api, &event, {}, progress);
    }
  });
  bool engine_ok = true;
  for (;;) {
    // Parse whatever is buffered (the head's read may have brought body bytes along).
    while (buffer.size() > 0 && !parser.is_done()) {
      net::error_code pec;
      auto used = parser.put(buffer.data(), pec);
      buffer.consume(used);
      if (pec == http::error::need_more || (!pec && used == 0)) {
        break;
      }
      if (pec) {
        engine_ok = false;
        break;
      }
    }
    if (!engine_ok) {
      break;
    }
    std::string piece = parser.take_body();
    if (parser.is_done() && progress->slot != nullptr) {
      progress->slot->reset();
    }
    if (!piece.empty()) {
      if (event_stream) {
        sse.feed(piece);
      } else if (scanned.size() + piece.size() <= kMaxScannedBody) {
        scanned += piece;
      }
      bool sent = co_await client->send_chunk(std::move(piece));
      if (!sent) {
        co_return;
      }
    }
    if (parser.is_done()) {
      break;
    }
    engine->expires_after(kIdleTimeout);
    auto [rec, got] = co_await engine->read_some(buffer.prepare(kReadChunk));
    if (rec == asio::error::eof || rec == asio::ssl::error::stream_truncated) {
      net::error_code pec;
      parser.put_eof(pec);  // fine only for a body delimited by the end of the connection
      if (pec) {
        engine_ok = false;
        break;
      }
      continue;
    }
    if (rec) {
      engine_ok = false;
      break;
    }
    buffer.commit(got);
  }
  engine.reset();
  if (!event_stream) {
    if (progress->api == openai::Api::openai) {
      scan(scanned, progress);
    } else {
      scan_api(progress->api, nullptr, scanned, progress);
    }
  }
  if (!engine_ok) {
    // Mid-answer: the client cannot be told with a status any more. A stream gets an error
    // event (as the gateway does); either way the connection is closed.
    log::warn("the engine failed in the middle of the answer", {{"request_id", request_id}});
    progress->outcome = "engine_failed";
    if (event_stream && !length) {
      co_await client->send_error(500, "the inference engine failed in the middle of the answer",
                                  "engine_failed");
    }
    co_return;
  }
  bool ended = co_await client->end_stream();
  if (!ended) {
    co_return;
  }
  progress->outcome = "ok";
  progress->finished = true;
}

}  // namespace fg::agent
