#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>

#include "common/net/url.hpp"

namespace fg::agent {

// The outcome of one small HTTP exchange (registration, heartbeat, engine probes).
struct HttpResult {
  bool answered = false;  // a whole response arrived (any status)
  unsigned status = 0;
  std::string body;
  std::string error;  // why not answered: "connect", "tls", "timeout", "read", "bad response"
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// One request on a fresh connection (closed afterwards), all within timeout: base's path prefix
// + path, an optional bearer token, JSON body and extra headers (values must be free of CR and
// LF). tls is used for https URLs. Bodies above 1 MiB count as a bad response. Honours the
// coroutine's cancellation.
boost::asio::awaitable<HttpResult> http_call(net::Url base, std::string method, std::string path,
                                             std::string bearer, std::string json_body,
                                             boost::asio::ssl::context* tls,
                                             std::chrono::milliseconds timeout,
                                             HttpHeaders headers = {});

}  // namespace fg::agent
