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
  return stream_ ? feed_to(*stream_, bytes) : feed_to(parser_, bytes);
}

template <class Parser>
std::size_t RequestReader::feed_to(Parser& parser, std::string_view bytes) {
  std::size_t used = 0;
  while (used < bytes.size()) {
    started_ = true;
    boost::beast::error_code ec;
    const std::size_t n =
        parser.put(boost::asio::const_buffer(bytes.data() + used, bytes.size() - used), ec);
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
    if (state_ == State::reading_head && parser.is_header_done()) {
      if (head_bytes_ > header_limit_) {
        fail(ReadFailure::header_too_large);
        return used;
      }
      state_ = State::head_done;
      return used;
    }
    if (parser.is_done()) {
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

void RequestReader::stream_body(std::uint64_t body_limit) {
  if (state_ != State::head_done) {
    return;
  }
  head_.base() = parser_.get().base();
  // Allowed: the head's parser has not started its body (eager(false) stopped it at the head).
  stream_.emplace(std::move(parser_));
  if (stream_->is_done()) {
    state_ = State::done;
    return;
  }
  stream_->body_limit(body_limit);
  stream_->eager(true);
  state_ = State::reading_body;
}

std::string RequestReader::take_body() {
  std::string out;
  if (stream_) {
    out.swap(stream_->get().body());
  }
  return out;
}

HeadFacts RequestReader::head_facts() const {
  HeadFacts facts;
  const auto length = stream_ ? stream_->content_length() : parser_.content_length();
  if (length) {
    facts.content_length = *length;
  }
  facts.chunked = stream_ ? stream_->chunked() : parser_.chunked();
  facts.expect_continue = iequals(message()[http::field::expect], "100-continue");
  return facts;
}

}  // namespace fg::net
