#include "common/net/http_session.hpp"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <typeinfo>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/log/log.hpp"
#include "common/net/http_io.hpp"
#include "common/net/off_thread.hpp"
#include "common/util/request_id.hpp"

namespace fg::net {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kReadChunk = 4 * 1024;
// A body is read in larger pieces: a 4 MiB body took 1,024 reads (a system call, a coroutine
// resumption and a parser call each) at 4 KiB; at 64 KiB, 64, each still a short step of the
// io thread (a copy of 64 KiB). Back to back, 105 bodies/s instead of 72 (bigbody bench).
constexpr std::size_t kBodyReadChunk = 64 * 1024;
// Bodies larger than this are freed on SessionHooks::off_thread: a body above glibc's mmap
// threshold (128 KiB by default) is a mapping of its own, and freeing it is a munmap.
constexpr std::size_t kDisposeBody = 128 * 1024;
constexpr std::size_t kStreamReadChunk = 32 * 1024;  // within the buffer's size (serve_session)
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

// The type of the exception in flight, for the log: never what() (a parser's message may quote
// the request, and request text is never logged).
std::string current_exception_type() {
  const std::type_info* type = abi::__cxa_current_exception_type();
  if (type == nullptr) {
    return "unknown";
  }
  int status = 0;
  char* name = abi::__cxa_demangle(type->name(), nullptr, nullptr, &status);
  std::string out = status == 0 && name != nullptr ? name : type->name();
  std::free(name);
  return out;
}

// How reading one request ended.
struct ReadResult {
  enum class Kind { request, refused, failed };
  Kind kind = Kind::failed;
  ReadFailure failure = ReadFailure::closed;
  std::optional<ErrorReply> reply;  // refused: the answer; failed: what to tell the client
  // refused: the connection cannot carry another request (a body was announced and not read,
  // or the head check failed)
  bool must_close = false;
  std::string reason;  // what it is counted as; "" for the ordinary ends of a connection
  // request: its body's share of the listener's body budget, held until the request is done
  BodyBudget::Reservation body;
  // request: set when the route takes its body as a stream (read by the handler)
  std::optional<StreamedBody> streamed;
  HeadFacts facts;
  // refused: the body bytes the client may still send (read and dropped at the close, so that
  // the answer is not lost to a reset); 0 for a body over the limit
  std::uint64_t unread_body = 0;
};

// The body a refused request's client may send anyway: the declared length when within the
// limit, the limit for a chunked body.
std::uint64_t unread_body(const HeadFacts& facts, std::uint64_t body_limit) {
  if (facts.chunked) {
    return body_limit;
  }
  const std::uint64_t declared = facts.content_length.value_or(0);
  return declared <= body_limit ? declared : 0;
}

// Reads one request into out. Each phase (idle wait, head, body) has one deadline, set when it
// starts and never moved by a read, so trickling bytes does not keep a connection.
asio::awaitable<ReadResult> read_request(Conn* conn, beast::flat_buffer* buffer,
                                         const SessionLimits* limits, const SessionHooks* hooks,
                                         RequestReader& reader, Request* out) {
  ReadPhase phase = buffer->size() > 0 ? ReadPhase::head : ReadPhase::idle;
  auto deadline = Clock::now() + phase_timeout(phase, limits->timeouts);
  ReadResult result;
  for (;;) {
    if (buffer->size() > 0) {
      const auto data = buffer->data();
      buffer->consume(
          reader.feed(std::string_view(static_cast<const char*>(data.data()), data.size())));
    }
    switch (reader.state()) {
      case RequestReader::State::failed:
        result.failure = reader.failure();
        result.reply = failure_reply(result.failure, limits->body_limit, limits->body_limit_key);
        co_return result;
      case RequestReader::State::head_done: {
        std::optional<ErrorReply> refusal;
        bool check_failed = false;
        if (hooks->check_head) {
          try {
            refusal = hooks->check_head(reader.message());
          } catch (...) {
            log::error("request head check failed",
                       {{"listener", hooks->listener}, {"exception", current_exception_type()}});
            refusal = ErrorReply{
                500, "internal_error", "the server failed while reading this request", {}};
            check_failed = true;
          }
        }
        const HeadFacts facts = reader.head_facts();
        if (!refusal && hooks->stream_body && facts.has_body()) {
          result.streamed = hooks->stream_body(reader.message());
        }
        const std::uint64_t body_limit =
            result.streamed ? result.streamed->limit : limits->body_limit;
        const std::string_view body_limit_key =
            result.streamed ? std::string_view(result.streamed->limit_key) : limits->body_limit_key;
        HeadDecision decision = decide_head(facts, std::move(refusal), body_limit, body_limit_key);
        if (decision.reply) {
          result.kind = ReadResult::Kind::refused;
          result.reply = std::move(decision.reply);
          result.must_close = facts.has_body() || check_failed;
          result.reason = check_failed ? "exception" : result.reply->code;
          result.unread_body = unread_body(facts, body_limit);
          result.streamed.reset();
          *out = reader.release();
          co_return result;
        }
        if (limits->body_budget != nullptr && facts.has_body()) {
          // A chunked body may grow to the body limit; a streamed one holds what its route says.
          auto reserved = limits->body_budget->try_reserve(
              result.streamed ? result.streamed->held_bytes
                              : facts.content_length.value_or(limits->body_limit),
              limits->body_budget_limit);
          if (!reserved) {
            result.kind = ReadResult::Kind::refused;
            result.reply = ErrorReply{503,
                                      "server_busy",
                                      "the server holds too many request bodies at once (" +
                                          std::string(limits->body_budget_key) + "); retry later",
                                      {{"Retry-After", "1"}}};
            result.must_close = true;
            result.reason = result.reply->code;
            result.unread_body = unread_body(facts, body_limit);
            result.streamed.reset();
            *out = reader.release();
            co_return result;
          }
          result.body = std::move(*reserved);
        }
        if (decision.send_continue) {
          conn->expires_after(limits->write_timeout);
          auto [ec, n] = co_await conn->write(asio::buffer(kContinue));
          if (ec) {
            co_return result;  // failed, closed: nobody to answer
          }
        }
        if (result.streamed) {
          // The handler reads the body (BodyStream) as it arrives.
          reader.stream_body(result.streamed->limit);
          result.kind = ReadResult::Kind::request;
          result.facts = facts;
          *out = reader.release();
          co_return result;
        }
        reader.accept_body(limits->body_limit);
        phase = ReadPhase::body;
        deadline = Clock::now() + phase_timeout(phase, limits->timeouts);
        continue;
      }
      case RequestReader::State::done:
        result.kind = ReadResult::Kind::request;
        *out = reader.release();
        co_return result;
      case RequestReader::State::reading_head:
      case RequestReader::State::reading_body:
        break;
    }
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) {
      result.failure = timeout_failure(phase);
      result.reply = failure_reply(result.failure, limits->body_limit, limits->body_limit_key);
      co_return result;
    }
    asio::mutable_buffer space;
    try {
      // The parser takes every body byte it is fed, so the buffer is all but empty here.
      const std::size_t room = buffer->max_size() - buffer->size();
      space = buffer->prepare(phase == ReadPhase::body && room > kReadChunk
                                  ? std::min(kBodyReadChunk, room)
                                  : kReadChunk);
    } catch (const std::length_error&) {
      result.failure = ReadFailure::header_too_large;
      result.reply = failure_reply(result.failure, limits->body_limit, limits->body_limit_key);
      co_return result;
    }
    conn->expires_after(left);
    auto [ec, n] = co_await conn->read_some(space);
    if (ec == beast::error::timeout) {
      result.failure = timeout_failure(phase);
      result.reply = failure_reply(result.failure, limits->body_limit, limits->body_limit_key);
      co_return result;
    }
    if (ec) {
      reader.feed_eof();
      result.failure = reader.failure();
      result.reply = failure_reply(result.failure, limits->body_limit, limits->body_limit_key);
      co_return result;
    }
    buffer->commit(n);
    if (phase == ReadPhase::idle) {
      phase = ReadPhase::head;
      deadline = Clock::now() + phase_timeout(phase, limits->timeouts);
    }
  }
}

// Out of line: inlined after the size test above, GCC 12 warned (-Warray-bounds) about the
// move's small-string branch that the size rules out.
[[gnu::noinline]] void dispose_body(OffThread* off_thread, std::string& body) {
  off_thread->dispose(std::move(body));
}

void count(const SessionHooks* hooks, std::string_view reason) {
  if (hooks->count) {
    hooks->count(reason);
  }
}

// Marks the session busy for as long as it lives (one request and its response).
class BusyGuard {
 public:
  BusyGuard(SessionTracker* tracker, std::uint64_t id) : tracker_(tracker), id_(id) {
    if (tracker_ != nullptr) {
      tracker_->set_busy(id_, true);
    }
  }
  BusyGuard(const BusyGuard&) = delete;
  BusyGuard& operator=(const BusyGuard&) = delete;
  ~BusyGuard() {
    if (tracker_ != nullptr) {
      tracker_->set_busy(id_, false);
    }
  }

 private:
  SessionTracker* tracker_;
  std::uint64_t id_;
};

// Answers a request refused before its handler. Its own frame: the reply's strings are not
// kept in the session's frame, which lives as long as the connection.
asio::awaitable<void> send_refusal(ResponseWriter* writer, const ErrorReply* reply) {
  co_await writer->send_reply(*reply);
}

// Ends a response its handler did not finish: 500, or an error event ending a started stream.
// Its own frame, for the same reason.
asio::awaitable<void> end_unanswered(ResponseWriter* writer, bool threw) {
  writer->refuse_keep_alive();
  const char* message = threw ? "the server failed while handling this request"
                              : "the server ended this request without an answer";
  co_await writer->send_error(500, message, "internal_error");
}

}  // namespace

BodyStream::BodyStream(Conn* conn, beast::flat_buffer* buffer, RequestReader* reader,
                       const ReadTimeouts& timeouts, StreamedBody streamed, HeadFacts facts)
    : conn_(conn),
      buffer_(buffer),
      reader_(reader),
      timeouts_(timeouts),
      streamed_(std::move(streamed)),
      facts_(facts),
      start_(Clock::now()),
      complete_(reader->state() == RequestReader::State::done) {}

asio::awaitable<BodyStream::Piece> BodyStream::next() {
  Piece piece;
  for (;;) {
    if (failure_) {
      piece.failure = failure_;
      co_return piece;
    }
    if (complete_) {
      piece.end = true;
      co_return piece;
    }
    if (buffer_->size() > 0) {
      const auto data = buffer_->data();
      buffer_->consume(
          reader_->feed(std::string_view(static_cast<const char*>(data.data()), data.size())));
    }
    if (reader_->state() == RequestReader::State::failed) {
      failure_ = reader_->failure();
      continue;
    }
    piece.data = reader_->take_body();
    received_ += piece.data.size();
    complete_ = reader_->state() == RequestReader::State::done;
    if (!piece.data.empty() || complete_) {
      piece.end = complete_;
      co_return piece;
    }
    const auto left =
        start_ + streamed_body_allowance(timeouts_, received_, kBytesPerTimeout) - Clock::now();
    if (left <= Clock::duration::zero()) {
      failure_ = ReadFailure::body_timeout;
      continue;
    }
    asio::mutable_buffer space;
    try {
      space = buffer_->prepare(kStreamReadChunk);
    } catch (const std::length_error&) {
      // The buffer holds an unfinished chunk line or trailer as long as its maximum: a client's
      // malformed body, not our failure (as read_request treats it).
      failure_ = ReadFailure::malformed;
      continue;
    }
    conn_->expires_after(left);
    auto [ec, n] = co_await conn_->read_some(space);
    if (ec == beast::error::timeout) {
      failure_ = ReadFailure::body_timeout;
      continue;
    }
    if (ec) {
      reader_->feed_eof();
      failure_ = reader_->failure();
      continue;
    }
    buffer_->commit(n);
  }
}

std::optional<ErrorReply> BodyStream::failure_reply(ReadFailure failure) const {
  return net::failure_reply(failure, streamed_.limit, streamed_.limit_key);
}

std::uint64_t BodyStream::unread() const {
  if (facts_.chunked || !facts_.content_length || *facts_.content_length > streamed_.limit) {
    return 0;
  }
  return *facts_.content_length > received_ ? *facts_.content_length - received_ : 0;
}

asio::awaitable<void> watch_client(ServerRequest r) {
  co_await watch_client(r.conn, r.buffer, r.pipeline_cap);
}

asio::awaitable<void> serve_session(const SessionHooks* hooks, std::unique_ptr<Conn> conn) {
  struct Tracked {
    SessionTracker* tracker;
    std::uint64_t id;
    ~Tracked() {
      if (tracker != nullptr) {
        tracker->remove(id);
      }
    }
  } tracked{hooks->tracker, hooks->tracker ? hooks->tracker->add(conn.get()) : 0};

  SessionLimits limits = hooks->limits();
  beast::flat_buffer buffer(limits.header_limit + limits.pipeline_cap + 2 * kReadChunk);
  std::uint64_t linger = kLingerBytes;
  for (bool again = true; again;) {
    limits = hooks->limits();
    Request request;
    // On the heap, and only while it is needed: a handler may hold this frame for minutes (a
    // streamed answer), and the reader's two parsers are 720 bytes.
    auto reader = std::make_unique<RequestReader>(limits.header_limit);
    const ReadResult read =
        co_await read_request(conn.get(), &buffer, &limits, hooks, *reader, &request);
    const std::string reason = read.kind == ReadResult::Kind::failed
                                   ? std::string(failure_reason(read.failure))
                                   : read.reason;
    if (!reason.empty()) {
      count(hooks, reason);
    }
    if (read.kind == ReadResult::Kind::failed && !read.reply) {
      break;  // the client left, an idle connection timed out, or a slow one was cut
    }
    BusyGuard busy(hooks->tracker, tracked.id);
    const bool draining = hooks->tracker != nullptr && hooks->tracker->draining();
    std::string request_id = read.kind == ReadResult::Kind::failed
                                 ? new_request_id(*hooks->id_rng)
                                 : request_id_for(request["X-Request-Id"], *hooks->id_rng);
    // A body left unread ends the connection: its bytes cannot be told from the next request.
    const bool keep_alive = read.kind != ReadResult::Kind::failed && !read.must_close &&
                            request.keep_alive() && !draining;
    ResponseWriter writer(*conn, std::move(request_id), keep_alive, limits.write_timeout);
    if (hooks->error_api && read.kind != ReadResult::Kind::failed) {
      writer.set_error_api(hooks->error_api(request));
    }

    if (read.kind != ReadResult::Kind::request) {
      linger = kLingerBytes + read.unread_body;
      co_await send_refusal(&writer, &*read.reply);
      again = writer.keep_alive() && writer.finished();
      continue;
    }

    std::unique_ptr<BodyStream> body;
    if (read.streamed) {
      body = std::make_unique<BodyStream>(conn.get(), &buffer, reader.get(), limits.timeouts,
                                          *read.streamed, read.facts);
    } else {
      reader.reset();
    }
    bool threw = false;
    std::string exception_type;
    try {
      again = co_await hooks->handle(
          ServerRequest{conn.get(), &buffer, &request, &writer, limits.pipeline_cap, body.get()});
    } catch (...) {
      threw = true;
      exception_type = current_exception_type();
    }
    if (threw) {
      // A bug, not the client's fault: say so once, and never leave the client hanging.
      log::error("request handler failed", {{"listener", hooks->listener},
                                            {"request_id", writer.request_id()},
                                            {"exception", exception_type}});
      count(hooks, "exception");
    }
    if (threw || !writer.finished()) {
      // A handler that failed, or ended without completing its answer (the client went away,
      // or a stream broke): end what can still be ended, then close.
      co_await end_unanswered(&writer, threw);
      again = false;
    }
    if (writer.timed_out()) {
      count(hooks, "write_timeout");
    }
    again = again && writer.keep_alive() && writer.finished();
    if (hooks->off_thread != nullptr && request.body().size() > kDisposeBody) {
      dispose_body(hooks->off_thread, request.body());
    }
    if (body && !body->complete()) {
      // The handler answered before the end of its body: the rest cannot be told from a next
      // request. Read and drop what is still declared, so the answer is not lost to a reset.
      again = false;
      linger = kLingerBytes + body->unread();
    }
  }
  // Lingering close: half-close, then read what the client still sends until it closes too, so
  // that unread input does not turn the last response into a reset.
  co_await conn->shutdown();
  co_await drain_and_close(conn.get(), linger);
}

}  // namespace fg::net
