#include "replica-agent/config/agent_config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

#include "common/sim/profiles.hpp"
#include "common/util/duration.hpp"
#include "common/util/text.hpp"

namespace fg::agent {

namespace {

// Keys each map accepts, next to the parser so a new key cannot be parsed without being accepted.
const std::vector<std::string> kRootKeys = {"listen",     "model",        "slots", "engine",
                                            "public_url", "gateway",      "tls",   "api_key_env",
                                            "log",        "drain_timeout"};
const std::vector<std::string> kEngineKeys = {
    "kind", "profile", "time_scale", "jitter", "fail_rate", "seed", "url", "command", "autotune"};
const std::vector<std::string> kAutotuneKeys = {"threads", "batch_size", "prompt_tokens",
                                                "predict_tokens"};
const std::vector<std::string> kGatewayKeys = {"url", "token_env"};
const std::vector<std::string> kTlsKeys = {"cert", "key"};
const std::vector<std::string> kLogKeys = {"level"};

// Flags and the key each one sets. --config, --check, --help and --version are handled apart.
struct FlagKey {
  const char* flag;
  const char* key;
};
const std::vector<FlagKey> kFlags = {
    {"--listen", "listen"},
    {"--model", "model"},
    {"--slots", "slots"},
    {"--engine", "engine.kind"},
    {"--profile", "engine.profile"},
    {"--time-scale", "engine.time_scale"},
    {"--jitter", "engine.jitter"},
    {"--fail-rate", "engine.fail_rate"},
    {"--seed", "engine.seed"},
    {"--engine-url", "engine.url"},
    {"--engine-command", "engine.command"},
    {"--autotune-threads", "engine.autotune.threads"},
    {"--autotune-batch-size", "engine.autotune.batch_size"},
    {"--autotune-prompt-tokens", "engine.autotune.prompt_tokens"},
    {"--autotune-predict-tokens", "engine.autotune.predict_tokens"},
    {"--public-url", "public_url"},
    {"--gateway-url", "gateway.url"},
    {"--gateway-token-env", "gateway.token_env"},
    {"--tls-cert", "tls.cert"},
    {"--tls-key", "tls.key"},
    {"--api-key-env", "api_key_env"},
    {"--log-level", "log.level"},
    {"--drain-timeout", "drain_timeout"},
};

std::string in_quotes(std::string_view s) {
  return "\"" + std::string(s) + "\"";
}

std::string did_you_mean(const std::string& key, const std::vector<std::string>& known) {
  const std::string best = closest_word(key, known);
  return best.empty() ? "" : "; did you mean '" + best + "'?";
}

std::optional<std::uint64_t> to_uint(std::string_view text) {
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

std::optional<double> to_double(std::string_view text) {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
      !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

std::string number_text(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw AgentConfigError(where + ": " + what);
}

double in_range(const std::string& where, std::string_view text, double low, double high) {
  auto v = to_double(text);
  if (!v) {
    fail(where, "expected a number, got " + in_quotes(text));
  }
  if (*v < low || *v > high) {
    fail(where, "must be between " + number_text(low) + " and " + number_text(high) + ", got " +
                    in_quotes(text));
  }
  return *v;
}

std::vector<std::string> split_words(std::string_view text) {
  std::vector<std::string> words;
  std::istringstream in{std::string(text)};
  for (std::string word; in >> word;) {
    words.push_back(word);
  }
  return words;
}

// "1,2, 4" or "1 2 4" -> {"1", "2", "4"}.
std::vector<std::string> split_list(std::string_view text) {
  std::string spaced(text);
  std::replace(spaced.begin(), spaced.end(), ',', ' ');
  return split_words(spaced);
}

std::uint32_t whole_in_range(const std::string& where, std::string_view text, std::uint32_t low,
                             std::uint32_t high) {
  auto v = to_uint(text);
  if (!v) {
    fail(where, "expected a whole number, got " + in_quotes(text));
  }
  if (*v < low || *v > high) {
    fail(where, "must be between " + std::to_string(low) + " and " + std::to_string(high) +
                    ", got " + std::string(text));
  }
  return static_cast<std::uint32_t>(*v);
}

// The values of an engine.autotune list: at least one, each in [low, high], no repeats.
std::vector<std::uint32_t> autotune_list(const std::string& where,
                                         const std::vector<std::string>& items,
                                         std::uint32_t high) {
  if (items.empty()) {
    fail(where, "expected a list of at least one value to try, such as [1, 2, 4]");
  }
  std::vector<std::uint32_t> values;
  for (const auto& item : items) {
    const std::uint32_t v = whole_in_range(where, item, 1, high);
    if (std::find(values.begin(), values.end(), v) != values.end()) {
      fail(where, "lists " + item + " twice");
    }
    values.push_back(v);
  }
  return values;
}

bool is_autotune_list(const std::string& key) {
  return key == "engine.autotune.threads" || key == "engine.autotune.batch_size";
}

void set_autotune_list(AgentConfig& c, const std::string& key,
                       const std::vector<std::string>& items, const std::string& where) {
  const bool threads = key == "engine.autotune.threads";
  auto values = autotune_list(where, items, threads ? kMaxAutotuneThreads : kMaxAutotuneBatchSize);
  (threads ? c.engine.autotune.threads : c.engine.autotune.batch_size) = std::move(values);
  c.engine.autotune.enabled = true;
}

// Sets one key from its text. `where` prefixes messages ("agent.yaml:7: engine.seed" or
// "--seed"). A duration from a flag may be a bare number of seconds; in the file it needs a unit,
// as everywhere in the gateway's YAML.
void apply_value(AgentConfig& c, const std::string& key, const std::string& text,
                 const std::string& where, bool from_flag) {
  if (key == "listen") {
    std::string why;
    auto parsed = net::parse_host_port(text, &why);
    if (!parsed) {
      fail(where, "expected host:port such as 0.0.0.0:8081, got " + in_quotes(text) +
                      (why.empty() ? "" : " (" + why + ")"));
    }
    c.listen = *parsed;
  } else if (key == "model") {
    if (text.empty()) {
      fail(where, "must not be empty");
    }
    c.model = text;
  } else if (key == "slots") {
    auto v = to_uint(text);
    if (!v) {
      fail(where, "expected a whole number, got " + in_quotes(text));
    }
    if (*v < 1 || *v > kMaxAgentSlots) {
      fail(where, "must be between 1 and " + std::to_string(kMaxAgentSlots) + ", got " + text);
    }
    c.slots = static_cast<std::uint32_t>(*v);
  } else if (key == "engine.kind") {
    if (text == "sim") {
      c.engine.kind = EngineKind::sim;
    } else if (text == "llama-server") {
      c.engine.kind = EngineKind::llama_server;
    } else if (text == "openai") {
      c.engine.kind = EngineKind::openai;
    } else {
      fail(where, "expected sim, llama-server or openai, got " + in_quotes(text));
    }
  } else if (key == "engine.profile") {
    if (sim::find_profile(text) == nullptr) {
      fail(where,
           "unknown simulator profile " + in_quotes(text) + "; known: " + sim::profile_list());
    }
    c.engine.profile = text;
  } else if (key == "engine.time_scale") {
    auto v = to_double(text);
    if (!v || !(*v > 0) || *v > 1e6) {
      fail(where, "expected a number greater than 0 (10 runs the profile ten times faster), got " +
                      in_quotes(text));
    }
    c.engine.time_scale = *v;
  } else if (key == "engine.jitter") {
    c.engine.jitter = in_range(where, text, 0.0, 0.95);
  } else if (key == "engine.fail_rate") {
    c.engine.fail_rate = in_range(where, text, 0.0, 1.0);
  } else if (key == "engine.seed") {
    auto v = to_uint(text);
    if (!v) {
      fail(where, "expected a non-negative whole number, got " + in_quotes(text));
    }
    c.engine.seed = *v;
  } else if (key == "engine.url" || key == "gateway.url" || key == "public_url") {
    std::string why;
    auto url = net::parse_url(text, &why);
    if (!url) {
      fail(where, "expected an http(s) URL, got " + in_quotes(text) +
                      (why.empty() ? "" : " (" + why + ")"));
    }
    if (key == "engine.url") {
      c.engine.url = *url;
    } else if (key == "gateway.url") {
      c.gateway.url = url->to_string();
    } else {
      c.public_url = url->to_string();
    }
  } else if (key == "engine.command") {
    c.engine.command = split_words(text);
  } else if (is_autotune_list(key)) {
    set_autotune_list(c, key, split_list(text), where);
  } else if (key == "engine.autotune.prompt_tokens") {
    c.engine.autotune.prompt_tokens = whole_in_range(where, text, 1, kMaxAutotunePromptTokens);
    c.engine.autotune.enabled = true;
  } else if (key == "engine.autotune.predict_tokens") {
    c.engine.autotune.predict_tokens = whole_in_range(where, text, 1, kMaxAutotunePredictTokens);
    c.engine.autotune.enabled = true;
  } else if (key == "gateway.token_env" || key == "api_key_env") {
    if (!text.empty() && !is_env_name(text)) {
      fail(where,
           "expected an environment variable name (letters, digits, '_'; not starting with a "
           "digit), got " +
               in_quotes(text));
    }
    (key == "api_key_env" ? c.api_key_env : c.gateway.token_env) = text;
  } else if (key == "tls.cert") {
    c.tls.cert = text;
  } else if (key == "tls.key") {
    c.tls.key = text;
  } else if (key == "log.level") {
    if (!log::parse_level(text, &c.log_level)) {
      fail(where, "expected one of debug, info, warn, error, got " + in_quotes(text));
    }
  } else if (key == "drain_timeout") {
    std::optional<std::chrono::milliseconds> d = parse_duration(text);
    if (!d && from_flag) {
      if (auto seconds = to_double(text); seconds && *seconds >= 0 && *seconds <= 86400) {
        d = std::chrono::milliseconds(std::llround(*seconds * 1000));
      }
    }
    if (!d) {
      const bool bare = to_double(text).has_value();
      fail(where, "expected a duration such as 30s, got " + in_quotes(text) +
                      (bare ? " (add a unit: ms, s, m or h)" : ""));
    }
    c.drain_timeout = *d;
  }
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return in_quotes(node.Scalar());
    default:
      return "nothing";
  }
}

int line_of(const YAML::Node& node, int fallback) {
  const YAML::Mark mark = node.Mark();
  return mark.is_null() ? fallback : mark.line + 1;
}

class FileParser {
 public:
  FileParser(std::string source, AgentConfig& config, Origins* origins)
      : source_(std::move(source)), config_(config), origins_(origins) {}

  void parse(const std::string& text) {
    std::vector<YAML::Node> docs;
    try {
      docs = YAML::LoadAll(text);
    } catch (const YAML::Exception& e) {
      fail(where(e.mark.is_null() ? 1 : e.mark.line + 1, "(syntax)"), e.msg);
    }
    if (docs.size() > 1) {
      fail(where(line_of(docs[1], 1), "(root)"),
           "only one YAML document is allowed (found a second '---')");
    }
    if (docs.empty() || docs[0].IsNull()) {
      return;  // an empty file sets nothing; flags may still make a valid configuration
    }
    walk(docs[0], "", 1, kRootKeys);
  }

 private:
  std::string where(int line, const std::string& path) const {
    return source_ + ":" + std::to_string(line) + ": " + path;
  }

  static std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }

  const std::vector<std::string>* keys_of(const std::string& path) const {
    if (path == "engine") {
      return &kEngineKeys;
    }
    if (path == "engine.autotune") {
      return &kAutotuneKeys;
    }
    if (path == "gateway") {
      return &kGatewayKeys;
    }
    if (path == "tls") {
      return &kTlsKeys;
    }
    if (path == "log") {
      return &kLogKeys;
    }
    return nullptr;
  }

  // Checks a map's keys (known, unique) and applies each value.
  void walk(const YAML::Node& node, const std::string& path, int line,
            const std::vector<std::string>& known) {
    if (node.IsNull()) {
      return;  // "engine:" with every key commented out
    }
    if (!node.IsMap()) {
      fail(where(line_of(node, line), path.empty() ? "(root)" : path),
           "expected a map, got " + describe(node));
    }
    std::vector<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const YAML::Node key_node = it->first;
      const int key_line = line_of(key_node, line);
      if (!key_node.IsScalar()) {
        fail(where(key_line, path.empty() ? "(root)" : path),
             "keys must be plain names, got " + describe(key_node));
      }
      const std::string key = key_node.Scalar();
      const std::string key_path = join(path, key);
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        fail(where(key_line, key_path), "unknown key" + did_you_mean(key, known));
      }
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
        fail(where(key_line, key_path), "duplicate key");
      }
      seen.push_back(key);
      const YAML::Node value = it->second;
      // An empty value is blamed on the key's line: yaml-cpp marks it where the next token starts.
      const int value_line = value.IsNull() ? key_line : line_of(value, key_line);
      if (const auto* sub = keys_of(key_path)) {
        if (key_path == "engine.autotune") {
          // Present, even empty: autotuning is asked for (validation then wants its values).
          config_.engine.autotune.enabled = true;
          if (origins_ != nullptr) {
            (*origins_)[key_path] = source_ + ":" + std::to_string(key_line);
          }
        }
        walk(value, key_path, value_line, *sub);
        continue;
      }
      set(key_path, value, value_line);
    }
  }

  void set(const std::string& key, const YAML::Node& value, int line) {
    const std::string at = where(line, key);
    if (origins_ != nullptr) {
      (*origins_)[key] = source_ + ":" + std::to_string(line);
    }
    if (key == "engine.command") {
      if (value.IsNull()) {
        config_.engine.command.clear();
        return;
      }
      if (value.IsScalar()) {
        config_.engine.command = split_words(value.Scalar());
        return;
      }
      if (!value.IsSequence()) {
        fail(at, "expected a list of program and arguments, got " + describe(value));
      }
      std::vector<std::string> argv;
      for (std::size_t i = 0; i < value.size(); ++i) {
        if (!value[i].IsScalar()) {
          fail(where(line_of(value[i], line), key + "[" + std::to_string(i) + "]"),
               "expected a string, got " + describe(value[i]));
        }
        argv.push_back(value[i].Scalar());
      }
      config_.engine.command = std::move(argv);
      return;
    }
    if (is_autotune_list(key) && value.IsSequence()) {
      std::vector<std::string> items;
      for (std::size_t i = 0; i < value.size(); ++i) {
        if (!value[i].IsScalar()) {
          fail(where(line_of(value[i], line), key + "[" + std::to_string(i) + "]"),
               "expected a whole number, got " + describe(value[i]));
        }
        items.push_back(value[i].Scalar());
      }
      set_autotune_list(config_, key, items, at);
      return;
    }
    if (value.IsNull()) {
      const bool may_be_empty = key == "api_key_env" || key == "gateway.token_env" ||
                                key == "gateway.url" || key == "public_url" || key == "tls.cert" ||
                                key == "tls.key";
      if (key == "slots") {
        config_.slots.reset();
        return;
      }
      if (!may_be_empty) {
        fail(at, "missing value");
      }
      clear(key);
      return;
    }
    if (!value.IsScalar()) {
      fail(at, "expected a single value, got " + describe(value));
    }
    const std::string& text = value.Scalar();
    if (text.empty() && (key == "gateway.url" || key == "public_url")) {
      clear(key);
      return;
    }
    apply_value(config_, key, text, at, false);
  }

  void clear(const std::string& key) {
    if (key == "gateway.url") {
      config_.gateway.url.clear();
    } else if (key == "public_url") {
      config_.public_url.clear();
    } else {
      apply_value(config_, key, "", where(0, key), false);
    }
  }

  std::string source_;
  AgentConfig& config_;
  Origins* origins_;
};

std::string origin_of(const Origins& origins, const std::string& key, const std::string& fallback) {
  auto it = origins.find(key);
  if (it == origins.end()) {
    return fallback;
  }
  // Flags are named alone; file lines as "file:line: key".
  return it->second.rfind("--", 0) == 0 ? it->second : it->second + ": " + key;
}

}  // namespace

const char* to_string(EngineKind kind) {
  switch (kind) {
    case EngineKind::sim:
      return "sim";
    case EngineKind::llama_server:
      return "llama-server";
    case EngineKind::openai:
      return "openai";
  }
  return "sim";
}

void load_agent_config_string(const std::string& text, const std::string& source,
                              AgentConfig& config, Origins* origins) {
  FileParser(source, config, origins).parse(text);
}

void load_agent_config_file(const std::string& path, AgentConfig& config, Origins* origins) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw AgentConfigError(path + ": cannot read the configuration file: " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  load_agent_config_string(text.str(), path, config, origins);
}

void validate_agent_config(const AgentConfig& c, const Origins& origins) {
  // Where a missing key would go: the file when there is one, else the flag.
  std::string file;
  for (const auto& [key, origin] : origins) {
    if (origin.rfind("--", 0) != 0) {
      file = origin.substr(0, origin.rfind(':'));
      break;
    }
  }
  auto missing = [&](const std::string& key, const std::string& flag) {
    return file.empty() ? flag : file + ":1: " + key;
  };
  if (c.model.empty()) {
    fail(missing("model", "--model"),
         "missing; the model id this phone serves is required (model: in the file or --model)");
  }
  const bool sim = c.engine.kind == EngineKind::sim;
  const std::string kind = std::string("engine.kind is ") + to_string(c.engine.kind);
  // engine.autotune: the first of its keys that was set, for messages.
  std::string autotune_key;
  for (const auto& [key, origin] : origins) {
    if (key.rfind("engine.autotune", 0) == 0) {
      autotune_key = key;
      break;
    }
  }
  if (c.engine.autotune.enabled) {
    const std::string at =
        origin_of(origins, autotune_key, autotune_key.empty() ? "engine.autotune" : autotune_key);
    const AutotuneConfig& tune = c.engine.autotune;
    if (c.engine.kind != EngineKind::llama_server) {
      fail(at, "only for the llama-server engine (" + kind + ")");
    }
    if (c.engine.command.empty()) {
      fail(at,
           "needs engine.command: the agent starts llama-server itself with each setting it tries");
    }
    if (tune.threads.empty() && tune.batch_size.empty()) {
      fail(at, "needs threads or batch_size: the values to try (threads: [2, 4, 6])");
    }
    const std::size_t combinations = std::max<std::size_t>(tune.threads.size(), 1) *
                                     std::max<std::size_t>(tune.batch_size.size(), 1);
    if (combinations > kMaxAutotuneCandidates) {
      fail(at, std::to_string(combinations) +
                   " combinations of threads and batch_size to try; at most " +
                   std::to_string(kMaxAutotuneCandidates));
    }
  }
  if (sim) {
    for (const char* key : {"engine.url", "engine.command"}) {
      if (origins.count(key) != 0) {
        fail(origin_of(origins, key, key),
             "only for the llama-server and openai engines (" + kind + ")");
      }
    }
  } else {
    for (const char* key : {"engine.profile", "engine.time_scale", "engine.jitter",
                            "engine.fail_rate", "engine.seed"}) {
      if (origins.count(key) != 0) {
        fail(origin_of(origins, key, key), "only for the sim engine (" + kind + ")");
      }
    }
    if (c.engine.kind == EngineKind::openai && !c.engine.command.empty()) {
      fail(origin_of(origins, "engine.command", "engine.command"),
           "only for the llama-server engine (" + kind + ")");
    }
  }
  if (c.tls.cert.empty() != c.tls.key.empty()) {
    const char* set = c.tls.cert.empty() ? "tls.key" : "tls.cert";
    const char* unset = c.tls.cert.empty() ? "tls.cert" : "tls.key";
    fail(origin_of(origins, set, set),
         std::string("needs ") + unset + " too (both PEM files, or neither)");
  }
  if (c.gateway.enabled()) {
    if (c.public_url.empty()) {
      fail(origin_of(origins, "gateway.url", "gateway.url"),
           "needs public_url (the address the gateway sends this phone's traffic to)");
    }
    if (c.gateway.token_env.empty()) {
      fail(origin_of(origins, "gateway.url", "gateway.url"),
           "needs gateway.token_env (the environment variable holding the registration token)");
    }
  }
}

std::string usage_text() {
  return "usage: fleetgate-agent [--config FILE] [--check] [options]\n"
         "Serves one phone's OpenAI-compatible API with admission to its slots, health,\n"
         "metrics and registration with a gateway. Every option overrides the file's key.\n"
         "\n"
         "  --config FILE          YAML configuration (see docs/agent.md)\n"
         "  --check                validate the configuration and exit (0 valid, 1 invalid)\n"
         "  --listen HOST:PORT     listen (default 127.0.0.1:8081; port 0 = any free port)\n"
         "  --model NAME           model: the model id this phone serves (required)\n"
         "  --slots N              slots: parallel requests (default: the profile's or the "
         "engine's)\n"
         "  --engine KIND          engine.kind: sim (default), llama-server or openai\n"
         "  --profile NAME         engine.profile (sim; default fast-test): " +
         sim::profile_list() +
         "\n"
         "  --time-scale X         engine.time_scale (sim): run X times faster (default 1)\n"
         "  --seed N               engine.seed (sim): answer text and draws (default 0)\n"
         "  --jitter F             engine.jitter (sim): spread speeds by +-F, 0..0.95\n"
         "  --fail-rate F          engine.fail_rate (sim): fraction answered 500, 0..1\n"
         "  --engine-url URL       engine.url (llama-server, openai; default " +
         std::string(kDefaultEngineUrl) +
         ")\n"
         "  --engine-command CMD   engine.command (llama-server): program and arguments,\n"
         "                         split on spaces, started and supervised by the agent\n"
         "  --autotune-threads L   engine.autotune.threads (llama-server with a command):\n"
         "                         --threads values to try before serving, e.g. 1,2,4\n"
         "  --autotune-batch-size L\n"
         "                         engine.autotune.batch_size: --batch-size values to try\n"
         "  --autotune-prompt-tokens N\n"
         "                         engine.autotune.prompt_tokens: reference prompt (256)\n"
         "  --autotune-predict-tokens N\n"
         "                         engine.autotune.predict_tokens: reference answer (32)\n"
         "  --public-url URL       public_url: the address registered with the gateway\n"
         "  --gateway-url URL      gateway.url: the gateway's admin listener\n"
         "  --gateway-token-env V  gateway.token_env: env var with the registration token\n"
         "  --tls-cert FILE        tls.cert: serve HTTPS with this PEM certificate chain\n"
         "  --tls-key FILE         tls.key: and this PEM private key\n"
         "  --api-key-env V        api_key_env: env var with the bearer key for /v1/*\n"
         "  --log-level LEVEL      log.level: debug, info (default), warn or error\n"
         "  --drain-timeout T      drain_timeout: time in-flight requests get after SIGTERM\n"
         "                         (30s; a bare number is seconds)\n"
         "  --help, --version\n";
}

std::variant<Invocation, CliExit> parse_command_line(const std::vector<std::string>& args,
                                                     const std::string& version) {
  Invocation inv;
  std::vector<std::pair<const FlagKey*, std::string>> sets;
  std::string flag_error;
  // First pass: syntax, and where the file is. Values are applied after the file.
  for (std::size_t i = 0; i < args.size() && flag_error.empty(); ++i) {
    std::string flag = args[i];
    std::optional<std::string> inline_value;
    if (auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = flag.substr(eq + 1);
      flag.resize(eq);
    }
    if (flag == "--help" || flag == "-h") {
      return CliExit{0, usage_text()};
    }
    if (flag == "--version") {
      return CliExit{0, "fleetgate-agent " + version + "\n"};
    }
    if (flag == "--check") {
      inv.check = true;
      continue;
    }
    const bool is_config = flag == "--config";
    auto known = std::find_if(kFlags.begin(), kFlags.end(),
                              [&](const FlagKey& f) { return flag == f.flag; });
    if (!is_config && known == kFlags.end()) {
      flag_error = "unknown argument '" + args[i] + "'";
      break;
    }
    std::string value;
    if (inline_value) {
      value = *inline_value;
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      flag_error = flag + ": needs a value";
      break;
    }
    if (is_config) {
      inv.config_path = value;
    } else {
      sets.emplace_back(&*known, value);
    }
  }
  auto usage_error = [&](const std::string& message) {
    return CliExit{inv.check ? 1 : 2,
                   "fleetgate-agent: " + message + "\n(see fleetgate-agent --help)\n"};
  };
  if (!flag_error.empty()) {
    return usage_error(flag_error);
  }
  Origins origins;
  if (!inv.config_path.empty()) {
    try {
      load_agent_config_file(inv.config_path, inv.config, &origins);
    } catch (const AgentConfigError& e) {
      return CliExit{1, std::string("fleetgate-agent: invalid configuration: ") + e.what() + "\n"};
    }
  }
  try {
    for (const auto& [flag, value] : sets) {
      apply_value(inv.config, flag->key, value, flag->flag, true);
      origins[flag->key] = flag->flag;
    }
  } catch (const AgentConfigError& e) {
    return usage_error(e.what());
  }
  try {
    validate_agent_config(inv.config, origins);
  } catch (const AgentConfigError& e) {
    const bool from_flag = std::string_view(e.what()).rfind("--", 0) == 0;
    if (from_flag && !inv.check) {
      return usage_error(e.what());
    }
    return CliExit{1, std::string("fleetgate-agent: invalid configuration: ") + e.what() + "\n"};
  }
  if (inv.config.engine.kind != EngineKind::sim && inv.config.engine.url.host.empty()) {
    inv.config.engine.url = *net::parse_url(kDefaultEngineUrl);
  }
  if (inv.check) {
    return CliExit{0, "fleetgate-agent: " +
                          (inv.config_path.empty() ? std::string("the flags") : inv.config_path) +
                          " is valid\n"};
  }
  return inv;
}

}  // namespace fg::agent
