#include "common/util/json.hpp"

namespace fg {

bool json_depth_within(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return false;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return true;
}

nlohmann::json parse_network_json(std::string_view text, JsonError* error, int max_depth) {
  if (!json_depth_within(text, max_depth)) {
    if (error != nullptr) {
      *error = JsonError::too_deep;
    }
    return nlohmann::json(nlohmann::json::value_t::discarded);
  }
  auto doc = nlohmann::json::parse(text, nullptr, false);
  if (error != nullptr) {
    *error = doc.is_discarded() ? JsonError::invalid : JsonError::none;
  }
  return doc;
}

}  // namespace fg
