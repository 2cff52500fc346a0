#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/message.hpp>

#include "common/net/conn.hpp"
#include "common/net/request_reader.hpp"
#include "common/net/request_rules.hpp"

namespace fg::net {

namespace http = beast::http;

// Completes only when the client is gone (EOF or error), so it can run beside the work of a
// request (awaitable operator ||) and cancel it. Bytes the client pipelines meanwhile stay in
// buffer for the next request; past cap it stops reading (and so stops noticing a disconnect).
asio::awaitable<void> watch_client(Conn* conn, beast::flat_buffer* buffer, std::size_t cap);

// The second half of a lingering close (after conn->shutdown()): reads what the peer still sends
// until it closes too (at most 2 s, max_bytes), so unread input does not turn the last response
// into a reset (which makes the peer's kernel drop the response unread), then closes. The session
// raises max_bytes to a refused request's declared body, so a client that sends its body anyway
// still gets its answer.
inline constexpr std::uint64_t kLingerBytes = 256 * 1024;
asio::awaitable<void> drain_and_close(Conn* conn, std::uint64_t max_bytes = kLingerBytes);

// "HTTP/1.1 <status> <reason>\r\n" + headers + "\r\n". With content_length unset the body is
// sent chunked.
std::string response_head(unsigned status, std::string_view content_type,
                          std::optional<std::uint64_t> content_length,
                          const std::vector<Header>& extra, bool keep_alive);
// The same appended to head, with "X-Request-Id: request_id" (unless empty) before extra: what
// ResponseWriter sends, built without a vector of headers or a copy of the id.
void append_response_head(std::string& head, unsigned status, std::string_view content_type,
                          std::optional<std::uint64_t> content_length, std::string_view request_id,
                          const std::vector<Header>& extra, bool keep_alive);

// A complete response with a body of known length.
std::string full_response(unsigned status, std::string_view content_type, std::string_view body,
                          const std::vector<Header>& extra, bool keep_alive);

// One HTTP/1.1 chunk ("<hex>\r\n" + data + "\r\n"); data must not be empty.
std::string chunk(std::string_view data);
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

// A response parser that hands body bytes over as they arrive (chunked decoding included), for
// relaying. Only the headers the gateway uses are kept.
class ResponseParser final : public http::basic_parser<false> {
 public:
  ResponseParser() = default;

  unsigned status() const { return status_; }
  const std::string& content_type() const { return content_type_; }
  const std::string& retry_after() const { return retry_after_; }
  std::optional<std::uint64_t> declared_length() const { return declared_length_; }
  // Decoded body bytes received since the last take_body().
  std::string take_body() { return std::exchange(body_, {}); }
  std::size_t pending_body() const { return body_.size(); }

 private:
  void on_request_impl(http::verb, beast::string_view, beast::string_view, int,
                       error_code&) override {}
  void on_response_impl(int code, beast::string_view, int, error_code&) override {
    status_ = static_cast<unsigned>(code);
  }
  void on_field_impl(http::field name, beast::string_view, beast::string_view value,
                     error_code&) override;
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(boost::optional<std::uint64_t> const& length, error_code&) override;
  std::size_t on_body_impl(beast::string_view body, error_code&) override;
  void on_chunk_header_impl(std::uint64_t, beast::string_view, error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, beast::string_view body, error_code&) override;
  void on_finish_impl(error_code&) override {}

  unsigned status_ = 0;
  std::string content_type_;
  std::string retry_after_;
  std::optional<std::uint64_t> declared_length_;
  std::string body_;
};

}  // namespace fg::net
