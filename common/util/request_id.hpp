#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>

namespace fg {

// 16 hex digits from rng: the id of a request in logs, in X-Request-Id and towards replicas.
std::string new_request_id(std::mt19937_64& rng);
// A client-supplied X-Request-Id is kept when it is 1..64 characters of [A-Za-z0-9._-] (safe to
// log and to forward).
bool valid_request_id(std::string_view id);
// The client's id when valid, else a new one.
std::string request_id_for(std::string_view given, std::mt19937_64& rng);

}  // namespace fg
