#include "orchestrator/health/probe.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>

namespace fg::health {

namespace asio = boost::asio;
namespace http = boost::beast::http;

std::string probe_request(const net::Url& url, std::string_view path,
                          std::string_view authorization) {
  std::string request = "GET ";
  request.append(url.path_prefix).append(path).append(" HTTP/1.1\r\nHost: ");
  request.append(url.host_header()).append("\r\nUser-Agent: fleetgate-health\r\nAccept: */*\r\n");
  if (!authorization.empty()) {
    request.append("Authorization: ").append(authorization).append("\r\n");
  }
  request.append("\r\n");
  return request;
}

ProbeParser::ProbeParser(std::string* body) : body_(body) {
  eager(true);
  body_limit(kMaxProbeBody);
}

std::size_t ProbeParser::on_body_impl(string_view data, error_code&) {
  body_->append(data.data(), data.size());
  return data.size();
}

std::size_t ProbeParser::on_chunk_body_impl(std::uint64_t, string_view data, error_code&) {
  body_->append(data.data(), data.size());
  return data.size();
}

ProbeAnswer read_probe_answer(std::string_view bytes, bool eof, std::string* body) {
  ProbeAnswer answer;
  ProbeParser parser(body);
  while (!parser.is_done() && !bytes.empty()) {
    boost::system::error_code ec;
    const std::size_t used = parser.put(asio::buffer(bytes.data(), bytes.size()), ec);
    bytes.remove_prefix(used);
    if (ec == http::error::need_more || (!ec && used == 0)) {
      break;
    }
    if (ec) {
      answer.state = ProbeAnswer::State::bad;
      return answer;
    }
  }
  if (!parser.is_done() && eof) {
    // Only an answer delimited by the end of the connection may end here.
    boost::system::error_code ec;
    parser.put_eof(ec);
    if (ec) {
      answer.state = ProbeAnswer::State::bad;
      return answer;
    }
  }
  if (!parser.is_done()) {
    return answer;
  }
  answer.state = ProbeAnswer::State::done;
  answer.status = parser.status();
  answer.keep_alive = parser.keep_alive() && !eof;
  answer.extra_bytes = !bytes.empty();
  return answer;
}

}  // namespace fg::health
