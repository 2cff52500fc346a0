#include "orchestrator/fleet/url_challenge.hpp"

#include <algorithm>
#include <array>
#include <cctype>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <nlohmann/json.hpp>

#include "common/util/json.hpp"
#include "common/util/secret.hpp"

namespace fg::fleet {

namespace {

constexpr std::size_t kNonceHexLength = 64;
constexpr std::chrono::milliseconds kRetryBase{250};
constexpr std::chrono::milliseconds kRetryMax{30'000};

bool is_hex(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) != 0;
}

std::string to_hex(const unsigned char* data, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[data[i] >> 4]);
    out.push_back(kDigits[data[i] & 0x0f]);
  }
  return out;
}

ChallengeVerdict fail(std::string why) {
  return {false, std::move(why)};
}

}  // namespace

std::string make_challenge_nonce() {
  return random_secret(kNonceHexLength / 2);
}

bool valid_challenge_nonce(std::string_view nonce) {
  return nonce.size() == kNonceHexLength && std::all_of(nonce.begin(), nonce.end(), is_hex);
}

std::string challenge_hmac(std::string_view secret, std::string_view nonce) {
  std::string message(kChallengeMessagePrefix);
  message.append(nonce);
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  // An empty key is valid for HMAC; OpenSSL wants a non-null pointer for it.
  static const unsigned char kEmpty = 0;
  const auto* key =
      secret.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(secret.data());
  HMAC(EVP_sha256(), key, static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest.data(),
       &length);
  return to_hex(digest.data(), length);
}

std::string challenge_target(std::string_view path_prefix, std::string_view nonce) {
  std::string target(path_prefix);
  target.append(kChallengePath);
  target.append("?nonce=");
  target.append(nonce);
  return target;
}

ChallengeVerdict judge_challenge(const ChallengeFetch& fetch, std::string_view secret,
                                 std::string_view nonce) {
  if (!fetch.error.empty()) {
    return fail(fetch.error);
  }
  if (fetch.status != 200) {
    return fail("HTTP " + std::to_string(fetch.status));
  }
  const nlohmann::json doc = parse_network_json(fetch.body);
  if (doc.is_discarded() || !doc.is_object()) {
    return fail("answer is not a JSON object");
  }
  auto it = doc.find("hmac");
  if (it == doc.end() || !it->is_string()) {
    return fail("answer has no \"hmac\" string");
  }
  std::string presented = it->get<std::string>();
  std::transform(presented.begin(), presented.end(), presented.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const std::string expected = challenge_hmac(secret, nonce);
  if (presented.size() != expected.size() ||
      CRYPTO_memcmp(presented.data(), expected.data(), expected.size()) != 0) {
    return fail("wrong hmac");
  }
  return {true, ""};
}

std::chrono::milliseconds challenge_retry_delay(std::uint32_t failures) {
  std::chrono::milliseconds delay = kRetryBase;
  for (std::uint32_t i = 1; i < failures && delay < kRetryMax; ++i) {
    delay *= 2;
  }
  return std::min(delay, kRetryMax);
}

}  // namespace fg::fleet
