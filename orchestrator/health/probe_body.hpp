#pragma once

// What a probe's answer says beyond its status: an agent's slot report and the model the
// replica serves. Pure.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "orchestrator/health/health_tracker.hpp"

namespace fg::health {

enum class ModelCheck {
  unverified,  // the body names no model (llama-server's own /health, a plain "OK")
  match,       // it serves the configured model
  mismatch,    // it serves another model
};

struct ProbeBody {
  std::optional<std::uint32_t> slots_total;  // from a Fleetgate agent's /health
  std::optional<std::uint32_t> slots_idle;
  ModelCheck model = ModelCheck::unverified;
  std::string served;  // mismatch: what it serves ("qwen3.5-4b", or a list from /v1/models)
  // An agent's own measurement and cache facts (docs/routing.md, "Integration"): its autotune
  // speeds in tokens per second, its host prompt cache in tokens, and how many times its engine
  // started (when it grows, the phone's KV cache is gone).
  std::optional<double> prefill_tps;
  std::optional<double> decode_tps;
  std::optional<std::uint64_t> host_prompt_cache_tokens;
  std::optional<std::uint64_t> engine_starts;
};

// Reads a probe's body (network input: parsed with fg::parse_network_json):
// - an agent's /health: {"model":"...","slots_total":N,"slots_idle":M}, optionally with
//   "prefill_tps", "decode_tps" (positive numbers), "host_prompt_cache_tokens" and
//   "engine_starts" (whole numbers); a field of another type or out of range is ignored;
// - an OpenAI server's /v1/models: {"data":[{"id":"..."},...]}: the configured model must be
//   one of the ids.
// Anything else (not JSON, no model named) leaves the model unverified.
ProbeBody parse_probe_body(std::string_view body, std::string_view expected_model);

// parse_probe_body for one replica's probes, remembering the last body it parsed and what it
// said: an agent's /health body is byte for byte the same from one probe to the next while
// nothing changes on the phone, and parsing it (~50,000 instructions for an agent's ~300 bytes,
// callgrind) cost eight times the rest of a plain-http probe. Bodies over kMaxKept bytes are
// parsed every time (a long /v1/models list is not worth its memory here).
class ProbeBodyMemo {
 public:
  static constexpr std::size_t kMaxKept = 4096;
  const ProbeBody& parse(std::string_view body, std::string_view expected_model);

 private:
  std::string body_;
  std::string expected_model_;
  ProbeBody facts_;
  bool kept_ = false;
};

struct ProbeOutcome {
  ProbeResult result = ProbeResult::fail;
  double seconds = 0;
  std::optional<std::uint32_t> slots_total;  // from a Fleetgate agent's /health
  std::optional<std::uint32_t> slots_idle;
  // An agent's speeds and cache facts (ProbeBody), when it passed.
  std::optional<double> prefill_tps;
  std::optional<double> decode_tps;
  std::optional<std::uint64_t> host_prompt_cache_tokens;
  std::optional<std::uint64_t> engine_starts;
  // What the body says about the model: a mismatch fails the probe (error says what it serves).
  ModelCheck model = ModelCheck::unverified;
  std::string
      error;  // why it failed ("timeout", "HTTP 500", "serves model x, not y"), never a body
};

// What a whole answer to a probe says (seconds left at 0): 200 passes; a 503 saying the model is
// loading (llama.cpp's "Loading model", an agent's {"status":"loading"}) is `loading`; any other
// status fails. A body naming another model than expected_model fails with that reason. The body
// is read only for a 200 or a 503, through memo when one is given.
ProbeOutcome judge_answer(unsigned status, std::string_view body, std::string_view expected_model,
                          ProbeBodyMemo* memo = nullptr);

}  // namespace fg::health
