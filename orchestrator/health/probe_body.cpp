#include "orchestrator/health/probe_body.hpp"

#include <array>
#include <cmath>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/util/json.hpp"

namespace fg::health {

namespace {

constexpr std::uint64_t kMaxReportedSlots = 1024;
constexpr double kMaxReportedSpeed = 1e7;
constexpr std::size_t kMaxNameShown = 64;
constexpr std::size_t kMaxNamesShown = 3;

std::string shown(const std::string& name) {
  return name.size() <= kMaxNameShown ? name : name.substr(0, kMaxNameShown) + "...";
}

std::optional<std::uint32_t> read_slots(const nlohmann::json& doc, const char* key) {
  auto it = doc.find(key);
  if (it != doc.end() && it->is_number_unsigned()) {
    const auto v = it->get<std::uint64_t>();
    if (v <= kMaxReportedSlots) {
      return static_cast<std::uint32_t>(v);
    }
  }
  return std::nullopt;
}

// A speed in tokens per second: positive, finite, and below anything a phone could do.
std::optional<double> read_speed(const nlohmann::json& doc, const char* key) {
  auto it = doc.find(key);
  if (it != doc.end() && it->is_number()) {
    const double v = it->get<double>();
    if (std::isfinite(v) && v > 0 && v <= kMaxReportedSpeed) {
      return v;
    }
  }
  return std::nullopt;
}

std::optional<std::uint64_t> read_count(const nlohmann::json& doc, const char* key) {
  auto it = doc.find(key);
  if (it != doc.end() && it->is_number_unsigned()) {
    return it->get<std::uint64_t>();
  }
  return std::nullopt;
}

// Every key parse_probe_body reads.
constexpr std::array<std::string_view, 8> kKeysRead = {"model",
                                                       "data",
                                                       "slots_total",
                                                       "slots_idle",
                                                       "prefill_tps",
                                                       "decode_tps",
                                                       "host_prompt_cache_tokens",
                                                       "engine_starts"};

// Whether the body can say anything parse_probe_body reads. A key is spelt either literally,
// quoted, or with a backslash escape, so a body with neither says nothing and need not be parsed:
// llama-server's {"status":"ok"} is every probe of a fleet of plain servers, and its nlohmann
// parse (~1,300 instructions and allocations) found nothing. One pass over the quotes.
bool may_name_a_key(std::string_view body) {
  if (body.find('\\') != std::string_view::npos) {
    return true;
  }
  for (auto q = body.find('"'); q != std::string_view::npos; q = body.find('"', q + 1)) {
    const std::string_view rest = body.substr(q + 1);
    for (std::string_view key : kKeysRead) {
      if (rest.size() > key.size() && rest[0] == key[0] && rest.starts_with(key) &&
          rest[key.size()] == '"') {
        return true;
      }
    }
  }
  return false;
}

}  // namespace

ProbeBody parse_probe_body(std::string_view body, std::string_view expected_model) {
  ProbeBody out;
  if (!may_name_a_key(body)) {
    return out;
  }
  const nlohmann::json doc = parse_network_json(body);
  if (!doc.is_object()) {
    return out;
  }
  out.slots_total = read_slots(doc, "slots_total");
  out.slots_idle = read_slots(doc, "slots_idle");
  if (out.slots_total && *out.slots_total == 0) {
    out.slots_total.reset();
  }
  out.prefill_tps = read_speed(doc, "prefill_tps");
  out.decode_tps = read_speed(doc, "decode_tps");
  out.host_prompt_cache_tokens = read_count(doc, "host_prompt_cache_tokens");
  out.engine_starts = read_count(doc, "engine_starts");
  if (auto m = doc.find("model"); m != doc.end() && m->is_string()) {
    const auto& name = m->get_ref<const std::string&>();
    out.model = name == expected_model ? ModelCheck::match : ModelCheck::mismatch;
    if (out.model == ModelCheck::mismatch) {
      out.served = shown(name);
    }
    return out;
  }
  auto data = doc.find("data");
  if (data == doc.end() || !data->is_array()) {
    return out;
  }
  std::vector<std::string> ids;
  for (const auto& entry : *data) {
    if (!entry.is_object()) {
      continue;
    }
    auto id = entry.find("id");
    if (id == entry.end() || !id->is_string()) {
      continue;
    }
    const auto& name = id->get_ref<const std::string&>();
    if (name == expected_model) {
      out.model = ModelCheck::match;
      return out;
    }
    ids.push_back(name);
  }
  if (ids.empty()) {
    return out;  // an empty or unreadable list proves nothing either way
  }
  out.model = ModelCheck::mismatch;
  for (std::size_t i = 0; i < ids.size() && i < kMaxNamesShown; ++i) {
    out.served += (i == 0 ? "" : ", ") + shown(ids[i]);
  }
  if (ids.size() > kMaxNamesShown) {
    out.served += ", ... (" + std::to_string(ids.size()) + " models)";
  }
  return out;
}

}  // namespace fg::health

namespace fg::health {

const ProbeBody& ProbeBodyMemo::parse(std::string_view body, std::string_view expected_model) {
  if (kept_ && body == body_ && expected_model == expected_model_) {
    return facts_;
  }
  facts_ = parse_probe_body(body, expected_model);
  kept_ = body.size() <= kMaxKept;
  if (kept_) {
    body_.assign(body);
    expected_model_.assign(expected_model);
  } else {
    std::string().swap(body_);
  }
  return facts_;
}

ProbeOutcome judge_answer(unsigned status, std::string_view body, std::string_view expected_model,
                          ProbeBodyMemo* memo) {
  ProbeOutcome outcome;
  const bool loading = status == 503 && (body.find("Loading model") != std::string_view::npos ||
                                         body.find("\"loading\"") != std::string_view::npos);
  if (status != 200 && !loading) {
    outcome.result = ProbeResult::fail;
    outcome.error = "HTTP " + std::to_string(status);
    return outcome;
  }
  ProbeBody parsed;
  if (memo == nullptr) {
    parsed = parse_probe_body(body, expected_model);
  }
  const ProbeBody& facts = memo != nullptr ? memo->parse(body, expected_model) : parsed;
  outcome.model = facts.model;
  if (facts.model == ModelCheck::mismatch) {
    outcome.result = ProbeResult::fail;
    outcome.error = "serves model " + facts.served + ", not " + std::string(expected_model);
    return outcome;
  }
  outcome.result = loading ? ProbeResult::loading : ProbeResult::pass;
  if (!loading) {
    outcome.slots_total = facts.slots_total;
    outcome.slots_idle = facts.slots_idle;
    outcome.prefill_tps = facts.prefill_tps;
    outcome.decode_tps = facts.decode_tps;
    outcome.host_prompt_cache_tokens = facts.host_prompt_cache_tokens;
    outcome.engine_starts = facts.engine_starts;
  }
  return outcome;
}

}  // namespace fg::health
