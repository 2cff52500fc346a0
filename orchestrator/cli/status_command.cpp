#include "orchestrator/cli/status_command.hpp"

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <nlohmann/json.hpp>

#include "common/net/url.hpp"
#include "orchestrator/cli/status_report.hpp"

namespace fg::cli {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct Fetched {
  unsigned status = 0;
  std::string body;
};

template <class Stream>
Fetched exchange(Stream& stream, const net::Url& url, const std::string& token) {
  http::request<http::empty_body> req{http::verb::get, url.path_prefix + "/admin/v1/status", 11};
  req.set(http::field::host, url.host_header());
  req.set(http::field::accept, "application/json");
  req.set(http::field::user_agent, "fleetgate-status");
  if (!token.empty()) {
    req.set(http::field::authorization, "Bearer " + token);
  }
  http::write(stream, req);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 * 1024 * 1024);
  http::read(stream, buffer, parser);
  return {parser.get().result_int(), parser.get().body()};
}

// One GET /admin/v1/status, 5 s at most. Throws on a connection or protocol error.
Fetched fetch(const net::Url& url, const std::string& token) {
  asio::io_context io;
  tcp::resolver resolver(io);
  const auto endpoints = resolver.resolve(url.host, std::to_string(url.port));
  if (!url.tls()) {
    beast::tcp_stream stream(io);
    stream.expires_after(std::chrono::seconds(5));
    stream.connect(endpoints);
    return exchange(stream, url, token);
  }
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  ctx.set_default_verify_paths();
  ctx.set_verify_mode(asio::ssl::verify_peer);
  beast::ssl_stream<beast::tcp_stream> stream(io, ctx);
  SSL_set_tlsext_host_name(stream.native_handle(), url.host.c_str());
  stream.set_verify_callback(asio::ssl::host_name_verification(url.host));
  beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(5));
  beast::get_lowest_layer(stream).connect(endpoints);
  stream.handshake(asio::ssl::stream_base::client);
  return exchange(stream, url, token);
}

// Fetches and prints once; returns the exit code.
int show(const net::Url& url, const std::string& token, bool clear) {
  Fetched got;
  try {
    got = fetch(url, token);
  } catch (const boost::system::system_error& e) {
    std::cerr << "fleetgate status: cannot reach " << url.to_string() << ": " << e.code().message()
              << "\n";
    return kStatusCannotConnect;
  } catch (const std::exception& e) {
    std::cerr << "fleetgate status: cannot reach " << url.to_string() << ": " << e.what() << "\n";
    return kStatusCannotConnect;
  }
  if (got.status == 401 || got.status == 403) {
    std::cerr << "fleetgate status: " << url.to_string() << " refused the admin token (HTTP "
              << got.status << "); pass --token or set " << kAdminTokenEnv << "\n";
    return kStatusUnauthorized;
  }
  if (got.status != 200) {
    std::cerr << "fleetgate status: " << url.to_string() << "/admin/v1/status answered HTTP "
              << got.status << "\n";
    return kStatusCannotConnect;
  }
  try {
    const auto status = nlohmann::json::parse(got.body);
    const std::string text = render_status(status);
    // Home the cursor and clear the screen, then draw: one write, so the redraw does not flicker.
    std::cout << (clear ? "\x1b[H\x1b[2J" : "") << text << std::flush;
    return status_exit_code(status);
  } catch (const nlohmann::json::exception& e) {
    std::cerr << "fleetgate status: " << url.to_string()
              << " did not answer with fleetgate's status JSON: " << e.what() << "\n";
    return kStatusCannotConnect;
  }
}

}  // namespace

int run_status_command(const std::vector<std::string>& args) {
  std::string error;
  const auto parsed =
      parse_status_args(args, std::getenv(std::string(kAdminTokenEnv).c_str()), &error);
  if (!parsed) {
    std::cerr << "fleetgate status: " << error << "\n" << status_usage();
    return kStatusUsage;
  }
  if (parsed->help) {
    std::cout << status_usage();
    return 0;
  }
  const auto url = net::parse_url(parsed->admin_url, &error);
  if (!url) {
    std::cerr << "fleetgate status: --admin: " << error << "\n";
    return kStatusUsage;
  }
  if (!parsed->watch) {
    return show(*url, parsed->token, false);
  }
  // --watch: redraw every second until interrupted (Ctrl-C ends the process); a failed fetch is
  // reported and retried, it does not end the watch.
  for (;;) {
    show(*url, parsed->token, true);
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

}  // namespace fg::cli
