#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fg {

// Levenshtein distance (insertions, deletions, substitutions).
std::size_t edit_distance(std::string_view a, std::string_view b);
// The known word closest to word within edit distance 2 ("did you mean"), or "".
std::string closest_word(std::string_view word, const std::vector<std::string>& known);
// A valid environment variable name: [A-Za-z_][A-Za-z0-9_]*.
bool is_env_name(std::string_view s);

}  // namespace fg

namespace fg {

// The credentials of an Authorization header that uses the Bearer scheme, or nullopt. The scheme
// is matched case-insensitively (RFC 9110 section 11.1) and may be followed by several spaces.
std::optional<std::string_view> bearer_credentials(std::string_view header);

// Whether an Authorization header carries token as its bearer credentials. The SHA-256 digests of
// both are compared with CRYPTO_memcmp, so the time taken reveals neither how much of the token
// matched nor its length (hashing it costs one more step per 64 bytes of token at most). An empty
// token never matches.
bool bearer_matches(std::string_view header, std::string_view token);

// Accepted bearer keys, kept only as SHA-256 digests (hashed once, when built).
class BearerKeys {
 public:
  BearerKeys() = default;
  // Empty keys are ignored.
  explicit BearerKeys(const std::vector<std::string>& keys);

  bool empty() const { return digests_.empty(); }
  std::size_t size() const { return digests_.size(); }
  // Whether the header's bearer credentials equal one of the keys. Every key is compared, so the
  // time reveals neither which key matched nor any key's content or length.
  bool matches(std::string_view header) const;
  // Which key (its index among the non-empty keys given, in order) the header's credentials
  // equal; every key is compared all the same.
  std::optional<std::size_t> match(std::string_view header) const;

 private:
  std::vector<std::array<unsigned char, 32>> digests_;
};

// Whether text holds a control character (below 0x20, or DEL): a secret with CR or LF would let
// whoever sets it add header lines to every request that carries it.
bool has_control_character(std::string_view text);

}  // namespace fg
