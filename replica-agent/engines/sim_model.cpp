#include "replica-agent/engines/sim_model.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace fg::sim {

namespace {

// Unit interval double from 53 random bits: the standard distributions' output is
// implementation-defined, this is the same on every platform.
double unit_draw(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

std::size_t common_prefix_chars(std::string_view a, std::string_view b) {
  auto mismatch = std::mismatch(a.begin(), a.begin() + std::min(a.size(), b.size()), b.begin());
  return static_cast<std::size_t>(mismatch.first - a.begin());
}

std::optional<std::size_t> non_negative_integer(const nlohmann::json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end()) {
    return std::nullopt;
  }
  if (it->is_number_unsigned()) {
    return it->get<std::size_t>();
  }
  if (it->is_number_integer() && it->get<std::int64_t>() >= 0) {
    return static_cast<std::size_t>(it->get<std::int64_t>());
  }
  return std::nullopt;
}

void append_content(const nlohmann::json& content, std::string& out) {
  if (content.is_string()) {
    out += content.get_ref<const std::string&>();
    return;
  }
  if (!content.is_array()) {
    return;
  }
  for (const auto& part : content) {
    if (!part.is_object()) {
      continue;
    }
    auto type = part.find("type");
    // Chat and Anthropic "text" parts, the Responses API's "input_text" and "output_text".
    bool text_type =
        type == part.end() ||
        (type->is_string() && (*type == "text" || *type == "input_text" || *type == "output_text"));
    auto text = part.find("text");
    if (text_type && text != part.end() && text->is_string()) {
      out += text->get_ref<const std::string&>();
    }
  }
}

// Small vocabulary in the style of a reviewer's one-line verdict.
constexpr std::array<std::string_view, 32> kWords = {
    "risk",    "level", "low",    "high",  "medium", "account", "review", "flag",
    "score",   "the",   "is",     "and",   "no",     "fraud",   "signal", "card",
    "pattern", "match", "refund", "claim", "user",   "payment", "safe",   "check",
    "0",       "1",     "2",      "3",     "4",      "5",       "RISK",   "LEVEL:",
};

}  // namespace

std::size_t prompt_tokens_for_chars(std::size_t chars) {
  return (chars + 3) / 4;
}

std::string extract_prompt_text(const nlohmann::json& body) {
  std::string text;
  if (!body.is_object()) {
    return text;
  }
  // Anthropic's "system" and the Responses API's "instructions" come before the conversation.
  for (const char* key : {"system", "instructions"}) {
    if (auto preamble = body.find(key); preamble != body.end()) {
      append_content(*preamble, text);
    }
  }
  // Chat and Anthropic "messages"; the Responses API's "input" (a string, or message items).
  for (const char* key : {"messages", "input"}) {
    auto turns = body.find(key);
    if (turns == body.end()) {
      continue;
    }
    if (turns->is_string()) {
      text += turns->get_ref<const std::string&>();
    } else if (turns->is_array()) {
      for (const auto& message : *turns) {
        if (message.is_object()) {
          if (auto content = message.find("content"); content != message.end()) {
            append_content(*content, text);
          }
        }
      }
    }
    return text;
  }
  if (auto prompt = body.find("prompt"); prompt != body.end()) {
    if (prompt->is_string()) {
      text += prompt->get<std::string>();
    } else if (prompt->is_array()) {
      for (const auto& piece : *prompt) {
        if (piece.is_string()) {
          text += piece.get_ref<const std::string&>();
        }
      }
    }
    return text;
  }
  // Rerank: the query, then every document.
  if (auto query = body.find("query"); query != body.end() && query->is_string()) {
    text += query->get_ref<const std::string&>();
    if (auto documents = body.find("documents"); documents != body.end() && documents->is_array()) {
      for (const auto& document : *documents) {
        if (document.is_string()) {
          text += document.get_ref<const std::string&>();
        }
      }
    }
  }
  return text;
}

std::optional<std::size_t> requested_max_tokens(const nlohmann::json& body) {
  if (!body.is_object()) {
    return std::nullopt;
  }
  for (const char* key : {"max_completion_tokens", "max_output_tokens"}) {
    if (auto value = non_negative_integer(body, key)) {
      return value;
    }
  }
  return non_negative_integer(body, "max_tokens");
}

SlotCache::SlotCache(std::size_t slots, PromptCacheOptions options)
    : options_(options), slots_(slots) {}

namespace {

std::size_t lcp_tokens(std::string_view a, std::string_view b) {
  return common_prefix_chars(a, b) / 4;
}

double share(std::size_t part, std::size_t whole) {
  return static_cast<double>(part) / static_cast<double>(whole);
}

}  // namespace

std::size_t SlotCache::cached_prefix_tokens(std::size_t slot, std::string_view prompt) const {
  if (slot >= slots_.size() || prompt.empty()) {
    return 0;
  }
  std::size_t cached = lcp_tokens(slots_[slot].text, prompt);
  return std::min(cached, prompt_tokens_for_chars(prompt.size()) - 1);
}

std::size_t SlotCache::slot_tokens(std::size_t slot) const {
  return slot < slots_.size() ? prompt_tokens_for_chars(slots_[slot].text.size()) : 0;
}

void SlotCache::store(std::size_t slot, std::string text) {
  if (slot < slots_.size()) {
    slots_[slot].text = std::move(text);
  }
}

void SlotCache::release(std::size_t slot) {
  if (slot < slots_.size()) {
    slots_[slot].last_used = releases_++;
  }
}

void SlotCache::clear(std::size_t slot) {
  store(slot, {});
}

std::optional<SlotPick> SlotCache::acquire(std::string_view prompt, const std::vector<bool>& busy) {
  auto idle = [&](std::size_t i) { return i >= busy.size() || !busy[i]; };
  const std::size_t prompt_tokens = prompt_tokens_for_chars(prompt.size());
  std::optional<std::size_t> chosen;
  bool update_host = false;
  SlotPick pick;

  if (options_.slot_prompt_similarity != 0.0 && prompt_tokens > 0) {
    double best = 0;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      if (!idle(i) || slots_[i].text.empty()) {
        continue;
      }
      const double sim = share(lcp_tokens(slots_[i].text, prompt), prompt_tokens);
      if (sim > best && sim > options_.slot_prompt_similarity) {
        best = sim;
        chosen = i;
      }
    }
    if (chosen) {
      pick.by_similarity = true;
      // About to lose more than half of what the slot holds: llama.cpp saves it first.
      const double keep =
          best * static_cast<double>(prompt_tokens) / static_cast<double>(slot_tokens(*chosen));
      update_host = keep < 0.5;
    }
  }
  if (!chosen) {
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      if (idle(i) && (!chosen || slots_[i].last_used <= slots_[*chosen].last_used)) {
        chosen = i;
      }
    }
    if (!chosen) {
      return std::nullopt;
    }
    update_host = true;
  }
  pick.slot = *chosen;
  if (update_host && options_.host_cache_tokens > 0) {
    save_to_host(slots_[*chosen].text);
    pick.restored_from_host = load_from_host(slots_[*chosen], prompt);
  }
  return pick;
}

void SlotCache::save_to_host(const std::string& text) {
  if (text.empty()) {
    return;
  }
  // Already contained in an entry: nothing to save.
  for (const auto& entry : host_) {
    if (common_prefix_chars(entry, text) == text.size()) {
      return;
    }
  }
  const std::size_t tokens = prompt_tokens_for_chars(text.size());
  if (tokens > options_.host_cache_tokens) {
    return;  // larger than the whole cache: skipped, so as not to flush it
  }
  // Entries the new one contains are obsolete.
  for (auto it = host_.begin(); it != host_.end();) {
    if (common_prefix_chars(*it, text) == it->size()) {
      host_tokens_ -= prompt_tokens_for_chars(it->size());
      it = host_.erase(it);
    } else {
      ++it;
    }
  }
  while (!host_.empty() && host_tokens_ + tokens > options_.host_cache_tokens) {
    host_tokens_ -= prompt_tokens_for_chars(host_.front().size());
    host_.erase(host_.begin());
  }
  host_.push_back(text);
  host_tokens_ += tokens;
}

bool SlotCache::load_from_host(Slot& slot, std::string_view prompt) {
  const std::size_t prompt_tokens = prompt_tokens_for_chars(prompt.size());
  if (prompt_tokens == 0) {
    return false;
  }
  const std::size_t held = prompt_tokens_for_chars(slot.text.size());
  const std::size_t lcp = lcp_tokens(slot.text, prompt);
  // An empty slot: any entry that keeps a quarter of itself wins.
  double best_keep = held > 0 ? share(lcp, held) : -1.0;
  double best_sim = share(lcp, prompt_tokens);
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < host_.size(); ++i) {
    const std::size_t entry_lcp = lcp_tokens(host_[i], prompt);
    const double keep = share(entry_lcp, prompt_tokens_for_chars(host_[i].size()));
    const double sim = share(entry_lcp, prompt_tokens);
    if (keep < 0.25) {
      continue;  // do not trash large prompts
    }
    if (best_keep < keep && best_sim < sim) {
      best_keep = keep;
      best_sim = sim;
      best = i;
    }
  }
  if (!best) {
    return false;
  }
  host_tokens_ -= prompt_tokens_for_chars(host_[*best].size());
  slot.text = std::move(host_[*best]);
  host_.erase(host_.begin() + static_cast<std::ptrdiff_t>(*best));
  return true;
}

SimPlan plan_request(const SimProfile& profile, const SimOptions& options, std::string_view prompt,
                     std::size_t cached_tokens, std::optional<std::size_t> max_tokens,
                     std::mt19937_64& rng) {
  if (!(options.time_scale > 0)) {
    throw std::invalid_argument("sim time_scale must be positive");
  }
  // Always three draws, in this order, so enabling jitter does not change who fails.
  double fail_draw = unit_draw(rng);
  double prefill_draw = unit_draw(rng);
  double decode_draw = unit_draw(rng);
  // Capped below 1 so a duration never reaches zero or goes negative.
  double jitter = std::clamp(options.jitter, 0.0, 0.95);

  SimPlan plan;
  plan.prompt_tokens = prompt_tokens_for_chars(prompt.size());
  plan.cached_tokens =
      plan.prompt_tokens == 0 ? 0 : std::min(cached_tokens, plan.prompt_tokens - 1);
  plan.completion_tokens = profile.default_max_tokens;
  plan.finish_reason = "stop";
  if (max_tokens && *max_tokens < profile.default_max_tokens) {
    plan.completion_tokens = *max_tokens;
    plan.finish_reason = "length";
  }
  plan.prefill_jitter = 1.0 + jitter * (2.0 * prefill_draw - 1.0);
  plan.decode_jitter = 1.0 + jitter * (2.0 * decode_draw - 1.0);
  double uncached = static_cast<double>(plan.prompt_tokens - plan.cached_tokens);
  plan.prefill_seconds = uncached / profile.prefill_tps * plan.prefill_jitter / options.time_scale;
  plan.fail = fail_draw < options.fail_rate;
  plan.text_seed = text_seed(prompt, options.seed);
  return plan;
}

double token_interval_seconds(const SimProfile& profile, std::size_t busy_slots,
                              double time_scale) {
  const auto& scaling = profile.parallel_decode_scaling;
  std::size_t k = std::clamp<std::size_t>(busy_slots, 1, std::max<std::size_t>(scaling.size(), 1));
  double total_factor = scaling.empty() ? 1.0 : scaling[k - 1];
  double per_stream_tps = profile.decode_tps * total_factor / static_cast<double>(k);
  return 1.0 / per_stream_tps / time_scale;
}

std::vector<double> token_schedule(const SimProfile& profile, const SimPlan& plan,
                                   std::size_t busy_slots, double time_scale) {
  double interval = token_interval_seconds(profile, busy_slots, time_scale) * plan.decode_jitter;
  std::vector<double> offsets(plan.completion_tokens);
  for (std::size_t i = 0; i < offsets.size(); ++i) {
    offsets[i] = plan.prefill_seconds + static_cast<double>(i) * interval;
  }
  return offsets;
}

std::uint64_t text_seed(std::string_view prompt, std::uint64_t configured_seed) {
  std::uint64_t hash = 0xCBF29CE484222325ULL;  // FNV-1a 64
  for (unsigned char c : prompt) {
    hash ^= c;
    hash *= 0x100000001B3ULL;
  }
  return splitmix64(hash ^ splitmix64(configured_seed));
}

std::string sim_token(std::uint64_t seed, std::size_t index) {
  std::uint64_t draw = splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(index)));
  std::string_view word = kWords[draw % kWords.size()];
  std::string token = index == 0 ? std::string() : std::string(" ");
  token += word;
  return token;
}

std::string sim_text(std::uint64_t seed, std::size_t count) {
  std::string text;
  for (std::size_t i = 0; i < count; ++i) {
    text += sim_token(seed, i);
  }
  return text;
}

}  // namespace fg::sim
