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

// What llama-server keeps of earlier prompts, and how it picks a slot for a new one (its
// tools/server in the llama.cpp the project builds; docs/simulator.md quotes the rules). Lengths
// are sim tokens: characters / 4.
struct PromptCacheOptions {
  // --slot-prompt-similarity: an idle slot is chosen for its cached prompt only when the common
  // prefix is more than this share of the new prompt; 0 turns the similarity choice off (LRU
  // only). llama.cpp's default is 0.1.
  double slot_prompt_similarity = 0.1;
  // The host prompt cache (--cache-ram), in tokens; 0: none.
  std::size_t host_cache_tokens = 0;
};

// How a slot was chosen, for tests and logs.
struct SlotPick {
  std::size_t slot = 0;
  bool by_similarity = false;       // else least recently used
  bool restored_from_host = false;  // the slot's prompt was replaced by a host cache entry
};

// The last text each slot evaluated (prompt + generated answer, as llama.cpp's slot keeps), the
// host prompt cache, and llama-server's slot choice. Pure: "recently used" is the order of
// release() calls, not a clock.
class SlotCache {
 public:
  explicit SlotCache(std::size_t slots, PromptCacheOptions options = {});

  std::size_t slots() const { return slots_.size(); }
  const PromptCacheOptions& options() const { return options_; }

  // Tokens of `prompt` already in the slot's cache: common prefix in characters / 4 (floor), and
  // at most prompt_tokens - 1 because llama.cpp always re-evaluates at least one token to get
  // logits. 0 for an unknown slot or an empty prompt.
  std::size_t cached_prefix_tokens(std::size_t slot, std::string_view prompt) const;

  // Takes a slot for `prompt` as llama-server's get_available_slot does; nullopt when every slot
  // is busy (busy[i] true; slots past busy's end are idle). Among idle slots holding something,
  // the one whose common prefix is the largest share of the prompt (first on ties), if that share
  // exceeds slot_prompt_similarity; otherwise the least recently released idle slot (never-used
  // slots first; on ties the highest index, as llama.cpp's `<=` scan). When the slot was taken by
  // LRU, or keeps less than half of what it holds, and a host cache is configured: the slot's
  // prompt is saved to the host cache, then the entry that beats the slot on both the share of
  // itself kept (at least a quarter) and the share of the prompt covered is loaded into the slot
  // and leaves the host cache.
  std::optional<SlotPick> acquire(std::string_view prompt, const std::vector<bool>& busy);

  // Records what the slot now holds. The agent stores prompt + generated text, so the next turn of
  // the same chat (which repeats both) hits the cache.
  void store(std::size_t slot, std::string text);
  // The slot's request ended: it becomes the most recently used.
  void release(std::size_t slot);
  void clear(std::size_t slot);

  // The host cache: entries (oldest first) and their tokens.
  std::size_t host_entries() const { return host_.size(); }
  std::size_t host_tokens() const { return host_tokens_; }
  std::size_t slot_tokens(std::size_t slot) const;

 private:
  struct Slot {
    std::string text;
    std::int64_t last_used = -1;  // release order; -1: never used
  };
  void save_to_host(const std::string& text);
  // Loads the best host entry into the slot, if one beats what it holds.
  bool load_from_host(Slot& slot, std::string_view prompt);

  PromptCacheOptions options_;
  std::vector<Slot> slots_;
  std::vector<std::string> host_;  // oldest first
  std::size_t host_tokens_ = 0;
  std::int64_t releases_ = 0;
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
