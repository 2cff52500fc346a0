#pragma once

// engine.autotune's choice logic, pure (no processes, no sockets): which llama-server settings
// to try, the command line of each, the fixed reference job, reading llama.cpp's timings, the
// score and the pick. The EngineMonitor runs the candidates (replica-agent/engines/engine_monitor).
//
// Score: the time the reference job would take, prompt_tokens / prefill + predict_tokens / decode
// (tokens per second from llama.cpp's timings.prompt_per_second and predicted_per_second).
// Lowest wins; a tie goes to the earlier candidate (fewer threads, then smaller batch).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "replica-agent/config/agent_config.hpp"

namespace fg::agent::autotune {

// One setting to try. An unset value is neither tuned nor in the command: llama-server's default.
struct Candidate {
  std::optional<std::uint32_t> threads;
  std::optional<std::uint32_t> batch_size;
  bool operator==(const Candidate&) const = default;
};

// Every combination of the configured lists, threads outer, in the order written. A list that is
// not tuned takes the command's own value (when it has a whole-number one) or stays unset.
std::vector<Candidate> expand_candidates(const AutotuneConfig& config,
                                         const std::vector<std::string>& command);

// The value of the last occurrence of a flag in argv (llama.cpp uses the last), any of names.
std::optional<std::string> flag_value(const std::vector<std::string>& argv,
                                      const std::vector<std::string>& names);

// argv with every occurrence of the flag (any of names, each followed by its value) set to value;
// when there is none, `names.back() value` is appended. argv[0] (the program) is never a flag.
std::vector<std::string> with_flag(std::vector<std::string> argv,
                                   const std::vector<std::string>& names, const std::string& value);

// The flag spellings llama-server accepts (it also turns '_' into '-' in long names).
const std::vector<std::string>& threads_flags();     // -t, --threads
const std::vector<std::string>& batch_size_flags();  // -b, --batch_size, --batch-size

// The command with the candidate's --threads and --batch-size.
std::vector<std::string> candidate_command(const std::vector<std::string>& command,
                                           const Candidate& candidate);

// The reference job: a deterministic prompt of prompt_tokens words (common English words, each
// usually one token), and the llama-server POST /completion body that runs it: n_predict =
// predict_tokens, greedy (temperature 0), ignore_eos (the answer has its full length),
// cache_prompt false (the whole prompt is evaluated every time).
std::string reference_prompt(std::uint32_t prompt_tokens);
std::string reference_request(std::uint32_t prompt_tokens, std::uint32_t predict_tokens);

struct Speeds {
  double prefill_tps = 0;  // timings.prompt_per_second
  double decode_tps = 0;   // timings.predicted_per_second
};

// Speeds from a /completion (or OpenAI-shaped) answer's `timings`; nullopt with *why set when the
// body has no usable timings.
std::optional<Speeds> parse_timings(const std::string& body, std::string* why = nullptr);

// The score: seconds the reference job takes at these speeds (infinity when a speed is not > 0).
double reference_seconds(std::uint32_t prompt_tokens, std::uint32_t predict_tokens,
                         const Speeds& speeds);

struct Result {
  Candidate candidate;
  bool measured = false;  // false: failed (error says why) or not run yet
  std::string error;
  Speeds speeds;
  double seconds = 0;  // the score, when measured
};

// The index of the measured result with the lowest score; nullopt when none was measured.
std::optional<std::size_t> pick_fastest(const std::vector<Result>& results);

// What /health reports: the tuning's progress and outcome.
struct Report {
  enum class State { off, running, done, failed };
  State state = State::off;
  std::vector<Result> results;        // one per candidate, in order
  std::optional<std::size_t> chosen;  // index into results
};

const char* to_string(Report::State state);

// /health's "autotune" object: {"state","prompt_tokens","predict_tokens","chosen":{"threads",
// "batch_size"} or null,"candidates":[{"threads","batch_size","status":"ok"|"failed"|"pending",
// "prefill_tps","decode_tps","seconds"} or {...,"error"}]}. Untuned values are null.
nlohmann::ordered_json report_json(const Report& report, const AutotuneConfig& config);

// A candidate value as a metric label: the number, or "default" when unset.
std::string label(const std::optional<std::uint32_t>& value);

// "threads=2 batch_size=256" for logs.
std::string describe(const Candidate& candidate);

}  // namespace fg::agent::autotune
