#pragma once

// Proof of URL control (issue 12, item 5). A registration names a URL; before that URL gets
// traffic the gateway fetches GET <url>/fleetgate/v1/challenge?nonce=<64 hex> through it, and the
// agent behind it must answer {"hmac": hex HMAC-SHA256(key = its per-replica secret,
// msg = "fleetgate-url-challenge:" + nonce)}. Only the agent the gateway gave the secret to can
// answer, so nobody can register a URL that points at a server they do not run. Pure: the nonce
// source is passed in, the fetch lives in url_challenge_fetch.*, time is the caller's.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace fg::fleet {

inline constexpr std::string_view kChallengePath = "/fleetgate/v1/challenge";
inline constexpr std::string_view kChallengeMessagePrefix = "fleetgate-url-challenge:";
// The reason a replica that has not passed shows while it stays joining.
inline constexpr std::string_view kChallengeFailedPrefix = "url_challenge_failed: ";
// A challenge answer larger than this is not read further (a real one is ~80 bytes).
inline constexpr std::size_t kMaxChallengeBody = 4096;

// A fresh nonce: 32 bytes from the CSPRNG as 64 lower-case hex characters.
std::string make_challenge_nonce();

// Whether text is a nonce the agent accepts: exactly 64 hex characters.
bool valid_challenge_nonce(std::string_view nonce);

// Lower-case hex HMAC-SHA256(key = secret, msg = kChallengeMessagePrefix + nonce).
std::string challenge_hmac(std::string_view secret, std::string_view nonce);

// The path and query a challenge is fetched at, below the replica URL's path prefix.
std::string challenge_target(std::string_view path_prefix, std::string_view nonce);

// What one fetch brought back. error: why there was no HTTP answer ("timeout", "connect",
// "tls", "read", "bad response"); empty when there was one.
struct ChallengeFetch {
  std::string error;
  unsigned status = 0;
  std::string body;
};

struct ChallengeVerdict {
  bool passed = false;
  std::string why;  // for a failure: short, never echoes the body or a secret
};

// Judges an answer: HTTP 200 with a JSON object whose "hmac" equals challenge_hmac(secret,
// nonce) (compared in constant time, case-insensitively) passes; anything else fails with why.
ChallengeVerdict judge_challenge(const ChallengeFetch& fetch, std::string_view secret,
                                 std::string_view nonce);

// How long to wait before the next attempt after `failures` failed ones (>= 1): 250 ms doubled
// each time, at most 30 s. The first failure is common and harmless: the gateway asks at once,
// and the agent may not yet hold the secret its registration answer carries (it answers 503).
std::chrono::milliseconds challenge_retry_delay(std::uint32_t failures);

}  // namespace fg::fleet
