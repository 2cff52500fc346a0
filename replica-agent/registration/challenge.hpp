#pragma once

// The gateway's proof of URL control (issue 12): before a registered URL receives traffic the
// gateway sends GET <url>/fleetgate/v1/challenge?nonce=<64 hex> through that URL, and the agent
// answers {"hmac": hex(HMAC-SHA256(key = its per-replica secret, msg = kChallengePrefix + nonce))}.
// Only the agent that registered (and so holds the secret) can answer for the URL. Pure.

#include <optional>
#include <string>
#include <string_view>

namespace fg::agent {

inline constexpr std::string_view kChallengePrefix = "fleetgate-url-challenge:";
inline constexpr std::size_t kNonceLength = 64;

// Exactly 64 hexadecimal digits (either case).
bool valid_challenge_nonce(std::string_view nonce);

// Lower-case hex of HMAC-SHA256(key = secret, message = kChallengePrefix + nonce) (OpenSSL).
std::string challenge_hmac(std::string_view secret, std::string_view nonce);

// The value of the first name=value pair of a request target's query ("/p?a=1&b=2"), not
// percent-decoded; nullopt when absent.
std::optional<std::string_view> query_value(std::string_view target, std::string_view name);

}  // namespace fg::agent
