#pragma once

// Learned speeds of each phone and what each model's requests usually cost. Pure: numbers in,
// numbers out; the scheduler feeds it what each answer reported.
//
// Speeds are kept as seconds per token (prefill: per uncached prompt token; decode: per generated
// token) and smoothed by an exponential moving average: the cost of a request is linear in seconds
// per token, so averaging those (rather than tokens per second) keeps the expected times unbiased.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

#include <nlohmann/json_fwd.hpp>

#include "common/openai/answer.hpp"
#include "orchestrator/scheduling/routing_options.hpp"
#include "orchestrator/scheduling/types.hpp"

namespace fg::scheduling {

// llama-server's "timings" of one answer (also on the last event of a stream).
struct Timings {
  double prompt_n = 0;              // prompt tokens evaluated: the uncached part
  double prompt_ms = 0;             // time it took
  double predicted_n = 0;           // tokens generated
  double predicted_ms = 0;          // first token to last: predicted_n - 1 decode steps
  std::optional<double> cache_n{};  // prompt tokens reused from the cache
};

// What one answer reported, as far as the phone said it. Everything is optional: a plain
// OpenAI server reports usage only, an old one nothing.
struct Completion {
  bool ok = true;  // false: failed or cut off; the slot is free again, nothing is learned
  std::optional<std::uint64_t> prompt_tokens{};      // usage.prompt_tokens
  std::optional<std::uint64_t> cached_tokens{};      // usage...cached_tokens, else timings.cache_n
  std::optional<std::uint64_t> completion_tokens{};  // usage.completion_tokens
  bool truncated = false;                            // finish_reason "length"
  std::optional<Timings> timings{};
  // Measured by the gateway from the grant: first generated token, and the end of the answer
  // (when absent, complete() takes now minus the grant time).
  std::optional<std::chrono::nanoseconds> first_token_after{};
  std::optional<std::chrono::nanoseconds> duration{};
};

// usage, timings and choices[0].finish_reason of an answer body or of a stream's events merged
// into one object (chat and completions shapes alike). Missing or mistyped fields stay unset.
Completion completion_from_answer(const nlohmann::json& answer);
// The same from what the gateway read while relaying the answer (usage and timings of the body
// or of the stream's events; truncated from the finish reason they said); the gateway's times
// are left for the caller.
Completion completion_from_stats(const openai::AnswerStats& stats);

// Decode steps of an answer of `tokens` tokens: the first token ends prefill, each later one is
// a step (llama-server's n_gen_steps, which the decode speed is learned from).
inline double decode_steps(double tokens) {
  return tokens > 1 ? tokens - 1 : 0.0;
}

struct SpeedSnapshot {
  // model_peers: unmeasured, read as what its model's other replicas showed (SpeedModel).
  enum class Source { configured_default, agent_measurement, learned, model_peers };
  double prefill_tps = 0;
  double decode_tps = 0;
  std::uint64_t prefill_samples = 0;
  std::uint64_t decode_samples = 0;
  Source source = Source::configured_default;
};

const char* to_string(SpeedSnapshot::Source source);

// One finished request of a replica, in the terms the speed model needs.
struct SpeedSample {
  double uncached_tokens = 0;  // prompt tokens the phone had to read
  double answer_tokens = 0;
  std::optional<Timings> timings{};
  std::optional<double> first_token_seconds{};  // since the grant
  double duration_seconds = 0;                  // since the grant
};

class SpeedModel {
 public:
  explicit SpeedModel(const RoutingOptions& options) : options_(options) {}

  // New defaults apply to replicas that were neither measured nor have learned anything.
  void set_options(const RoutingOptions& options);

  // A new replica starts at the configured default; one whose model changed starts over.
  void add_replica(ReplicaId id, const std::string& model);
  void remove_replica(ReplicaId id);
  // The agent's own measurement (autotune in /health). Ignored once samples were learned:
  // what the phone did under real traffic is the better guide. Non-positive speeds are ignored.
  void seed(ReplicaId id, double prefill_tps, double decode_tps);
  void learn(ReplicaId id, const SpeedSample& sample);

  // Seconds per token; the configured default for an unknown replica. A replica with neither
  // samples nor the agent's measurement reads as its model's learned peers (a smoothed figure
  // over every sample of that model's replicas) once there are any: at the configured default
  // a new phone can look many times slower than its measured twins, and expected_finish would
  // then never send it the traffic it would learn from.
  double prefill_seconds_per_token(ReplicaId id) const;
  double decode_seconds_per_token(ReplicaId id) const;
  SpeedSnapshot snapshot(ReplicaId id) const;

  // Prompt tokens per rendered byte, and the expected answer length, of a model's requests.
  double tokens_per_byte(const std::string& model) const;
  double answer_tokens(const std::string& model, std::optional<std::uint32_t> max_tokens) const;
  // prompt_bytes: the canonical rendering's length (0 when unknown).
  void learn_model(const std::string& model, std::uint64_t prompt_bytes, const Completion& c);

 private:
  struct Speeds {
    std::string model;
    double prefill_spt = 0;
    double decode_spt = 0;
    std::uint64_t prefill_samples = 0;
    std::uint64_t decode_samples = 0;
    bool seeded = false;
  };
  struct ModelStats {
    std::optional<double> tokens_per_byte;
    std::optional<double> answer_tokens;
    std::optional<double> peer_prefill_spt;  // over every learned sample of the model
    std::optional<double> peer_decode_spt;
  };

  void reset(Speeds& s) const;
  // What a replica's figure reads as (its own, or its model's peers' when it has none).
  double prefill_spt(const Speeds& s) const;
  double decode_spt(const Speeds& s) const;
  const ModelStats* model_stats(const std::string& model) const;
  double blend(double current, double sample) const;

  RoutingOptions options_;
  std::unordered_map<ReplicaId, Speeds> replicas_;
  std::unordered_map<std::string, ModelStats> models_;
};

}  // namespace fg::scheduling
