#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/core/error.hpp>

#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "common/net/request_rules.hpp"

namespace fg::net {

using Request = boost::beast::http::request<boost::beast::http::string_body>;

// A body that only collects what the parser hands it, without reserving its declared length
// first (string_body reserves it): a streamed body is taken out piece by piece (take_body), so
// its declared length is never allocated.
struct PieceBody {
  using value_type = std::string;
  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(boost::beast::http::header<isRequest, Fields>&, value_type& body) : body_(body) {}
    void init(const boost::optional<std::uint64_t>&, boost::beast::error_code& ec) { ec = {}; }
    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& ec) {
      std::size_t n = 0;
      for (auto b : boost::beast::buffers_range_ref(buffers)) {
        body_.append(static_cast<const char*>(b.data()), b.size());
        n += b.size();
      }
      ec = {};
      return n;
    }
    void finish(boost::beast::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };
};

// Parses one HTTP/1.1 request from bytes handed to it, in two steps: it stops once the head is in
// (head_done), so that the caller can judge the head before any body byte is read, and goes on
// with the body only after accept_body. Needs no socket: the session loop feeds it what it reads,
// a fuzzer what it makes up.
class RequestReader {
 public:
  enum class State { reading_head, head_done, reading_body, done, failed };

  // header_limit: the most bytes a head (request line, fields and the blank line) may have.
  explicit RequestReader(std::size_t header_limit);

  // Parses what it can of bytes and returns how many it used; the rest is not needed yet (a
  // head waiting for accept_body) or belongs to a later request. A head is used only once it is
  // complete, so the caller keeps the unused bytes and feeds them again with more.
  std::size_t feed(std::string_view bytes);
  // The peer closed: a request in the middle of its body or head is malformed (a body that ends
  // with the connection is not allowed in requests).
  void feed_eof();
  // After head_done: read a body of at most body_limit bytes (a chunked body is cut there).
  void accept_body(std::uint64_t body_limit);
  // After head_done, instead of accept_body: the body (at most body_limit bytes) is parsed as it
  // is fed and handed out by take_body, never held whole. message() stays the head.
  void stream_body(std::uint64_t body_limit);
  bool streaming() const { return stream_.has_value(); }
  // Streaming: the body bytes parsed since the last call (empty when none).
  std::string take_body();

  State state() const { return state_; }
  // Whether any byte of this request arrived (its head phase started).
  bool started() const { return started_; }
  // Valid once failed: malformed, header_too_large or body_too_large.
  ReadFailure failure() const { return failure_; }
  // Valid from head_done on.
  HeadFacts head_facts() const;
  const Request& message() const { return stream_ ? head_ : parser_.get(); }
  // Once done (or once streaming): the whole request (the head alone when streaming); the reader
  // is spent.
  Request release() { return stream_ ? std::move(head_) : parser_.release(); }

 private:
  void fail(ReadFailure failure);
  template <class Parser>
  std::size_t feed_to(Parser& parser, std::string_view bytes);

  // Streaming: the parser the head's parser became (same state, a body type that holds only the
  // pieces not taken yet), and a copy of the head for message().
  std::optional<boost::beast::http::request_parser<PieceBody>> stream_;
  Request head_;

  boost::beast::http::request_parser<boost::beast::http::string_body> parser_;
  // Beast applies its header limit to the request line and to the fields separately when a
  // head arrives in one piece (so up to twice the limit passed, depending on how the bytes were
  // split): the whole head is measured here too.
  std::size_t header_limit_;
  std::size_t head_bytes_ = 0;  // bytes of the head the parser used so far
  State state_ = State::reading_head;
  ReadFailure failure_ = ReadFailure::malformed;
  bool started_ = false;
};

}  // namespace fg::net
