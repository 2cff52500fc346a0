#pragma once

// Pure timing and text model of a phone running llama.cpp, used by fleetgate-agent's `sim` engine.
// Everything here is arithmetic: no clock, no sleeps, no I/O. The I/O layer asks for a plan and a
// schedule and then follows it with real timers. The profiles it runs (SimProfile, find_profile)
// live in common/sim/profiles.hpp, shared with the gateway. See docs/simulator.md for the model
// and sources.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/sim/profiles.hpp"

namespace fg::sim {

// Knobs of the agent's sim engine.
struct SimOptions {
  double time_scale = 1.0;  // > 0; every duration is divided by it (10 = ten times faster)
  double jitter = 0.0;      // multiplicative spread: durations scaled by U[1-jitter, 1+jitter]
  double fail_rate = 0.0;   // probability that a request fails (the agent answers 500)
  std::uint64_t seed = 0;   // mixed into the text seed so different agents answer differently
};

// ~4 characters per token, as for English text with BPE tokenizers; 0 only for an empty prompt.
std::size_t prompt_tokens_for_chars(std::size_t chars);

// The prompt text of a request body, in this order: Anthropic's "system" and the Responses API's
// "instructions" (a string, or text blocks); then "messages" (chat, Anthropic) or "input"
// (Responses: a string, or items) with every message's content in order, string contents whole
// and the "text" / "input_text" / "output_text" parts of array contents; else "prompt"
// (completions) as a string or its string elements concatenated; else a rerank's "query" and its
// string "documents". Anything else (missing fields, token-id prompts, null contents) contributes
// nothing.
std::string extract_prompt_text(const nlohmann::json& body);

// The client's cap on generated tokens: "max_completion_tokens" (current OpenAI chat name) or
// "max_output_tokens" (Responses) if it is a non-negative integer, else "max_tokens" (completions,
// Anthropic) likewise, else nullopt.
std::optional<std::size_t> requested_max_tokens(const nlohmann::json& body);

// The last text each slot evaluated, so a follow-up prompt sharing a prefix is partly cached, as
// with llama.cpp's per-slot KV cache.
class SlotCache {
 public:
  explicit SlotCache(std::size_t slots);

  std::size_t slots() const { return texts_.size(); }

  // Tokens of `prompt` already in the slot's cache: common prefix in characters / 4 (floor), and
  // at most prompt_tokens - 1 because llama.cpp always re-evaluates at least one token to get
  // logits. 0 for an unknown slot or an empty prompt.
  std::size_t cached_prefix_tokens(std::size_t slot, std::string_view prompt) const;

  // Records what the slot now holds. The agent stores prompt + generated text, so the next turn of
  // the same chat (which repeats both) hits the cache.
  void store(std::size_t slot, std::string text);
  void clear(std::size_t slot);

  // The idle slot (busy[i] false, or i past busy's end) sharing the longest prefix with `prompt`,
  // lowest index on ties, like llama.cpp's slot similarity choice; nullopt when all are busy.
  std::optional<std::size_t> pick_slot(std::string_view prompt,
                                       const std::vector<bool>& busy) const;

 private:
  std::vector<std::string> texts_;
};

// Everything decided about one request before it runs.
struct SimPlan {
  std::size_t prompt_tokens = 0;
  std::size_t cached_tokens = 0;      // never equals prompt_tokens (unless both are 0)
  std::size_t completion_tokens = 0;  // tokens the answer will have
  double prefill_seconds = 0;         // uncached / prefill_tps * prefill_jitter / time_scale
  double prefill_jitter = 1.0;        // factor drawn from U[1-jitter, 1+jitter]
  double decode_jitter = 1.0;         // likewise, applied to every token interval
  bool fail = false;                  // answer 500 instead of running
  std::string finish_reason;          // "length" when the client's cap cut the answer, else "stop"
  std::uint64_t text_seed = 0;        // feed to sim_token
};

// Plans a request. cached_tokens comes from SlotCache::cached_prefix_tokens and is clamped again
// to prompt_tokens - 1. Draws exactly three numbers from rng (fail, prefill and decode jitter),
// whatever the options, so a seeded run is reproducible. completion_tokens is
// min(max_tokens, profile.default_max_tokens) when max_tokens is set, else the default.
// Throws std::invalid_argument when options.time_scale is not positive.
SimPlan plan_request(const SimProfile& profile, const SimOptions& options, std::string_view prompt,
                     std::size_t cached_tokens, std::optional<std::size_t> max_tokens,
                     std::mt19937_64& rng);

// Seconds between two generated tokens of one stream with `busy_slots` slots decoding:
// 1 / (decode_tps * scaling[k-1] / k) / time_scale, k clamped to [1, scaling size].
double token_interval_seconds(const SimProfile& profile, std::size_t busy_slots, double time_scale);

// Offset from the request's arrival of each token's emission, busy_slots held constant. Token 0
// comes when prefill ends (its logits come from the prompt's last batch); token i follows i
// intervals later. The I/O layer may instead call token_interval_seconds per token when the
// number of busy slots changes.
std::vector<double> token_schedule(const SimProfile& profile, const SimPlan& plan,
                                   std::size_t busy_slots, double time_scale);

// Seed of the answer text: a stable hash (FNV-1a) of the prompt mixed with the configured seed, so
// the same prompt gets the same answer on every run and platform.
std::uint64_t text_seed(std::string_view prompt, std::uint64_t configured_seed);

// One short word-like token (" risk", " level", " 3"), a function of (seed, index) only. Token 0
// has no leading space so the answer does not start with one.
std::string sim_token(std::uint64_t seed, std::size_t index);

// Tokens 0..count-1 concatenated.
std::string sim_text(std::uint64_t seed, std::size_t count);

}  // namespace fg::sim
