// Fuzz target: reading HTTP requests (common/net/request_reader over bytes, with the pure
// decisions of common/net/request_rules), as the server session loop does it: bytes arrive in
// chunks, unused bytes stay buffered, a complete head is judged (decide_head) before its body
// is read, and what follows a request is the next one (pipelining). The front of the input sets
// the header and body limits and the chunk lengths; the rest is what the client sends.
// Asserted: the requests read, their bodies and how reading ends do not depend on how the bytes
// were split; a head still being read never holds more than the header limit; a body never
// exceeds the body limit; every failure has its reply (or is a silent close).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/net/request_reader.hpp"
#include "common/net/request_rules.hpp"
#include "tests/fuzz/fuzz_input.hpp"

namespace {

using fg::net::RequestReader;

constexpr int kMaxRequests = 16;

// How reading ended, for the comparison. A bad head is one outcome however it is found: Beast
// checks the request line as soon as it sees it whole in one piece, but once it has asked for
// more it looks only for the end of the head, so a split input can find the same bad head later
// (at the end of the head, the header limit or the close) than the whole one.
std::string ended(fg::net::ReadFailure failure) {
  switch (failure) {
    case fg::net::ReadFailure::closed:
      return "closed;";
    case fg::net::ReadFailure::malformed:
    case fg::net::ReadFailure::header_too_large:
      return "bad request;";
    default:
      return std::string(fg::net::failure_reason(failure)) + ";";
  }
}

std::string read_all(const std::vector<std::string_view>& chunks, std::size_t header_limit,
                     std::uint64_t body_limit) {
  std::string log;  // what happened, framed so that two runs compare exactly
  std::string buffer;
  std::size_t next_chunk = 0;
  for (int requests = 0; requests < kMaxRequests; ++requests) {
    RequestReader reader(header_limit);
    bool eof = false;
    for (;;) {
      if (!buffer.empty()) {
        const std::size_t used = reader.feed(buffer);
        FUZZ_CHECK(used <= buffer.size(), "feed uses at most what it is given");
        buffer.erase(0, used);
      }
      if (reader.state() == RequestReader::State::reading_head) {
        FUZZ_CHECK(buffer.size() <= header_limit, "an incomplete head is held up to the limit");
      }
      if (reader.state() == RequestReader::State::head_done) {
        const fg::net::HeadFacts facts = reader.head_facts();
        const auto decision = fg::net::decide_head(facts, std::nullopt, body_limit, "body_limit");
        if (decision.reply) {
          FUZZ_CHECK(decision.reply->status == 413, "only a declared length is refused here");
          FUZZ_CHECK(facts.content_length.value_or(0) > body_limit, "413 only beyond the limit");
          log += "refused " + std::to_string(decision.reply->status) + ";";
          return log;
        }
        reader.accept_body(body_limit);
        FUZZ_CHECK(reader.state() != RequestReader::State::head_done, "accept_body moves on");
        continue;
      }
      if (reader.state() == RequestReader::State::done) {
        const auto request = reader.release();
        FUZZ_CHECK(request.body().size() <= body_limit, "a body is at most the body limit");
        log += std::string(request.method_string()) + " " + std::string(request.target()) + " " +
               std::to_string(request.body().size()) + ":" + request.body() + ";";
        break;
      }
      if (reader.state() == RequestReader::State::failed) {
        const auto failure = reader.failure();
        const auto reply = fg::net::failure_reply(failure, body_limit, "body_limit");
        FUZZ_CHECK(!reply || (reply->status >= 400 && !reply->message.empty()),
                   "a failure is answered with an error or in silence");
        log += ended(failure);
        return log;
      }
      if (eof) {
        reader.feed_eof();
        FUZZ_CHECK(reader.state() == RequestReader::State::failed, "the end of input ends reading");
        const auto failure = reader.failure();
        FUZZ_CHECK(
            failure == fg::net::ReadFailure::closed || failure == fg::net::ReadFailure::malformed,
            "the end of input is a close or a cut request");
        FUZZ_CHECK((failure == fg::net::ReadFailure::closed) == !reader.started(),
                   "a close between requests is silent, one inside a request is not");
        log += ended(failure);
        return log;
      }
      if (next_chunk < chunks.size()) {
        buffer.append(chunks[next_chunk++]);
      } else {
        eof = true;
      }
    }
  }
  return log;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fg::fuzz::Input input(data, size);
  const std::size_t header_limit = 16 + input.u16() % 8192;
  const std::uint64_t body_limit = input.u16();
  std::vector<std::uint8_t> cuts(input.byte() % 32);
  for (auto& cut : cuts) {
    cut = input.byte();
  }
  const std::string_view bytes = input.rest();
  const std::string whole = read_all({bytes}, header_limit, body_limit);
  const std::string split = read_all(fg::fuzz::split(bytes, cuts), header_limit, body_limit);
  if (split != whole) {
    std::fprintf(stderr, "whole: %s\nsplit: %s\n", whole.c_str(), split.c_str());
  }
  FUZZ_CHECK(split == whole, "reading does not depend on how the bytes arrive");
  return 0;
}
