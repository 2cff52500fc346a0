#include "common/util/text.hpp"

#include <algorithm>
#include <cctype>

#include <openssl/crypto.h>
#include <openssl/sha.h>

namespace fg {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1);
  std::vector<std::size_t> cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) {
    prev[j] = j;
  }
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t subst = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, subst});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string closest_word(std::string_view word, const std::vector<std::string>& known) {
  std::string best;
  std::size_t best_distance = 3;
  for (const auto& candidate : known) {
    const std::size_t d = edit_distance(word, candidate);
    if (d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

bool is_env_name(std::string_view s) {
  if (s.empty()) {
    return false;
  }
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0)) {
      return false;
    }
  }
  return true;
}

}  // namespace fg

namespace fg {

namespace {

using Digest = std::array<unsigned char, SHA256_DIGEST_LENGTH>;

Digest sha256(std::string_view text) {
  Digest digest;
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest.data());
  return digest;
}

}  // namespace

std::optional<std::string_view> bearer_credentials(std::string_view header) {
  constexpr std::string_view kScheme = "bearer";
  if (header.size() <= kScheme.size() || header[kScheme.size()] != ' ') {
    return std::nullopt;
  }
  for (std::size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) {
      return std::nullopt;
    }
  }
  std::string_view rest = header.substr(kScheme.size());
  rest.remove_prefix(std::min(rest.find_first_not_of(' '), rest.size()));
  if (rest.empty()) {
    return std::nullopt;
  }
  return rest;
}

bool bearer_matches(std::string_view header, std::string_view token) {
  if (token.empty()) {
    return false;
  }
  auto given = bearer_credentials(header);
  // Hashed even when absent, so a missing header costs the same as a wrong one.
  const Digest got = sha256(given.value_or(std::string_view{}));
  const Digest want = sha256(token);
  return CRYPTO_memcmp(got.data(), want.data(), want.size()) == 0 && given.has_value();
}

BearerKeys::BearerKeys(const std::vector<std::string>& keys) {
  for (const auto& key : keys) {
    if (!key.empty()) {
      digests_.push_back(sha256(key));
    }
  }
}

bool BearerKeys::matches(std::string_view header) const {
  return match(header).has_value();
}

std::optional<std::size_t> BearerKeys::match(std::string_view header) const {
  auto given = bearer_credentials(header);
  const Digest got = sha256(given.value_or(std::string_view{}));
  std::optional<std::size_t> found;
  for (std::size_t i = 0; i < digests_.size(); ++i) {
    const bool equal = CRYPTO_memcmp(got.data(), digests_[i].data(), digests_[i].size()) == 0;
    if (equal && !found) {
      found = i;
    }
  }
  if (!given) {
    return std::nullopt;
  }
  return found;
}

bool has_control_character(std::string_view text) {
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      return true;
    }
  }
  return false;
}

}  // namespace fg
