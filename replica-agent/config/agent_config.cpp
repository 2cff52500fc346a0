#include "replica-agent/config/agent_config.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/config/yaml_reader.hpp"
#include "common/sim/profiles.hpp"

namespace fg::agent {

namespace {

// Keys each map accepts, next to the parser so a new key cannot be parsed without being accepted.
const std::vector<std::string> kRootKeys = {
    "listen",      "model", "slots",         "engine",     "public_url", "gateway",   "tls",
    "api_key_env", "log",   "drain_timeout", "model_file", "tunnel",     "deployment"};
const std::vector<std::string> kModelFileKeys = {"url", "sha256", "path"};
const std::vector<std::string> kTunnelKeys = {"kind", "key_env", "relays", "domain_suffix",
                                              "poll_interval"};
const std::vector<std::string> kDeploymentKeys = {"window"};
const std::vector<std::string> kEngineKeys = {
    "kind", "profile", "time_scale", "jitter", "fail_rate", "seed", "url", "command", "autotune"};
const std::vector<std::string> kAutotuneKeys = {"threads", "batch_size", "prompt_tokens",
                                                "predict_tokens"};
const std::vector<std::string> kGatewayKeys = {"url", "token_env"};
const std::vector<std::string> kTlsKeys = {"cert", "key"};
const std::vector<std::string> kLogKeys = {"level", "format"};
const std::vector<std::string> kLogLevels = {"debug", "info", "warn", "error"};
const std::vector<std::string> kLogFormats = {"auto", "json", "text"};

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
    {"--log-format", "log.format"},
    {"--drain-timeout", "drain_timeout"},
    {"--model-url", "model_file.url"},
    {"--model-sha256", "model_file.sha256"},
    {"--model-path", "model_file.path"},
    {"--tunnel", "tunnel.kind"},
    {"--tunnel-key-env", "tunnel.key_env"},
    {"--tunnel-relays", "tunnel.relays"},
    {"--tunnel-domain-suffix", "tunnel.domain_suffix"},
    {"--tunnel-poll-interval", "tunnel.poll_interval"},
    {"--deployment-window", "deployment.window"},
};

bool is_hex64(std::string_view text) {
  return text.size() == 64 && text.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
}

// A DNS name: labels of letters, digits and '-', separated by dots.
bool is_domain(std::string_view text) {
  if (text.empty() || text.size() > 253 || text.front() == '.' || text.back() == '.') {
    return false;
  }
  return text.find_first_not_of(
             "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.") ==
             std::string::npos &&
         text.find("..") == std::string::npos;
}

void set_relays(AgentConfig& c, const std::string& where, const std::vector<std::string>& items) {
  std::vector<std::string> relays;
  for (const std::string& item : items) {
    relays.push_back(
        yaml::Scalar(where, item).host_port("relay-1.mainnet.acurast.com:4433").to_string());
  }
  if (relays.empty()) {
    throw yaml::Error(where + ": expected at least one relay (host:port)");
  }
  c.tunnel.relays = std::move(relays);
}

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw AgentConfigError(where + ": " + what);
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

bool is_autotune_list(const std::string& key) {
  return key == "engine.autotune.threads" || key == "engine.autotune.batch_size";
}

// An engine.autotune list: at least one value, each in [1, the key's limit], no repeats. Each item
// is read with the list's place (the file's key or the flag), as "threads: [0, 1]" is one value.
void set_autotune_list(AgentConfig& c, const std::string& key, const std::string& where,
                       const std::vector<std::string>& items) {
  const bool threads = key == "engine.autotune.threads";
  if (items.empty()) {
    throw yaml::Error(where + ": expected a list of at least one value to try, such as [1, 2, 4]");
  }
  std::vector<std::uint32_t> values;
  for (const auto& item : items) {
    const std::uint32_t v =
        yaml::Scalar(where, item).whole32(1, threads ? kMaxAutotuneThreads : kMaxAutotuneBatchSize);
    if (std::find(values.begin(), values.end(), v) != values.end()) {
      throw yaml::Error(where + ": lists " + item + " twice");
    }
    values.push_back(v);
  }
  (threads ? c.engine.autotune.threads : c.engine.autotune.batch_size) = std::move(values);
  c.engine.autotune.enabled = true;
}

// An optional URL (public_url, gateway.url): empty means none; stored normalised.
std::string optional_url(const yaml::Scalar& v, std::string_view example) {
  const std::string text = v.string();
  return text.empty() ? std::string() : v.url(example).to_string();
}

// Sets one key from one value, a flag's or the file's, with the rules of common/config/scalar.hpp
// (lists in the file are read in FileParser::set). A duration from a flag may also be a bare
// number of seconds; in the file it needs a unit, as everywhere in both binaries' YAML.
void apply_value(AgentConfig& c, const std::string& key, const yaml::Scalar& v, bool from_flag) {
  if (key == "listen") {
    c.listen = v.host_port("0.0.0.0:8081");
  } else if (key == "model") {
    c.model = v.string();
    if (c.model.empty()) {
      v.fail("must not be empty");
    }
  } else if (key == "slots") {
    c.slots = v.whole32(1, kMaxAgentSlots);
  } else if (key == "engine.kind") {
    const std::string& text = v.text("sim, llama-server or openai");
    if (text == "sim") {
      c.engine.kind = EngineKind::sim;
    } else if (text == "llama-server") {
      c.engine.kind = EngineKind::llama_server;
    } else if (text == "openai") {
      c.engine.kind = EngineKind::openai;
    } else {
      v.fail("expected sim, llama-server or openai, got " + yaml::quote(text));
    }
  } else if (key == "engine.profile") {
    const std::string& text = v.text("a simulator profile");
    if (sim::find_profile(text) == nullptr) {
      v.fail("unknown simulator profile " + yaml::quote(text) + "; known: " + sim::profile_list());
    }
    c.engine.profile = text;
  } else if (key == "engine.time_scale") {
    const std::string expected = "a number greater than 0 (10 runs the profile ten times faster)";
    c.engine.time_scale = v.number(expected);
    if (!(c.engine.time_scale > 0) || c.engine.time_scale > sim::kMaxTimeScale) {
      v.fail("expected " + expected + ", got " + yaml::quote(v.text(expected)));
    }
  } else if (key == "engine.jitter") {
    c.engine.jitter = v.number_in(0.0, 0.95);
  } else if (key == "engine.fail_rate") {
    c.engine.fail_rate = v.number_in(0.0, 1.0);
  } else if (key == "engine.seed") {
    c.engine.seed = v.whole();
  } else if (key == "engine.url") {
    c.engine.url = v.url(kDefaultEngineUrl);
  } else if (key == "gateway.url") {
    c.gateway.url = optional_url(v, "https://gw.example:9090");
  } else if (key == "public_url") {
    c.public_url = optional_url(v, "https://a1b2c3.acu.run");
  } else if (key == "engine.command") {
    c.engine.command = split_words(v.string());
  } else if (is_autotune_list(key)) {
    set_autotune_list(c, key, v.where(), split_list(v.string()));
  } else if (key == "engine.autotune.prompt_tokens") {
    c.engine.autotune.prompt_tokens = v.whole32(1, kMaxAutotunePromptTokens);
    c.engine.autotune.enabled = true;
  } else if (key == "engine.autotune.predict_tokens") {
    c.engine.autotune.predict_tokens = v.whole32(1, kMaxAutotunePredictTokens);
    c.engine.autotune.enabled = true;
  } else if (key == "gateway.token_env") {
    c.gateway.token_env = v.env_name();
  } else if (key == "api_key_env") {
    c.api_key_env = v.env_name();
  } else if (key == "tls.cert") {
    c.tls.cert = v.string();
  } else if (key == "tls.key") {
    c.tls.key = v.string();
  } else if (key == "log.level") {
    log::parse_level(v.one_of(kLogLevels), &c.log_level);
  } else if (key == "log.format") {
    c.log_format = v.one_of(kLogFormats);
  } else if (key == "model_file.url") {
    const std::string text = v.string();
    if (!text.empty()) {
      net::Url url = v.url("https://huggingface.co/org/repo/resolve/main/model.gguf");
      c.model_file.url = url.to_string();
    } else {
      c.model_file.url.clear();
    }
  } else if (key == "model_file.sha256") {
    const std::string& text = v.text("64 hexadecimal digits");
    if (!is_hex64(text)) {
      v.fail("expected the file's SHA-256 as 64 hexadecimal digits, got " + yaml::quote(text));
    }
    c.model_file.sha256 = text;
    std::transform(c.model_file.sha256.begin(), c.model_file.sha256.end(),
                   c.model_file.sha256.begin(), [](unsigned char ch) { return std::tolower(ch); });
  } else if (key == "model_file.path") {
    c.model_file.path = v.text("a file path");
    if (c.model_file.path.empty()) {
      v.fail("must not be empty");
    }
  } else if (key == "tunnel.kind") {
    const std::string text = v.one_of({"none", "acurast"});
    c.tunnel.kind = text == "acurast" ? TunnelKind::acurast : TunnelKind::none;
  } else if (key == "tunnel.key_env") {
    c.tunnel.key_env = v.env_name();
  } else if (key == "tunnel.relays") {
    set_relays(c, v.where(), split_list(v.string()));
  } else if (key == "tunnel.domain_suffix") {
    const std::string& text = v.text("a domain such as acu.run");
    if (!is_domain(text)) {
      v.fail("expected a domain such as acu.run or canary.acu.run, got " + yaml::quote(text));
    }
    c.tunnel.domain_suffix = text;
  } else if (key == "tunnel.poll_interval") {
    c.tunnel.poll_interval = v.duration(std::chrono::milliseconds(5000), false);
    if (c.tunnel.poll_interval < std::chrono::milliseconds(100)) {
      v.fail("must be at least 100ms");
    }
  } else if (key == "deployment.window") {
    c.deployment.window = v.duration(kDefaultDeploymentWindow, false);
  } else if (key == "drain_timeout") {
    // Flags only: "--drain-timeout 1.5" is seconds, as for timeout(1) and friends.
    if (from_flag) {
      const std::string& text = v.text("a duration");
      const bool bare = text.find_first_not_of("0123456789.") == std::string::npos &&
                        std::count(text.begin(), text.end(), '.') <= 1 &&
                        text.find_first_of("0123456789") != std::string::npos;
      if (bare) {
        const double seconds = v.number_in(0, 86400);
        c.drain_timeout = std::chrono::milliseconds(std::llround(seconds * 1000));
        return;
      }
    }
    c.drain_timeout = v.duration(kDefaultDrainTimeout, true);
  }
}

class FileParser {
 public:
  FileParser(AgentConfig& config, Origins* origins) : config_(config), origins_(origins) {}

  void parse(const yaml::Document& doc) {
    source_ = doc.root().source();
    if (doc.empty()) {
      return;  // an empty file sets nothing; flags may still make a valid configuration
    }
    walk(doc.root().map(kRootKeys));
  }

 private:
  static const std::vector<std::string>* keys_of(const std::string& path) {
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
    if (path == "model_file") {
      return &kModelFileKeys;
    }
    if (path == "tunnel") {
      return &kTunnelKeys;
    }
    if (path == "deployment") {
      return &kDeploymentKeys;
    }
    return nullptr;
  }

  // Applies each value of a checked map, descending into the maps that hold keys.
  void walk(const yaml::Map& map) {
    for (const auto& entry : map.entries()) {
      const yaml::Value& value = entry.value;
      if (const auto* sub = keys_of(value.path())) {
        if (value.path() == "engine.autotune") {
          // Present, even empty: autotuning is asked for (validation then wants its values).
          config_.engine.autotune.enabled = true;
          record(value.path(), entry.key_line);
        }
        walk(value.map(*sub));
        continue;
      }
      set(value);
    }
  }

  void record(const std::string& key, int line) {
    if (origins_ != nullptr) {
      (*origins_)[key] = source_ + ":" + std::to_string(line);
    }
  }

  void set(const yaml::Value& value) {
    const std::string& key = value.path();
    record(key, value.line());
    if (key == "engine.command" && !value.is_scalar()) {
      std::vector<std::string> argv;
      for (const yaml::Value& item : value.list("a list of program and arguments")) {
        argv.push_back(item.scalar().text("a string"));
      }
      config_.engine.command = std::move(argv);
      return;
    }
    if (key == "tunnel.relays" && !value.is_scalar()) {
      std::vector<std::string> items;
      for (const yaml::Value& item :
           value.list("a list of relays, such as [relay-1.mainnet.acurast.com:4433]")) {
        items.push_back(item.scalar().text("host:port"));
      }
      set_relays(config_, value.where(), items);
      return;
    }
    if (is_autotune_list(key) && !value.is_scalar()) {
      std::vector<std::string> items;
      for (const yaml::Value& item : value.list("a list of values to try, such as [2, 4, 6]")) {
        items.push_back(item.scalar().text("a whole number"));
      }
      set_autotune_list(config_, key, value.where(), items);
      return;
    }
    apply_value(config_, key, value.scalar(), false);
  }

  AgentConfig& config_;
  Origins* origins_;
  std::string source_;
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

const char* to_string(TunnelKind kind) {
  return kind == TunnelKind::acurast ? "acurast" : "none";
}

std::vector<std::string> expand_model_path(const std::vector<std::string>& command,
                                           const std::string& model_path) {
  std::vector<std::string> out;
  out.reserve(command.size());
  const std::string token = kModelPathToken;
  for (std::string arg : command) {
    for (auto at = arg.find(token); at != std::string::npos;
         at = arg.find(token, at + model_path.size())) {
      arg.replace(at, token.size(), model_path);
    }
    out.push_back(std::move(arg));
  }
  return out;
}

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
  try {
    FileParser(config, origins).parse(yaml::Document::parse(text, source));
  } catch (const yaml::Error& e) {
    throw AgentConfigError(e.what());
  }
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
  const bool tunneled = c.tunnel.kind == TunnelKind::acurast;
  if (tunneled && !c.public_url.empty()) {
    fail(origin_of(origins, "public_url", "public_url"),
         "not with tunnel.kind acurast: the tunnel gives the phone's public URL");
  }
  if (!tunneled) {
    for (const char* key :
         {"tunnel.key_env", "tunnel.relays", "tunnel.domain_suffix", "tunnel.poll_interval"}) {
      if (origins.count(key) != 0) {
        fail(origin_of(origins, key, key), "only with tunnel.kind acurast");
      }
    }
  }
  const ModelFileConfig& mf = c.model_file;
  const bool any_model_file = origins.count("model_file.url") + origins.count("model_file.sha256") +
                                  origins.count("model_file.path") !=
                              0;
  if (any_model_file || mf.enabled()) {
    for (const auto& [key, value] :
         {std::pair<const char*, const std::string*>{"model_file.url", &mf.url},
          {"model_file.sha256", &mf.sha256},
          {"model_file.path", &mf.path}}) {
      if (value->empty()) {
        std::string first = origins.count("model_file.url")      ? "model_file.url"
                            : origins.count("model_file.sha256") ? "model_file.sha256"
                                                                 : "model_file.path";
        fail(origin_of(origins, first, first),
             std::string("needs ") + key + " too (model_file takes url, sha256 and path)");
      }
    }
  }
  for (const std::string& arg : c.engine.command) {
    if (arg.find(kModelPathToken) != std::string::npos && !mf.enabled()) {
      fail(origin_of(origins, "engine.command", "engine.command"),
           "uses {model_path} but model_file is not set");
    }
  }
  if (c.gateway.enabled()) {
    if (c.public_url.empty() && !tunneled) {
      fail(origin_of(origins, "gateway.url", "gateway.url"),
           "needs public_url (the address the gateway sends this phone's traffic to) or "
           "tunnel.kind acurast");
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
         "  --log-format F         log.format: json, text, or auto (default: text on a terminal)\n"
         "  --drain-timeout T      drain_timeout: time in-flight requests get after SIGTERM\n"
         "                         (30s; a bare number is seconds)\n"
         "  --model-url URL        model_file.url: a GGUF to download before the engine starts\n"
         "  --model-sha256 HEX     model_file.sha256: its SHA-256 (checked before use)\n"
         "  --model-path FILE      model_file.path: where it goes ({model_path} in the command)\n"
         "  --tunnel KIND          tunnel.kind: none or acurast (the bridge's tunnel)\n"
         "  --tunnel-key-env VAR   tunnel.key_env: env var with the P-256 key (base64 PKCS#8)\n"
         "  --tunnel-relays LIST   tunnel.relays: host:port,... of the relays\n"
         "  --tunnel-domain-suffix D  tunnel.domain_suffix: acu.run or canary.acu.run\n"
         "  --tunnel-poll-interval T  tunnel.poll_interval: how often tunnel_status is asked (5s)\n"
         "  --deployment-window T  deployment.window: the deployment's length (24h)\n"
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
      apply_value(inv.config, flag->key, yaml::Scalar(flag->flag, value), true);
      origins[flag->key] = flag->flag;
    }
  } catch (const yaml::Error& e) {
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
