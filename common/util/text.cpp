#include "common/util/text.hpp"

#include <algorithm>

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

bool bearer_matches(std::string_view header, std::string_view token) {
  constexpr std::string_view kBearer = "Bearer ";
  if (token.empty() || header.size() != kBearer.size() + token.size() ||
      header.substr(0, kBearer.size()) != kBearer) {
    return false;
  }
  unsigned char diff = 0;
  for (std::size_t i = 0; i < token.size(); ++i) {
    diff |= static_cast<unsigned char>(header[kBearer.size() + i]) ^
            static_cast<unsigned char>(token[i]);
  }
  return diff == 0;
}

}  // namespace fg
