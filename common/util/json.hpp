#pragma once

// JSON from the network, parsed with a nesting limit. nlohmann's dump, copy and comparison are
// recursive: one document nested 100,000 levels deep overflows the stack in any of them, so no
// document read from a socket may be deeper than this.

#include <string_view>

#include <nlohmann/json.hpp>

namespace fg {

// Real requests nest a handful of levels (messages -> content parts -> ...; tool schemas a few
// dozen); 128 leaves room for those and keeps every recursive walk shallow.
inline constexpr int kMaxJsonDepth = 128;

// Whether no array or object in text opens more than max_depth levels deep (brackets inside
// strings do not count). Linear, no allocation. On malformed text the count may be off, but
// such text is then refused by the parser anyway.
bool json_depth_within(std::string_view text, int max_depth = kMaxJsonDepth);

enum class JsonError { none, invalid, too_deep };

// Parses network input: a discarded value (is_discarded()) when text is not JSON or nests
// deeper than max_depth; *error (when given) says which.
nlohmann::json parse_network_json(std::string_view text, JsonError* error = nullptr,
                                  int max_depth = kMaxJsonDepth);

}  // namespace fg
