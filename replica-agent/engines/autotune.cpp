#include "replica-agent/engines/autotune.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "common/util/json.hpp"

namespace fg::agent::autotune {

namespace {

std::optional<std::uint32_t> to_whole(const std::optional<std::string>& text) {
  if (!text || text->empty()) {
    return std::nullopt;
  }
  std::uint32_t value = 0;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc() || end != text->data() + text->size()) {
    return std::nullopt;
  }
  return value;
}

bool is_one_of(const std::string& arg, const std::vector<std::string>& names) {
  return std::find(names.begin(), names.end(), arg) != names.end();
}

std::optional<double> positive_number(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number()) {
    return std::nullopt;
  }
  const double v = it->get<double>();
  if (!std::isfinite(v) || v <= 0) {
    return std::nullopt;
  }
  return v;
}

nlohmann::json value_json(const std::optional<std::uint32_t>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

}  // namespace

const std::vector<std::string>& threads_flags() {
  static const std::vector<std::string> names = {"-t", "--threads"};
  return names;
}

const std::vector<std::string>& batch_size_flags() {
  static const std::vector<std::string> names = {"-b", "--batch_size", "--batch-size"};
  return names;
}

std::optional<std::string> flag_value(const std::vector<std::string>& argv,
                                      const std::vector<std::string>& names) {
  std::optional<std::string> value;
  for (std::size_t i = 1; i < argv.size(); ++i) {
    if (is_one_of(argv[i], names) && i + 1 < argv.size()) {
      value = argv[++i];
    }
  }
  return value;
}

std::vector<std::string> with_flag(std::vector<std::string> argv,
                                   const std::vector<std::string>& names,
                                   const std::string& value) {
  bool found = false;
  for (std::size_t i = 1; i < argv.size(); ++i) {
    if (!is_one_of(argv[i], names)) {
      continue;
    }
    found = true;
    if (i + 1 < argv.size()) {
      argv[++i] = value;
    } else {
      argv.push_back(value);  // a trailing flag without its value
      break;
    }
  }
  if (!found) {
    argv.push_back(names.back());
    argv.push_back(value);
  }
  return argv;
}

std::vector<Candidate> expand_candidates(const AutotuneConfig& config,
                                         const std::vector<std::string>& command) {
  std::vector<std::optional<std::uint32_t>> threads;
  std::vector<std::optional<std::uint32_t>> batch_sizes;
  for (auto t : config.threads) {
    threads.emplace_back(t);
  }
  for (auto b : config.batch_size) {
    batch_sizes.emplace_back(b);
  }
  if (threads.empty()) {
    threads.push_back(to_whole(flag_value(command, threads_flags())));
  }
  if (batch_sizes.empty()) {
    batch_sizes.push_back(to_whole(flag_value(command, batch_size_flags())));
  }
  std::vector<Candidate> candidates;
  for (const auto& t : threads) {
    for (const auto& b : batch_sizes) {
      candidates.push_back(Candidate{t, b});
    }
  }
  return candidates;
}

std::vector<std::string> candidate_command(const std::vector<std::string>& command,
                                           const Candidate& candidate) {
  std::vector<std::string> argv = command;
  if (candidate.threads) {
    argv = with_flag(std::move(argv), threads_flags(), std::to_string(*candidate.threads));
  }
  if (candidate.batch_size) {
    argv = with_flag(std::move(argv), batch_size_flags(), std::to_string(*candidate.batch_size));
  }
  return argv;
}

std::string reference_prompt(std::uint32_t prompt_tokens) {
  // Frequent English words: one token each in the usual BPE vocabularies (with their space).
  static constexpr const char* kWords[] = {
      "the",   "of",   "and",   "to",    "in",    "is",     "that",  "for",   "it",    "as",
      "was",   "with", "be",    "by",    "on",    "not",    "he",    "this",  "are",   "or",
      "his",   "from", "at",    "which", "but",   "have",   "an",    "they",  "you",   "were",
      "her",   "she",  "there", "been",  "one",   "all",    "we",    "their", "has",   "would",
      "when",  "if",   "so",    "no",    "what",  "can",    "more",  "about", "time",  "up",
      "out",   "said", "some",  "into",  "other", "than",   "then",  "them",  "these", "two",
      "first", "new",  "only",  "after", "also",  "over",   "back",  "work",  "year",  "most",
      "money", "bank", "card",  "paid",  "day",   "amount", "store", "phone", "risk",  "account"};
  constexpr std::uint64_t kCount = sizeof(kWords) / sizeof(kWords[0]);
  std::string prompt;
  std::uint64_t state = 0x9e3779b97f4a7c15ULL;  // fixed seed: the same prompt every time
  for (std::uint32_t i = 0; i < prompt_tokens; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    if (i > 0) {
      prompt += ' ';
    }
    prompt += kWords[(state >> 33) % kCount];
  }
  return prompt;
}

std::string reference_request(std::uint32_t prompt_tokens, std::uint32_t predict_tokens) {
  nlohmann::ordered_json body{
      {"prompt", reference_prompt(prompt_tokens)},
      {"n_predict", predict_tokens},
      {"temperature", 0},
      {"seed", 0},
      {"ignore_eos", true},
      {"cache_prompt", false},
      {"stream", false},
  };
  return body.dump();
}

std::optional<Speeds> parse_timings(const std::string& body, std::string* why) {
  auto set_why = [&](const char* text) {
    if (why != nullptr) {
      *why = text;
    }
  };
  auto doc = parse_network_json(body);
  if (!doc.is_object()) {
    set_why("the answer is not a JSON object");
    return std::nullopt;
  }
  auto timings = doc.find("timings");
  if (timings == doc.end() || !timings->is_object()) {
    set_why("the answer has no timings");
    return std::nullopt;
  }
  auto prefill = positive_number(*timings, "prompt_per_second");
  auto decode = positive_number(*timings, "predicted_per_second");
  if (!prefill || !decode) {
    set_why("the answer's timings have no positive prompt_per_second and predicted_per_second");
    return std::nullopt;
  }
  return Speeds{*prefill, *decode};
}

double reference_seconds(std::uint32_t prompt_tokens, std::uint32_t predict_tokens,
                         const Speeds& speeds) {
  if (!(speeds.prefill_tps > 0) || !(speeds.decode_tps > 0)) {
    return std::numeric_limits<double>::infinity();
  }
  return prompt_tokens / speeds.prefill_tps + predict_tokens / speeds.decode_tps;
}

std::optional<std::size_t> pick_fastest(const std::vector<Result>& results) {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    if (!r.measured || !std::isfinite(r.seconds)) {
      continue;
    }
    if (!best || r.seconds < results[*best].seconds) {
      best = i;
    }
  }
  return best;
}

const char* to_string(Report::State state) {
  switch (state) {
    case Report::State::off:
      return "off";
    case Report::State::running:
      return "running";
    case Report::State::done:
      return "done";
    case Report::State::failed:
      return "failed";
  }
  return "off";
}

nlohmann::ordered_json report_json(const Report& report, const AutotuneConfig& config) {
  nlohmann::ordered_json out;
  out["state"] = to_string(report.state);
  out["prompt_tokens"] = config.prompt_tokens;
  out["predict_tokens"] = config.predict_tokens;
  if (report.chosen && *report.chosen < report.results.size()) {
    const Candidate& c = report.results[*report.chosen].candidate;
    out["chosen"] = {{"threads", value_json(c.threads)}, {"batch_size", value_json(c.batch_size)}};
  } else {
    out["chosen"] = nullptr;
  }
  auto candidates = nlohmann::ordered_json::array();
  for (const Result& r : report.results) {
    nlohmann::ordered_json item{{"threads", value_json(r.candidate.threads)},
                                {"batch_size", value_json(r.candidate.batch_size)}};
    if (r.measured) {
      item["status"] = "ok";
      item["prefill_tps"] = r.speeds.prefill_tps;
      item["decode_tps"] = r.speeds.decode_tps;
      item["seconds"] = r.seconds;
    } else if (!r.error.empty()) {
      item["status"] = "failed";
      item["error"] = r.error;
    } else {
      item["status"] = "pending";
    }
    candidates.push_back(std::move(item));
  }
  out["candidates"] = std::move(candidates);
  return out;
}

std::string label(const std::optional<std::uint32_t>& value) {
  return value ? std::to_string(*value) : "default";
}

std::string describe(const Candidate& candidate) {
  return "threads=" + label(candidate.threads) + " batch_size=" + label(candidate.batch_size);
}

}  // namespace fg::agent::autotune
