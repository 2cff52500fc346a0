#include "orchestrator/config/config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <utility>

#include "common/util/duration.hpp"
#include "common/util/text.hpp"
#include "replica-agent/engines/sim_model.hpp"

namespace fg::config {
namespace {

// Key names each section accepts. Kept next to the parser so a new field cannot be parsed
// without also being accepted (and suggested in "did you mean").
const std::vector<std::string> kRootKeys = {
    "server", "admin", "health", "registration", "models", "routing", "upstream", "metrics", "log"};
const std::vector<std::string> kMetricsKeys = {"per_replica", "request_stream_usage"};
const std::vector<std::string> kServerKeys = {"listen",          "tls",
                                              "api_keys_env",    "max_body_bytes",
                                              "max_connections", "max_connections_per_ip",
                                              "header_timeout",  "body_timeout",
                                              "idle_timeout",    "write_timeout",
                                              "drain_timeout",   "read_timeout"};
const std::vector<std::string> kTlsKeys = {"cert", "key"};
const std::vector<std::string> kAdminKeys = {"listen", "tls", "token_env", "prometheus_sd_file"};
const std::vector<std::string> kHealthKeys = {"interval",        "timeout",       "path",
                                              "unhealthy_after", "healthy_after", "eject_after"};
const std::vector<std::string> kRegistrationKeys = {"token_env", "allowed_urls", "expire_after",
                                                    "heartbeat_interval"};
const std::vector<std::string> kModelKeys = {"name",      "replicas", "slots",
                                             "endpoints", "health",   "local"};
const std::vector<std::string> kLocalKeys = {"count", "engine", "profile", "time_scale", "slots"};
const std::vector<std::string> kEndpointKeys = {"url", "slots"};
const std::vector<std::string> kRoutingKeys = {"queue_max", "queue_timeout", "request_timeout",
                                               "retries", "keepalive_interval"};
const std::vector<std::string> kUpstreamKeys = {"api_key_env",     "ca_file",
                                                "connect_timeout", "first_byte_timeout",
                                                "idle_timeout",    "max_idle_per_replica",
                                                "max_event_bytes", "max_response_bytes",
                                                "dns_cache_ttl"};
const std::vector<std::string> kLogKeys = {"level"};
const std::vector<std::string> kLogLevels = {"debug", "info", "warn", "error"};

std::string quoted(const std::string& s) {
  return "\"" + s + "\"";
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Scalar:
      return quoted(node.Scalar());
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string index_path(const std::string& path, std::size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

// A checked YAML map: its keys are known and unique, and values are looked up by name.
struct Section {
  std::string path;  // dotted path of the map itself ("" for the root)
  int line = 1;      // 1-based line of the map, used for keys that are missing
  std::map<std::string, YAML::Node> values;
  std::map<std::string, int> key_lines;  // 1-based line of each key

  const YAML::Node* find(const std::string& key) const {
    auto it = values.find(key);
    return it == values.end() ? nullptr : &it->second;
  }
};

class Parser {
 public:
  explicit Parser(std::string source) : source_(std::move(source)) {}

  Config parse(const std::string& text) {
    std::vector<YAML::Node> docs;
    try {
      docs = YAML::LoadAll(text);
    } catch (const YAML::Exception& e) {
      fail(e.mark.is_null() ? 1 : e.mark.line + 1, "(syntax)", e.msg);
    }
    if (docs.size() > 1) {
      fail(line_of(docs[1], 1), "(root)",
           "only one YAML document is allowed (found a second '---')");
    }
    Config config;
    if (docs.empty() || docs[0].IsNull()) {
      fail(1, "models", "missing; at least one model is required (the file is empty)");
    }
    const YAML::Node& root = docs[0];
    if (!root.IsMap()) {
      fail(line_of(root, 1), "(root)",
           "expected a map of sections (server, admin, models, ...), got " + describe(root));
    }
    const Section top = section(root, "", 1, kRootKeys);
    if (const auto* n = top.find("server")) {
      parse_server(*n, value_line(top, "server"), config.server);
    }
    if (const auto* n = top.find("admin")) {
      const Section s = section(*n, "admin", value_line(top, "admin"), kAdminKeys);
      admin_listen_line_ = read_host_port(s, "listen", config.admin.listen);
      if (const auto* t = s.find("tls")) {
        read_tls(*t, "admin.tls", value_line(s, "tls"), config.admin.tls);
      }
      read_env_name(s, "token_env", config.admin.token_env);
      read_string(s, "prometheus_sd_file", config.admin.prometheus_sd_file);
    }
    // Before the models: each model's health settings start from the global ones.
    if (const auto* n = top.find("health")) {
      const Section s = section(*n, "health", value_line(top, "health"), kHealthKeys);
      read_health(s, config.health);
      check_health_timeout(s, nullptr, config.health);
      global_health_ = s;
    }
    if (const auto* n = top.find("registration")) {
      parse_registration(*n, value_line(top, "registration"), config.registration);
    }
    const YAML::Node* models = top.find("models");
    if (models == nullptr) {
      fail(top.line, "models", "missing; at least one model is required");
    }
    parse_models(*models, value_line(top, "models"), config.health, config.models);
    if (const auto* n = top.find("routing")) {
      parse_routing(*n, value_line(top, "routing"), config.routing);
    }
    if (const auto* n = top.find("upstream")) {
      parse_upstream(*n, value_line(top, "upstream"), config.upstream);
    }
    if (const auto* n = top.find("metrics")) {
      const Section s = section(*n, "metrics", value_line(top, "metrics"), kMetricsKeys);
      read_bool(s, "per_replica", config.metrics.per_replica);
      read_bool(s, "request_stream_usage", config.metrics.request_stream_usage);
    }
    if (const auto* n = top.find("log")) {
      const Section s = section(*n, "log", value_line(top, "log"), kLogKeys);
      read_string(s, "level", config.log.level);
      if (std::find(kLogLevels.begin(), kLogLevels.end(), config.log.level) == kLogLevels.end()) {
        fail(value_line(s, "level"), "log.level",
             "expected one of debug, info, warn, error, got " + quoted(config.log.level));
      }
    }
    check_listeners(config);
    return config;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& path, const std::string& what) const {
    throw ConfigError(source_ + ":" + std::to_string(line) + ": " + path + ": " + what);
  }

  static int line_of(const YAML::Node& node, int fallback) {
    const YAML::Mark mark = node.Mark();
    return mark.is_null() ? fallback : mark.line + 1;
  }

  // The line to blame for key's value. A key with no value gets the key's own line: yaml-cpp
  // marks an empty value where the next token starts, often on a later line.
  static int value_line(const Section& s, const std::string& key) {
    const auto k = s.key_lines.find(key);
    const int key_line = k == s.key_lines.end() ? s.line : k->second;
    const YAML::Node* n = s.find(key);
    if (n == nullptr || n->IsNull()) {
      return key_line;
    }
    return line_of(*n, key_line);
  }

  // Checks that node is a map with only known, unique keys. A section written with no value
  // ("server:") counts as empty, so commenting out all its keys keeps the file valid.
  // parent_line is blamed when node is empty and has no useful position of its own.
  Section section(const YAML::Node& node, const std::string& path, int parent_line,
                  const std::vector<std::string>& known) const {
    Section s;
    s.path = path;
    s.line = node.IsNull() ? parent_line : line_of(node, parent_line);
    if (node.IsNull()) {
      return s;
    }
    if (!node.IsMap()) {
      fail(s.line, path, "expected a map, got " + describe(node));
    }
    for (auto it = node.begin(); it != node.end(); ++it) {
      const YAML::Node key_node = it->first;
      const int key_line = line_of(key_node, s.line);
      if (!key_node.IsScalar()) {
        fail(key_line, path.empty() ? "(root)" : path,
             "keys must be plain names, got " + describe(key_node));
      }
      const std::string& key = key_node.Scalar();
      const std::string key_path = join(path, key);
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        std::string what = "unknown key";
        if (const std::string hint = closest_word(key, known); !hint.empty()) {
          what += "; did you mean '" + hint + "'?";
        }
        fail(key_line, key_path, what);
      }
      // yaml-cpp keeps the first of two equal keys silently; a repeated key is a mistake.
      if (!s.values.emplace(key, it->second).second) {
        fail(key_line, key_path, "duplicate key");
      }
      s.key_lines[key] = key_line;
    }
    return s;
  }

  // Reads a scalar's text. A key with no value reads as "" (strings only).
  bool read_string(const Section& s, const std::string& key, std::string& out) const {
    const YAML::Node* n = s.find(key);
    if (n == nullptr) {
      return false;
    }
    if (n->IsNull()) {
      out.clear();
      return true;
    }
    if (!n->IsScalar()) {
      fail(value_line(s, key), join(s.path, key), "expected a string, got " + describe(*n));
    }
    out = n->Scalar();
    return true;
  }

  // Reads a non-negative whole number no larger than max.
  bool read_uint(const Section& s, const std::string& key, std::uint64_t max,
                 std::uint64_t& out) const {
    const YAML::Node* n = s.find(key);
    if (n == nullptr) {
      return false;
    }
    const int line = value_line(s, key);
    const std::string path = join(s.path, key);
    if (!n->IsScalar()) {
      fail(line, path, "expected a whole number, got " + describe(*n));
    }
    const std::string& text = n->Scalar();
    std::string digits = text;
    const bool negative = !digits.empty() && digits[0] == '-';
    if (negative) {
      digits.erase(0, 1);
    }
    const bool all_digits =
        !digits.empty() &&
        std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!all_digits) {
      fail(line, path, "expected a whole number, got " + quoted(text));
    }
    if (negative) {
      fail(line, path, "must not be negative, got " + text);
    }
    std::uint64_t v = 0;
    for (char c : digits) {
      const std::uint64_t d = static_cast<std::uint64_t>(c - '0');
      if (v > (max - d) / 10) {
        fail(line, path, "must be at most " + std::to_string(max) + ", got " + text);
      }
      v = v * 10 + d;
    }
    out = v;
    return true;
  }

  bool read_u32(const Section& s, const std::string& key, std::uint32_t& out) const {
    std::uint64_t v = 0;
    if (!read_uint(s, key, std::numeric_limits<std::uint32_t>::max(), v)) {
      return false;
    }
    out = static_cast<std::uint32_t>(v);
    return true;
  }

  // Reads a u32 that must lie in [min, max].
  void read_u32_in(const Section& s, const std::string& key, std::uint32_t min, std::uint32_t max,
                   std::uint32_t& out) const {
    std::uint32_t v = 0;
    if (!read_u32(s, key, v)) {
      return;
    }
    if (v < min || v > max) {
      fail(value_line(s, key), join(s.path, key),
           "must be between " + std::to_string(min) + " and " + std::to_string(max) + ", got " +
               std::to_string(v));
    }
    out = v;
  }

  void read_positive_u32(const Section& s, const std::string& key, std::uint32_t& out) const {
    std::uint32_t v = 0;
    if (!read_u32(s, key, v)) {
      return;
    }
    if (v == 0) {
      fail(value_line(s, key), join(s.path, key), "must be greater than 0");
    }
    out = v;
  }

  void read_bool(const Section& s, const std::string& key, bool& out) const {
    const YAML::Node* n = s.find(key);
    if (n == nullptr) {
      return;
    }
    bool v = false;
    if (!n->IsScalar() || !YAML::convert<bool>::decode(*n, v)) {
      fail(value_line(s, key), join(s.path, key), "expected true or false, got " + describe(*n));
    }
    out = v;
  }

  // Reads "250ms", "30s", "5m", "1h". A bare number is refused: the unit must be explicit.
  void read_duration(const Section& s, const std::string& key, bool allow_zero,
                     milliseconds& out) const {
    const YAML::Node* n = s.find(key);
    if (n == nullptr) {
      return;
    }
    const int line = value_line(s, key);
    const std::string path = join(s.path, key);
    // The default, spelled in seconds as the docs do ("600s" rather than "10m").
    const std::string example =
        out.count() % 1000 == 0 ? std::to_string(out.count() / 1000) + "s" : format_duration(out);
    if (!n->IsScalar()) {
      fail(line, path, "expected a duration such as " + example + ", got " + describe(*n));
    }
    const std::string& text = n->Scalar();
    const auto parsed = parse_duration(text);
    if (!parsed) {
      std::string what = "expected a duration such as " + example + ", got " + quoted(text);
      const bool bare_number = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
        return c >= '0' && c <= '9';
      });
      if (bare_number) {
        what += " (add a unit: ms, s, m or h)";
      }
      fail(line, path, what);
    }
    if (!allow_zero && parsed->count() == 0) {
      fail(line, path, "must be greater than 0");
    }
    out = *parsed;
  }

  // Reads the name of an environment variable; "" means unset.
  void read_env_name(const Section& s, const std::string& key, std::string& out) const {
    if (!read_string(s, key, out) || out.empty()) {
      return;
    }
    if (!is_env_name(out)) {
      fail(value_line(s, key), join(s.path, key),
           "expected an environment variable name (letters, digits, '_'; not starting with a "
           "digit), got " +
               quoted(out));
    }
  }

  // Returns the line of the value, or 0 when the key is absent.
  int read_host_port(const Section& s, const std::string& key, net::HostPort& out) const {
    std::string text;
    if (!read_string(s, key, text)) {
      return 0;
    }
    std::string error;
    const auto parsed = net::parse_host_port(text, &error);
    if (!parsed) {
      fail(value_line(s, key), join(s.path, key),
           "expected host:port such as 127.0.0.1:8080, got " + quoted(text) +
               (error.empty() ? "" : " (" + error + ")"));
    }
    out = *parsed;
    return value_line(s, key);
  }

  void parse_server(const YAML::Node& node, int line, ServerConfig& out) {
    const Section s = section(node, "server", line, kServerKeys);
    server_listen_line_ = read_host_port(s, "listen", out.listen);
    if (const auto* n = s.find("tls")) {
      read_tls(*n, "server.tls", value_line(s, "tls"), out.tls);
    }
    read_env_name(s, "api_keys_env", out.api_keys_env);
    read_positive_u64(s, "max_body_bytes", out.max_body_bytes);
    read_positive_u32(s, "max_connections", out.max_connections);
    read_u32(s, "max_connections_per_ip", out.max_connections_per_ip);
    if (s.find("read_timeout") != nullptr) {
      fail(value_line(s, "read_timeout"), "server.read_timeout",
           "replaced by server.header_timeout (first byte to end of headers) and "
           "server.body_timeout (the body); set those instead");
    }
    read_duration(s, "header_timeout", false, out.header_timeout);
    read_duration(s, "body_timeout", false, out.body_timeout);
    read_duration(s, "idle_timeout", false, out.idle_timeout);
    read_duration(s, "write_timeout", false, out.write_timeout);
    read_duration(s, "drain_timeout", true, out.drain_timeout);
  }

  void read_tls(const YAML::Node& node, const std::string& path, int line, TlsFiles& out) const {
    const Section tls = section(node, path, line, kTlsKeys);
    read_string(tls, "cert", out.cert);
    read_string(tls, "key", out.key);
    if (!out.cert.empty() && out.key.empty()) {
      fail(value_line(tls, "cert"), path + ".key",
           "missing; required when " + path + ".cert is set");
    }
    if (out.cert.empty() && !out.key.empty()) {
      fail(value_line(tls, "key"), path + ".cert",
           "missing; required when " + path + ".key is set");
    }
  }

  void read_positive_u64(const Section& s, const std::string& key, std::uint64_t& out) const {
    std::uint64_t v = out;
    if (read_uint(s, key, std::numeric_limits<std::uint64_t>::max(), v)) {
      if (v == 0) {
        fail(value_line(s, key), join(s.path, key), "must be greater than 0");
      }
      out = v;
    }
  }

  void parse_models(const YAML::Node& node, int line, const HealthConfig& health,
                    std::vector<ModelConfig>& out) {
    if (!node.IsSequence()) {
      fail(line, "models", "expected a list of models, got " + describe(node));
    }
    if (node.size() == 0) {
      fail(line, "models", "at least one model is required");
    }
    std::map<std::string, std::string> names;  // name -> where it was first defined
    for (std::size_t i = 0; i < node.size(); ++i) {
      const YAML::Node m = node[i];
      ModelConfig model;
      model.health = health;
      const int name_line = parse_model(m, index_path("models", i), line, model);
      const std::string where =
          index_path("models", i) + " (line " + std::to_string(name_line) + ")";
      if (auto [it, fresh] = names.emplace(model.name, where); !fresh) {
        fail(name_line, index_path("models", i) + ".name",
             "duplicate model name " + quoted(model.name) + "; already defined at " + it->second);
      }
      out.push_back(std::move(model));
    }
  }

  // Returns the line of the model's name, for the duplicate-name check.
  int parse_model(const YAML::Node& node, const std::string& path, int parent_line,
                  ModelConfig& out) {
    const Section s = section(node, path, parent_line, kModelKeys);
    if (node.IsNull()) {
      fail(s.line, path, "expected a map with at least 'name', got nothing");
    }
    if (!read_string(s, "name", out.name)) {
      fail(s.line, join(path, "name"), "missing; every model needs the name clients send");
    }
    const int name_line = value_line(s, "name");
    if (out.name.empty()) {
      fail(name_line, join(path, "name"), "must not be empty");
    }
    read_u32(s, "replicas", out.replicas);
    read_u32_in(s, "slots", 1, kMaxSlots, out.slots);
    if (const auto* h = s.find("health")) {
      const Section hs = section(*h, join(path, "health"), value_line(s, "health"), kHealthKeys);
      read_health(hs, out.health);
      check_health_timeout(global_health_, &hs, out.health);
    }
    if (const auto* l = s.find("local")) {
      const Section ls = section(*l, join(path, "local"), value_line(s, "local"), kLocalKeys);
      out.local = parse_local(ls);
    }
    const YAML::Node* eps = s.find("endpoints");
    if (eps == nullptr || eps->IsNull()) {
      return name_line;
    }
    const std::string eps_path = join(path, "endpoints");
    const int eps_line = value_line(s, "endpoints");
    if (!eps->IsSequence()) {
      fail(eps_line, eps_path, "expected a list of endpoints, got " + describe(*eps));
    }
    for (std::size_t i = 0; i < eps->size(); ++i) {
      out.endpoints.push_back(
          parse_endpoint((*eps)[i], index_path(eps_path, i), eps_line, out.slots));
    }
    return name_line;
  }

  LocalFleetConfig parse_local(const Section& s) const {
    LocalFleetConfig local;
    read_u32_in(s, "count", 1, 256, local.count);
    read_string(s, "engine", local.engine);
    if (local.engine != "sim") {
      fail(value_line(s, "engine"), join(s.path, "engine"),
           "a local fleet runs the simulator only: use 'sim', got " + quoted(local.engine));
    }
    if (read_string(s, "profile", local.profile)) {
      if (!sim::find_profile(local.profile)) {
        std::string names;
        for (const auto& name : sim::profile_names()) {
          names += (names.empty() ? "" : ", ") + name;
        }
        fail(value_line(s, "profile"), join(s.path, "profile"),
             "unknown simulator profile " + quoted(local.profile) + "; known: " + names);
      }
    }
    if (const auto* n = s.find("time_scale")) {
      const int line = value_line(s, "time_scale");
      double v = 0;
      if (!n->IsScalar() || !YAML::convert<double>::decode(*n, v) || !(v > 0) || v > 1e6) {
        fail(line, join(s.path, "time_scale"),
             "expected a number greater than 0 (10 runs the profile ten times faster), got " +
                 describe(*n));
      }
      local.time_scale = v;
    }
    read_u32_in(s, "slots", 1, kMaxSlots, local.slots);
    return local;
  }

  // An endpoint is a URL string, or a map {url, slots}.
  Endpoint parse_endpoint(const YAML::Node& node, const std::string& path, int parent_line,
                          std::uint32_t model_slots) {
    Endpoint ep;
    ep.slots = model_slots;
    std::string text;
    int url_line = line_of(node, parent_line);
    std::string url_path = path;
    if (node.IsScalar()) {
      text = node.Scalar();
    } else if (node.IsMap()) {
      const Section s = section(node, path, parent_line, kEndpointKeys);
      url_path = join(path, "url");
      if (!read_string(s, "url", text)) {
        fail(s.line, url_path, "missing; an endpoint map needs a url");
      }
      url_line = value_line(s, "url");
      read_u32_in(s, "slots", 1, kMaxSlots, ep.slots);
    } else {
      fail(url_line, path, "expected a URL or a map {url, slots}, got " + describe(node));
    }
    std::string error;
    const auto url = net::parse_url(text, &error);
    if (!url) {
      fail(url_line, url_path, "invalid URL " + quoted(text) + (error.empty() ? "" : ": " + error));
    }
    ep.url = *url;
    const std::string normalised = ep.url.to_string();
    const std::string where = path + " (line " + std::to_string(url_line) + ")";
    if (auto [it, fresh] = endpoint_urls_.emplace(normalised, where); !fresh) {
      fail(url_line, url_path,
           "duplicate endpoint " + normalised + "; already listed at " + it->second);
    }
    return ep;
  }

  // Reads the health keys present in s over out (the defaults, or the global settings for a
  // model's override).
  void read_health(const Section& s, HealthConfig& out) const {
    read_duration(s, "interval", false, out.interval);
    read_duration(s, "timeout", false, out.timeout);
    if (read_string(s, "path", out.path)) {
      const bool clean = std::none_of(out.path.begin(), out.path.end(), [](char c) {
        return static_cast<unsigned char>(c) <= ' ' || c == '\x7f' || c == '#';
      });
      if (out.path.empty() || out.path[0] != '/' || !clean) {
        fail(value_line(s, "path"), join(s.path, "path"),
             "expected a URL path starting with \"/\" such as /health (no spaces or '#'), got " +
                 quoted(out.path));
      }
    }
    read_positive_u32(s, "unhealthy_after", out.unhealthy_after);
    read_positive_u32(s, "healthy_after", out.healthy_after);
    read_positive_u32(s, "eject_after", out.eject_after);
  }

  // A probe that may take as long as the interval would overlap the next one. h holds resolved
  // values; global is the top-level health section (empty when absent) and model the model's
  // override (nullptr for the global check). Blames the key that made the pair invalid: the
  // model's own timeout or interval when it wrote one, else the global one.
  void check_health_timeout(const Section& global, const Section* model,
                            const HealthConfig& h) const {
    if (h.timeout < h.interval) {
      return;
    }
    // Where a resolved value came from, for the message.
    auto origin = [&](const std::string& key) -> std::string {
      if (model != nullptr && model->find(key) != nullptr) {
        return join(model->path, key);
      }
      if (global.find(key) != nullptr) {
        return join("health", key);
      }
      return "default";
    };
    const Section& blamed = model != nullptr ? *model : global;
    const std::string key = blamed.find("timeout") != nullptr ? "timeout" : "interval";
    fail(value_line(blamed, key), join(blamed.path, key),
         "the probe timeout must be less than the interval, got timeout " +
             format_duration(h.timeout) + " (" + origin("timeout") + ") and interval " +
             format_duration(h.interval) + " (" + origin("interval") + ")");
  }

  void parse_registration(const YAML::Node& node, int line, RegistrationConfig& out) const {
    const Section s = section(node, "registration", line, kRegistrationKeys);
    read_env_name(s, "token_env", out.token_env);
    const YAML::Node* urls = s.find("allowed_urls");
    const std::string urls_path = "registration.allowed_urls";
    if (urls != nullptr && !urls->IsNull()) {
      const int urls_line = value_line(s, "allowed_urls");
      if (!urls->IsSequence()) {
        fail(urls_line, urls_path,
             "expected a list of URL patterns such as [\"https://*.acu.run\"], got " +
                 describe(*urls));
      }
      for (std::size_t i = 0; i < urls->size(); ++i) {
        const YAML::Node item = (*urls)[i];
        const int item_line = line_of(item, urls_line);
        const std::string item_path = index_path(urls_path, i);
        if (!item.IsScalar()) {
          fail(item_line, item_path, "expected a URL pattern, got " + describe(item));
        }
        check_url_pattern(item.Scalar(), item_line, item_path);
        out.allowed_urls.push_back(item.Scalar());
      }
    }
    read_duration(s, "expire_after", false, out.expire_after);
    read_duration(s, "heartbeat_interval", false, out.heartbeat_interval);
    if (!out.token_env.empty() && out.allowed_urls.empty()) {
      const std::string key = urls != nullptr ? "allowed_urls" : "token_env";
      fail(value_line(s, key), urls_path,
           "empty while registration.token_env is set, so every registration would be refused; "
           "list the URL patterns agents may register (e.g. \"https://*.acu.run\"), or leave "
           "token_env empty to disable registration");
    }
  }

  // Patterns are matched against normalised URLs (lower-case scheme and host, no default port,
  // no trailing slash), so a pattern that could never match one is refused here.
  void check_url_pattern(const std::string& pattern, int line, const std::string& path) const {
    const auto bad = [&](const std::string& why) {
      fail(line, path, "invalid URL pattern " + quoted(pattern) + ": " + why);
    };
    std::string scheme;
    for (const char* s : {"http", "https"}) {
      if (pattern.rfind(std::string(s) + "://", 0) == 0) {
        scheme = s;
      }
    }
    if (scheme.empty()) {
      bad("must start with http:// or https://");
    }
    const std::string rest = pattern.substr(scheme.size() + 3);
    if (rest.empty() || rest[0] == '/') {
      bad("missing host");
    }
    for (char c : rest) {
      if (static_cast<unsigned char>(c) <= ' ' || c == '\x7f' || c == '#') {
        bad("spaces, control characters and '#' are not allowed");
      }
      if (c >= 'A' && c <= 'Z') {
        bad("must be lower case (registered URLs are compared in normalised, lower-case form)");
      }
    }
    if (rest.back() == '/') {
      bad("must not end with '/' (normalised URLs never do)");
    }
    const std::string authority = rest.substr(0, rest.find('/'));
    const std::string default_port = scheme == "https" ? ":443" : ":80";
    if (authority.size() >= default_port.size() &&
        authority.compare(authority.size() - default_port.size(), default_port.size(),
                          default_port) == 0) {
      bad("normalised URLs omit the default port " + default_port.substr(1) +
          "; leave it out of the pattern");
    }
  }

  void parse_routing(const YAML::Node& node, int line, RoutingConfig& out) const {
    const Section s = section(node, "routing", line, kRoutingKeys);
    read_positive_u32(s, "queue_max", out.queue_max);
    read_duration(s, "queue_timeout", false, out.queue_timeout);
    read_duration(s, "request_timeout", false, out.request_timeout);
    read_u32(s, "retries", out.retries);
    read_duration(s, "keepalive_interval", true, out.keepalive_interval);
  }

  void parse_upstream(const YAML::Node& node, int line, UpstreamConfig& out) const {
    const Section s = section(node, "upstream", line, kUpstreamKeys);
    read_env_name(s, "api_key_env", out.api_key_env);
    read_string(s, "ca_file", out.ca_file);
    read_duration(s, "connect_timeout", false, out.connect_timeout);
    read_duration(s, "first_byte_timeout", false, out.first_byte_timeout);
    read_duration(s, "idle_timeout", false, out.idle_timeout);
    read_u32(s, "max_idle_per_replica", out.max_idle_per_replica);
    read_positive_u64(s, "max_event_bytes", out.max_event_bytes);
    read_positive_u64(s, "max_response_bytes", out.max_response_bytes);
    read_duration(s, "dns_cache_ttl", true, out.dns_cache_ttl);
  }

  // Two listeners on one address would make the second bind fail at startup; say so now.
  void check_listeners(const Config& config) const {
    const net::HostPort& pub = config.server.listen;
    const net::HostPort& adm = config.admin.listen;
    if (pub.port == 0 || pub.port != adm.port || !hosts_overlap(pub.host, adm.host)) {
      return;
    }
    // Blame the address the operator wrote; with both defaulted this cannot happen.
    if (admin_listen_line_ != 0) {
      fail(admin_listen_line_, "admin.listen",
           "must differ from server.listen (both are " + adm.to_string() + ")");
    }
    fail(server_listen_line_ != 0 ? server_listen_line_ : 1, "server.listen",
         "must differ from admin.listen (both are " + pub.to_string() + ")");
  }

  // Whether binding both hosts on one port would collide: the same host, or a wildcard that
  // covers the other ("::" covers everything on a dual-stack host, "0.0.0.0" all of IPv4).
  static bool hosts_overlap(const std::string& a, const std::string& b) {
    if (a == b || a == "::" || b == "::") {
      return true;
    }
    const bool a_v6 = a.find(':') != std::string::npos;
    const bool b_v6 = b.find(':') != std::string::npos;
    return (a == "0.0.0.0" && !b_v6) || (b == "0.0.0.0" && !a_v6);
  }

  std::string source_;
  std::map<std::string, std::string> endpoint_urls_;  // normalised URL -> where first listed
  int server_listen_line_ = 0;                        // 0 = not written in the file
  int admin_listen_line_ = 0;
  Section global_health_{"health", 1, {}, {}};  // the top-level health section; empty if absent
};

}  // namespace

// The characters that separate a URL's parts: a wildcard never crosses one, so a pattern's
// host part cannot reach into a port, userinfo, IPv6 literal or path.
static bool is_url_delimiter(char c) {
  return c == ':' || c == '/' || c == '@' || c == '[' || c == ']';
}

bool glob_match(std::string_view pattern, std::string_view text) {
  // reach[j]: the pattern read so far matches text[0, j).
  std::vector<char> reach(text.size() + 1, 0);
  std::vector<char> next(text.size() + 1, 0);
  reach[0] = 1;
  for (const char p : pattern) {
    next[0] = p == '*' ? reach[0] : 0;
    for (std::size_t j = 1; j <= text.size(); ++j) {
      const char t = text[j - 1];
      if (p == '*') {
        next[j] = reach[j] || (next[j - 1] && !is_url_delimiter(t));
      } else if (p == '?') {
        next[j] = reach[j - 1] && !is_url_delimiter(t);
      } else {
        next[j] = reach[j - 1] && t == p;
      }
    }
    std::swap(reach, next);
  }
  return reach[text.size()] != 0;
}

Config load_config_string(const std::string& text, const std::string& source) {
  return Parser(source).parse(text);
}

Config load_config_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ConfigError(path + ": cannot read the configuration file: " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    throw ConfigError(path + ": cannot read the configuration file");
  }
  return load_config_string(text.str(), path);
}

}  // namespace fg::config
