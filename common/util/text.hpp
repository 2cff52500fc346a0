#pragma once

#include <cstddef>
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

// Whether an Authorization header is exactly "Bearer <token>". The bytes are compared in
// constant time (no early exit), so the time taken does not reveal how much of a key matched.
// An empty token never matches.
bool bearer_matches(std::string_view header, std::string_view token);

}  // namespace fg
