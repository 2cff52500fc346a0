#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <boost/beast/http/basic_parser.hpp>

#include "common/net/url.hpp"
#include "orchestrator/health/probe_body.hpp"

namespace fg::health {

// The bytes of a probe: GET {prefix}{path} with Host, User-Agent, Accept and, when given, the
// replicas' Authorization. Built once per replica and path, sent as they are for every probe.
std::string probe_request(const net::Url& url, std::string_view path,
                          std::string_view authorization);

// A probe's answer: its status, its body (at most kMaxProbeBody bytes, appended to *body) and
// whether the connection stays open. No header is kept: the probe needs none.
class ProbeParser final : public boost::beast::http::basic_parser<false> {
 public:
  static constexpr std::size_t kMaxProbeBody = 64 * 1024;

  explicit ProbeParser(std::string* body);
  unsigned status() const { return status_; }

 private:
  using string_view = boost::beast::string_view;
  using error_code = boost::beast::error_code;
  void on_request_impl(boost::beast::http::verb, string_view, string_view, int,
                       error_code&) override {}
  void on_response_impl(int code, string_view, int, error_code&) override {
    status_ = static_cast<unsigned>(code);
  }
  void on_field_impl(boost::beast::http::field, string_view, string_view, error_code&) override {}
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(boost::optional<std::uint64_t> const&, error_code&) override {}
  std::size_t on_body_impl(string_view data, error_code&) override;
  void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, string_view data, error_code&) override;
  void on_finish_impl(error_code&) override {}

  std::string* body_;
  unsigned status_ = 0;
};

// Reads one whole answer from bytes (the connection's end follows them when eof).
struct ProbeAnswer {
  enum class State { more, done, bad } state = State::more;  // more: the answer is not whole yet
  unsigned status = 0;
  bool keep_alive = false;
  bool extra_bytes = false;  // bytes after the answer (nobody asked for them)
};
ProbeAnswer read_probe_answer(std::string_view bytes, bool eof, std::string* body);

}  // namespace fg::health
