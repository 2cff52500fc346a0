#pragma once

#include <chrono>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>

#include "common/net/url.hpp"
#include "orchestrator/fleet/url_challenge.hpp"

namespace fg::fleet {

// One challenge fetch: GET challenge_target(url.path_prefix, nonce) on a fresh connection to the
// registered URL (TLS verified as for traffic), within timeout, the body cut at
// kMaxChallengeBody. Decides nothing: judge_challenge does.
boost::asio::awaitable<ChallengeFetch> fetch_challenge(net::Url url, std::string nonce,
                                                       boost::asio::ssl::context* tls,
                                                       std::chrono::milliseconds timeout,
                                                       std::string authorization);

}  // namespace fg::fleet
