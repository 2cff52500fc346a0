// Fuzz target: URL parsing (common/net/url) and the allowed_urls glob match (orchestrator/config:
// glob_match). The first line of the input is a pattern, the rest a URL. Asserted (issue 11,
// item 9, and url.hpp):
// - '*' and '?' never match ':', '/', '@', '[' or ']': in every match, each of those characters
//   of the text is matched by the same character written in the pattern, so the text has exactly
//   as many of each as the pattern has;
// - glob_match agrees with a plain backtracking reading of the documented rules;
// - a URL with userinfo (an '@' before the path) is refused; an accepted URL is http(s), has a
//   host, and its normalised form parses back to itself.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/net/url.hpp"
#include "orchestrator/config/config.hpp"
#include "tests/fuzz/fuzz_input.hpp"

namespace {

constexpr std::string_view kDelimiters = ":/@[]";

bool is_delimiter(char c) {
  return kDelimiters.find(c) != std::string_view::npos;
}

// The rules of config.hpp read literally, memoised so that it stays polynomial.
class Reference {
 public:
  Reference(std::string_view pattern, std::string_view text)
      : p_(pattern), t_(text), memo_((p_.size() + 1) * (t_.size() + 1), -1) {}
  bool match(std::size_t i = 0, std::size_t j = 0) {
    signed char& m = memo_[i * (t_.size() + 1) + j];
    if (m < 0) {
      m = compute(i, j) ? 1 : 0;
    }
    return m == 1;
  }

 private:
  bool compute(std::size_t i, std::size_t j) {
    if (i == p_.size()) {
      return j == t_.size();
    }
    if (p_[i] == '*') {
      // None, or one more character that is not a delimiter.
      return match(i + 1, j) || (j < t_.size() && !is_delimiter(t_[j]) && match(i, j + 1));
    }
    if (j == t_.size()) {
      return false;
    }
    if (p_[i] == '?') {
      return !is_delimiter(t_[j]) && match(i + 1, j + 1);
    }
    return p_[i] == t_[j] && match(i + 1, j + 1);
  }

  std::string_view p_;
  std::string_view t_;
  std::vector<signed char> memo_;
};

void check_glob(std::string_view pattern, std::string_view text) {
  const bool matched = fg::config::glob_match(pattern, text);
  FUZZ_CHECK(matched == Reference(pattern, text).match(), "glob_match follows its rules");
  if (matched) {
    for (const char d : kDelimiters) {
      const auto count = [d](std::string_view s) {
        std::size_t n = 0;
        for (const char c : s) {
          n += c == d ? 1 : 0;
        }
        return n;
      };
      FUZZ_CHECK(count(text) == count(pattern), "a wildcard never matches : / @ [ ]");
    }
  }
  if (pattern.find_first_of("*?") == std::string_view::npos) {
    FUZZ_CHECK(matched == (pattern == text), "a pattern without wildcards is an equality");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fg::fuzz::Input input(data, size);
  const std::string_view pattern = input.line().substr(0, 512);
  const std::string_view text = input.rest().substr(0, 512);

  check_glob(pattern, text);

  std::string error;
  const auto url = fg::net::parse_url(text, &error);
  const auto scheme_end = text.find("://");
  if (scheme_end != std::string_view::npos) {
    const std::string_view after = text.substr(scheme_end + 3);
    const std::string_view authority = after.substr(0, after.find('/'));
    if (authority.find('@') != std::string_view::npos) {
      FUZZ_CHECK(!url, "a URL with userinfo is refused");
    }
  }
  if (!url) {
    FUZZ_CHECK(!error.empty(), "a refused URL says why");
    return 0;
  }
  FUZZ_CHECK(url->scheme == "http" || url->scheme == "https", "http or https");
  FUZZ_CHECK(!url->host.empty(), "an accepted URL has a host");
  FUZZ_CHECK(url->port != 0, "an accepted URL has a port");
  FUZZ_CHECK(url->path_prefix.empty() ||
                 (url->path_prefix.front() == '/' && url->path_prefix.back() != '/'),
             "the prefix is \"\" or /prefix");
  const std::string normal = url->to_string();
  const auto again = fg::net::parse_url(normal);
  FUZZ_CHECK(again.has_value(), "the normalised form parses");
  FUZZ_CHECK(again->to_string() == normal && again->host == url->host && again->port == url->port &&
                 again->scheme == url->scheme && again->path_prefix == url->path_prefix,
             "the normalised form parses back to itself");
  // What registration checks: the pattern against the normalised URL.
  check_glob(pattern, normal);
  return 0;
}
