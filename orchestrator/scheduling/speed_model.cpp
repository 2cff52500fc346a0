#include "orchestrator/scheduling/speed_model.hpp"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

namespace fg::scheduling {

namespace {

// Below this much rendered text the ratio of tokens to bytes is mostly the chat template's.
constexpr std::uint64_t kMinBytesForTokenRatio = 256;

std::optional<std::uint64_t> count(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) {
    return std::nullopt;
  }
  auto it = object.find(key);
  if (it == object.end()) {
    return std::nullopt;
  }
  if (it->is_number_unsigned()) {
    return it->get<std::uint64_t>();
  }
  if (it->is_number_integer() && it->get<std::int64_t>() >= 0) {
    return static_cast<std::uint64_t>(it->get<std::int64_t>());
  }
  return std::nullopt;
}

std::optional<double> number(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number()) {
    return std::nullopt;
  }
  double v = it->get<double>();
  if (!std::isfinite(v) || v < 0) {
    return std::nullopt;
  }
  return v;
}

}  // namespace

Completion completion_from_answer(const nlohmann::json& answer) {
  Completion c;
  if (!answer.is_object()) {
    return c;
  }
  if (auto usage = answer.find("usage"); usage != answer.end() && usage->is_object()) {
    c.prompt_tokens = count(*usage, "prompt_tokens");
    c.completion_tokens = count(*usage, "completion_tokens");
    if (auto details = usage->find("prompt_tokens_details"); details != usage->end()) {
      c.cached_tokens = count(*details, "cached_tokens");
    }
  }
  if (auto timings = answer.find("timings"); timings != answer.end() && timings->is_object()) {
    auto prompt_n = number(*timings, "prompt_n");
    auto prompt_ms = number(*timings, "prompt_ms");
    auto predicted_n = number(*timings, "predicted_n");
    auto predicted_ms = number(*timings, "predicted_ms");
    if (prompt_n && prompt_ms && predicted_n && predicted_ms) {
      c.timings = Timings{.prompt_n = *prompt_n,
                          .prompt_ms = *prompt_ms,
                          .predicted_n = *predicted_n,
                          .predicted_ms = *predicted_ms,
                          .cache_n = number(*timings, "cache_n")};
      if (!c.cached_tokens && c.timings->cache_n) {
        c.cached_tokens = static_cast<std::uint64_t>(*c.timings->cache_n);
      }
    }
  }
  if (auto choices = answer.find("choices");
      choices != answer.end() && choices->is_array() && !choices->empty()) {
    const auto& first = choices->front();
    if (first.is_object()) {
      if (auto reason = first.find("finish_reason"); reason != first.end() && reason->is_string()) {
        c.truncated = *reason == "length";
      }
    }
  }
  return c;
}

Completion completion_from_stats(const openai::AnswerStats& stats) {
  Completion c;
  c.prompt_tokens = stats.prompt_tokens;
  c.completion_tokens = stats.completion_tokens;
  c.cached_tokens = stats.cached_tokens;
  c.truncated = stats.truncated.value_or(false);
  if (stats.prompt_n && stats.prompt_ms && stats.predicted_n && stats.predicted_ms) {
    c.timings = Timings{.prompt_n = static_cast<double>(*stats.prompt_n),
                        .prompt_ms = *stats.prompt_ms,
                        .predicted_n = static_cast<double>(*stats.predicted_n),
                        .predicted_ms = *stats.predicted_ms};
    if (stats.cache_n) {
      c.timings->cache_n = static_cast<double>(*stats.cache_n);
    }
  }
  if (!c.cached_tokens && stats.cache_n) {
    c.cached_tokens = stats.cache_n;
  }
  return c;
}

const char* to_string(SpeedSnapshot::Source source) {
  switch (source) {
    case SpeedSnapshot::Source::configured_default:
      return "default";
    case SpeedSnapshot::Source::agent_measurement:
      return "agent";
    case SpeedSnapshot::Source::learned:
      return "learned";
    case SpeedSnapshot::Source::model_peers:
      return "peers";
  }
  return "default";
}

void SpeedModel::set_options(const RoutingOptions& options) {
  options_ = options;
  for (auto& [id, s] : replicas_) {
    if (!s.seeded && s.prefill_samples == 0 && s.decode_samples == 0) {
      reset(s);
    }
  }
}

void SpeedModel::reset(Speeds& s) const {
  s.prefill_spt = 1.0 / std::max(options_.default_prefill_tps, 1e-6);
  s.decode_spt = 1.0 / std::max(options_.default_decode_tps, 1e-6);
  s.prefill_samples = 0;
  s.decode_samples = 0;
  s.seeded = false;
}

void SpeedModel::add_replica(ReplicaId id, const std::string& model) {
  auto [it, inserted] = replicas_.try_emplace(id);
  if (inserted || it->second.model != model) {
    it->second.model = model;
    reset(it->second);
  }
}

void SpeedModel::remove_replica(ReplicaId id) {
  replicas_.erase(id);
}

void SpeedModel::seed(ReplicaId id, double prefill_tps, double decode_tps) {
  auto it = replicas_.find(id);
  if (it == replicas_.end()) {
    return;
  }
  Speeds& s = it->second;
  bool used = false;
  if (s.prefill_samples == 0 && std::isfinite(prefill_tps) && prefill_tps > 0) {
    s.prefill_spt = 1.0 / prefill_tps;
    used = true;
  }
  if (s.decode_samples == 0 && std::isfinite(decode_tps) && decode_tps > 0) {
    s.decode_spt = 1.0 / decode_tps;
    used = true;
  }
  s.seeded = s.seeded || used;
}

double SpeedModel::blend(double current, double sample) const {
  const double w = std::clamp(options_.speed_smoothing, 1e-6, 1.0);
  return (1.0 - w) * current + w * sample;
}

void SpeedModel::learn(ReplicaId id, const SpeedSample& sample) {
  auto it = replicas_.find(id);
  if (it == replicas_.end()) {
    return;
  }
  Speeds& s = it->second;
  const double min_prefill = std::max<double>(options_.min_prefill_sample_tokens, 1);
  const double min_decode = std::max<double>(options_.min_decode_sample_tokens, 1);
  std::optional<double> prefill;
  std::optional<double> decode;
  if (sample.timings) {
    // The phone's own clock: the best evidence there is.
    const Timings& t = *sample.timings;
    if (t.prompt_n >= min_prefill && t.prompt_ms > 0) {
      prefill = t.prompt_ms / 1000.0 / t.prompt_n;
    }
    // llama-server's predicted_ms runs from the first token (which ends prefill) to the last, so
    // it covers predicted_n - 1 decode steps (server_slot_stats::n_gen_steps); its own
    // predicted_per_second divides by the same. The agent's sim reports it the same way.
    if (t.predicted_n >= std::max(min_decode, 2.0) && t.predicted_ms > 0) {
      decode = t.predicted_ms / 1000.0 / (t.predicted_n - 1);
    }
  } else if (sample.first_token_seconds) {
    // The first token ends prefill; the others are decode intervals.
    const double first = *sample.first_token_seconds;
    if (sample.uncached_tokens >= min_prefill && first > 0) {
      prefill = first / sample.uncached_tokens;
    }
    const double rest = sample.duration_seconds - first;
    if (sample.answer_tokens >= std::max(min_decode, 2.0) && rest > 0) {
      decode = rest / (sample.answer_tokens - 1);
    }
  } else if (sample.duration_seconds > 0 &&
             (sample.uncached_tokens >= min_prefill || sample.answer_tokens >= min_decode)) {
    // Only the whole duration: both speeds scaled by how far it was off their prediction.
    const double prefill_now = prefill_spt(s);
    const double decode_now = decode_spt(s);
    const double predicted =
        sample.uncached_tokens * prefill_now + decode_steps(sample.answer_tokens) * decode_now;
    if (predicted > 0) {
      const double factor = sample.duration_seconds / predicted;
      if (sample.uncached_tokens >= min_prefill) {
        prefill = prefill_now * factor;
      }
      if (sample.answer_tokens >= min_decode) {
        decode = decode_now * factor;
      }
    }
  }
  ModelStats& peers = models_[s.model];
  if (prefill && std::isfinite(*prefill) && *prefill > 0) {
    s.prefill_spt = s.prefill_samples == 0 && !s.seeded ? *prefill : blend(s.prefill_spt, *prefill);
    ++s.prefill_samples;
    peers.peer_prefill_spt =
        peers.peer_prefill_spt ? blend(*peers.peer_prefill_spt, *prefill) : *prefill;
  }
  if (decode && std::isfinite(*decode) && *decode > 0) {
    s.decode_spt = s.decode_samples == 0 && !s.seeded ? *decode : blend(s.decode_spt, *decode);
    ++s.decode_samples;
    peers.peer_decode_spt =
        peers.peer_decode_spt ? blend(*peers.peer_decode_spt, *decode) : *decode;
  }
}

const SpeedModel::ModelStats* SpeedModel::model_stats(const std::string& model) const {
  auto it = models_.find(model);
  return it == models_.end() ? nullptr : &it->second;
}

double SpeedModel::prefill_spt(const Speeds& s) const {
  if (s.prefill_samples == 0 && !s.seeded) {
    if (const auto* m = model_stats(s.model); m && m->peer_prefill_spt) {
      return *m->peer_prefill_spt;
    }
  }
  return s.prefill_spt;
}

double SpeedModel::decode_spt(const Speeds& s) const {
  if (s.decode_samples == 0 && !s.seeded) {
    if (const auto* m = model_stats(s.model); m && m->peer_decode_spt) {
      return *m->peer_decode_spt;
    }
  }
  return s.decode_spt;
}

double SpeedModel::prefill_seconds_per_token(ReplicaId id) const {
  auto it = replicas_.find(id);
  return it == replicas_.end() ? 1.0 / std::max(options_.default_prefill_tps, 1e-6)
                               : prefill_spt(it->second);
}

double SpeedModel::decode_seconds_per_token(ReplicaId id) const {
  auto it = replicas_.find(id);
  return it == replicas_.end() ? 1.0 / std::max(options_.default_decode_tps, 1e-6)
                               : decode_spt(it->second);
}

SpeedSnapshot SpeedModel::snapshot(ReplicaId id) const {
  SpeedSnapshot snap;
  snap.prefill_tps = 1.0 / prefill_seconds_per_token(id);
  snap.decode_tps = 1.0 / decode_seconds_per_token(id);
  auto it = replicas_.find(id);
  if (it != replicas_.end()) {
    const Speeds& s = it->second;
    snap.prefill_samples = s.prefill_samples;
    snap.decode_samples = s.decode_samples;
    if (s.prefill_samples > 0 || s.decode_samples > 0) {
      snap.source = SpeedSnapshot::Source::learned;
    } else if (s.seeded) {
      snap.source = SpeedSnapshot::Source::agent_measurement;
    } else if (const auto* m = model_stats(s.model);
               m && (m->peer_prefill_spt || m->peer_decode_spt)) {
      snap.source = SpeedSnapshot::Source::model_peers;
    }
  }
  return snap;
}

double SpeedModel::tokens_per_byte(const std::string& model) const {
  auto it = models_.find(model);
  if (it != models_.end() && it->second.tokens_per_byte) {
    return *it->second.tokens_per_byte;
  }
  return options_.default_tokens_per_byte;
}

double SpeedModel::answer_tokens(const std::string& model,
                                 std::optional<std::uint32_t> max_tokens) const {
  double expected = options_.default_answer_tokens;
  auto it = models_.find(model);
  if (it != models_.end() && it->second.answer_tokens) {
    expected = *it->second.answer_tokens;
  }
  if (max_tokens) {
    expected = std::min(expected, static_cast<double>(*max_tokens));
  }
  return expected;
}

void SpeedModel::learn_model(const std::string& model, std::uint64_t prompt_bytes,
                             const Completion& c) {
  if (!c.ok) {
    return;
  }
  ModelStats& m = models_[model];
  if (c.prompt_tokens && *c.prompt_tokens > 0 && prompt_bytes >= kMinBytesForTokenRatio) {
    const double ratio = static_cast<double>(*c.prompt_tokens) / static_cast<double>(prompt_bytes);
    m.tokens_per_byte = m.tokens_per_byte ? blend(*m.tokens_per_byte, ratio) : ratio;
  }
  if (c.completion_tokens) {
    const double n = static_cast<double>(*c.completion_tokens);
    const double current = m.answer_tokens.value_or(options_.default_answer_tokens);
    // A cut answer only shows that the natural length is at least this long.
    if (!c.truncated) {
      m.answer_tokens = m.answer_tokens ? blend(current, n) : n;
    } else if (n > current) {
      m.answer_tokens = blend(current, n);
    }
  }
}

}  // namespace fg::scheduling
