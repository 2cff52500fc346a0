#pragma once

#include <chrono>
#include <cstdint>

namespace fg::scheduling {

using ReplicaId = std::uint64_t;
using WaiterId = std::uint64_t;
using TimePoint = std::chrono::steady_clock::time_point;

}  // namespace fg::scheduling
