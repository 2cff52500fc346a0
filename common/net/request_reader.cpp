#include "common/net/request_reader.hpp"

#include <boost/beast/http/error.hpp>

namespace fg::net {

namespace http = boost::beast::http;

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

RequestReader::RequestReader(std::size_t header_limit) : header_limit_(header_limit) {
  parser_.header_limit(static_cast<std::uint32_t>(header_limit));
  // The declared length is judged by decide_head (after the application's own verdict), so the
  // parser must not refuse it first; accept_body sets the real limit.
  parser_.body_limit(boost::none);
  // Stop after the head: the body is parsed only once accepted.
  parser_.eager(false);
}

void RequestReader::fail(ReadFailure failure) {
  state_ = State::failed;
  failure_ = failure;
}

std::size_t RequestReader::feed(std::string_view bytes) {
  if (state_ == State::head_done || state_ == State::done || state_ == State::failed) {
    return 0;
  }
  std::size_t used = 0;
  while (used < bytes.size()) {
    started_ = true;
    boost::beast::error_code ec;
    const std::size_t n =
        parser_.put(boost::asio::const_buffer(bytes.data() + used, bytes.size() - used), ec);
    used += n;
    if (state_ == State::reading_head) {
      head_bytes_ += n;
    }
    if (ec == http::error::need_more) {
      break;
    }
    if (ec == http::error::header_limit) {
      fail(ReadFailure::header_too_large);
      return used;
    }
    if (ec == http::error::body_limit) {
      fail(ReadFailure::body_too_large);
      return used;
    }
    if (ec) {
      fail(ReadFailure::malformed);
      return used;
    }
    // A head is judged before anything else, even when it completes the request (no body).
    if (state_ == State::reading_head && parser_.is_header_done()) {
      if (head_bytes_ > header_limit_) {
        fail(ReadFailure::header_too_large);
        return used;
      }
      state_ = State::head_done;
      return used;
    }
    if (parser_.is_done()) {
      state_ = State::done;
      return used;
    }
    if (n == 0) {
      break;
    }
  }
  return used;
}

void RequestReader::feed_eof() {
  if (state_ == State::done || state_ == State::failed) {
    return;
  }
  fail(started_ ? ReadFailure::malformed : ReadFailure::closed);
}

void RequestReader::accept_body(std::uint64_t body_limit) {
  if (state_ != State::head_done) {
    return;
  }
  if (parser_.is_done()) {
    state_ = State::done;
    return;
  }
  parser_.body_limit(body_limit);
  parser_.eager(true);
  state_ = State::reading_body;
}

HeadFacts RequestReader::head_facts() const {
  HeadFacts facts;
  if (auto length = parser_.content_length()) {
    facts.content_length = *length;
  }
  facts.chunked = parser_.chunked();
  facts.expect_continue = iequals(parser_.get()[http::field::expect], "100-continue");
  return facts;
}

}  // namespace fg::net
