#pragma once

// Requests for the routing tests: prompts of an instruction prefix shared by many requests and a
// part of their own, with block hashes that behave like chained ones (equal at a position only
// when everything before is equal too), at the default 4 bytes per token.

#include <chrono>
#include <cstdint>
#include <string>

#include "common/openai/prompt_blocks.hpp"
#include "orchestrator/scheduling/scheduler.hpp"

namespace fg::scheduling::testing {

inline constexpr double kBytesPerToken = 4.0;

inline TimePoint at_seconds(double s) {
  return TimePoint{} +
         std::chrono::duration_cast<TimePoint::duration>(std::chrono::duration<double>(s));
}

// prefix 0: no shared part. unique: any number distinct from other requests'.
inline Request review(std::uint64_t prefix, std::uint32_t prefix_tokens, std::uint64_t unique,
                      std::uint32_t unique_tokens) {
  Request r;
  const auto bytes = static_cast<std::uint64_t>((prefix_tokens + unique_tokens) * kBytesPerToken);
  r.prompt_bytes = bytes;
  const std::uint64_t blocks = bytes / openai::kPromptBlockBytes;
  const auto shared =
      static_cast<std::uint64_t>(prefix_tokens * kBytesPerToken) / openai::kPromptBlockBytes;
  for (std::uint64_t i = 0; i < blocks; ++i) {
    if (prefix != 0 && i < shared) {
      r.prompt_blocks.push_back(prefix * 0x9E3779B97F4A7C15ULL + i + 1);
    } else {
      r.prompt_blocks.push_back((unique + 1) * 0xC2B2AE3D27D4EB4FULL + (i + 1) * 0x165667B1ULL +
                                0x8000'0000'0000'0000ULL);
    }
  }
  return r;
}

}  // namespace fg::scheduling::testing
