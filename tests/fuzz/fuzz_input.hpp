#pragma once

// What every fuzz target shares: checks that abort (libFuzzer and the replay both report an
// abort as a finding, and they stay on in Release builds, unlike assert), and a reader that takes
// parameters from the front of the input and leaves the rest as the text under test.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#define FUZZ_CHECK(cond, what)                                                               \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: fuzz check failed: %s (%s)\n", __FILE__, __LINE__, #cond, \
                   what);                                                                    \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

namespace fg::fuzz {

class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size)
      : rest_(reinterpret_cast<const char*>(data), size) {}

  // One byte of the front (0 once the input is used up).
  std::uint8_t byte() {
    if (rest_.empty()) {
      return 0;
    }
    const auto b = static_cast<std::uint8_t>(rest_.front());
    rest_.remove_prefix(1);
    return b;
  }
  std::uint16_t u16() { return static_cast<std::uint16_t>(byte() << 8 | byte()); }
  // Text up to the next '\n' (which is dropped), or all that is left.
  std::string_view line() {
    const auto nl = rest_.find('\n');
    const std::string_view l = rest_.substr(0, nl);
    rest_.remove_prefix(nl == std::string_view::npos ? rest_.size() : nl + 1);
    return l;
  }
  std::string_view rest() const { return rest_; }

 private:
  std::string_view rest_;
};

// text cut into pieces at the given lengths (each taken modulo what is left, 0 meaning "the rest
// of it"), so that a target can feed the same bytes split wherever the fuzzer likes.
inline std::vector<std::string_view> split(std::string_view text,
                                           const std::vector<std::uint8_t>& lengths) {
  std::vector<std::string_view> pieces;
  for (const std::uint8_t length : lengths) {
    if (text.empty()) {
      break;
    }
    const std::size_t n = length == 0 ? text.size() : std::min<std::size_t>(length, text.size());
    pieces.push_back(text.substr(0, n));
    text.remove_prefix(n);
  }
  if (!text.empty()) {
    pieces.push_back(text);
  }
  return pieces;
}

}  // namespace fg::fuzz
