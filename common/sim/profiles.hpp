#pragma once

// The simulator's phone profiles: measured (or, where stated in `source`, estimated) speeds of
// one model on one class of phone. Shared by both binaries: the agent's sim engine runs them, the
// gateway checks a local fleet's profile name and takes its slots. Plain data and a lookup by
// name; the timing and text model that uses them stays in replica-agent/engines/sim_model.hpp.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace fg::sim {

// engine.time_scale / models[].local.time_scale: greater than 0 and at most this.
inline constexpr double kMaxTimeScale = 1e6;

struct SimProfile {
  std::string name;        // "qwen3.5-9b/snapdragon-8-elite"
  std::size_t slots = 1;   // parallel chats (llama.cpp --parallel)
  double prefill_tps = 0;  // prompt tokens read per second, long-prompt average
  double decode_tps = 0;   // tokens generated per second by a single busy slot
  // Total decode throughput multiplier with k busy slots, at index k-1 (so [0] is 1.0). Per-stream
  // speed with k busy slots is decode_tps * scaling[k-1] / k.
  std::vector<double> parallel_decode_scaling;
  std::size_t default_max_tokens = 16;  // natural answer length when the client sets no lower cap
  std::string source;                   // where the figures come from, and what is estimated
};

// The built-in profiles, in table order.
const std::vector<SimProfile>& profiles();
// nullptr when no profile has that exact name.
const SimProfile* find_profile(std::string_view name);
std::vector<std::string> profile_names();
// The names, comma-separated, for messages ("qwen3.5-9b/snapdragon-8-elite, ..., fast-test").
std::string profile_list();

}  // namespace fg::sim
