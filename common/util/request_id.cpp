#include "common/util/request_id.hpp"

#include <cctype>

namespace fg {

std::string new_request_id(std::mt19937_64& rng) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(16, '0');
  auto bits = rng();
  for (auto& c : id) {
    c = kHex[bits & 0xf];
    bits >>= 4;
  }
  return id;
}

bool valid_request_id(std::string_view id) {
  if (id.empty() || id.size() > 64) {
    return false;
  }
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return true;
}

std::string request_id_for(std::string_view given, std::mt19937_64& rng) {
  return valid_request_id(given) ? std::string(given) : new_request_id(rng);
}

}  // namespace fg
