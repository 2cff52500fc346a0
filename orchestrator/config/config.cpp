#include "orchestrator/config/config.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include "common/config/yaml_reader.hpp"
#include "common/sim/profiles.hpp"
#include "common/util/duration.hpp"

namespace fg::config {
namespace {

using yaml::Map;
using yaml::Value;

// Key names each section accepts. Kept next to the parser so a new field cannot be parsed
// without also being accepted (and suggested in "did you mean").
const std::vector<std::string> kRootKeys = {"server",  "admin",   "health",   "registration",
                                            "models",  "routing", "upstream", "metrics",
                                            "storage", "batch",   "log"};
const std::vector<std::string> kStorageKeys = {"backend", "path", "url_env"};
const std::vector<std::string> kStorageBackends = {"sqlite", "postgres"};
const std::vector<std::string> kBatchKeys = {
    "enabled",         "max_file_bytes", "max_file_lines", "max_lines",     "max_in_flight",
    "slots_per_batch", "max_attempts",   "retry_backoff",  "lease_timeout", "poll_interval"};
const std::vector<std::string> kMetricsKeys = {"per_replica", "request_stream_usage"};
const std::vector<std::string> kServerKeys = {"listen",          "tls",
                                              "api_keys_env",    "api_keys",
                                              "max_body_bytes",  "max_buffered_bytes",
                                              "max_connections", "max_connections_per_ip",
                                              "header_timeout",  "body_timeout",
                                              "idle_timeout",    "write_timeout",
                                              "drain_timeout",   "read_timeout"};
const std::vector<std::string> kTlsKeys = {"cert", "key"};
const std::vector<std::string> kAdminKeys = {"listen", "tls", "token_env", "prometheus_sd_file"};
const std::vector<std::string> kHealthKeys = {"interval",        "timeout",       "path",
                                              "unhealthy_after", "healthy_after", "eject_after"};
const std::vector<std::string> kRegistrationKeys = {"token_env", "allowed_urls", "expire_after",
                                                    "heartbeat_interval", "url_challenge"};
const std::vector<std::string> kModelKeys = {"name",   "replicas", "slots", "endpoints",
                                             "health", "local",    "deploy"};
const std::vector<std::string> kDeployKeys = {"acurast"};
const std::vector<std::string> kAcurastKeys = {"network",
                                               "gateway_url",
                                               "model_file",
                                               "execution_window",
                                               "start_delay",
                                               "max_start_delay",
                                               "renew_overlap",
                                               "max_cost_per_execution",
                                               "min_ram_bytes",
                                               "only_attested_devices",
                                               "restart_policy",
                                               "required_modules",
                                               "min_processor_reputation",
                                               "image",
                                               "context_size",
                                               "stable_url"};
const std::vector<std::string> kModelFileKeys = {"url", "sha256"};
const std::vector<std::string> kImageKeys = {"url", "sha256"};
const std::vector<std::string> kAcurastNetworks = {"mainnet", "canary"};
const std::vector<std::string> kRestartPolicies = {"no", "onFailure", "always"};
const std::vector<std::string> kExtraModules = {"DataEncryption", "LLM", "Shell"};
const std::vector<std::string> kLocalKeys = {"count", "engine", "profile", "time_scale", "slots"};
const std::vector<std::string> kEndpointKeys = {"url", "slots"};
const std::vector<std::string> kRoutingKeys = {"queue_max",
                                               "queue_timeout",
                                               "request_timeout",
                                               "retries",
                                               "keepalive_interval",
                                               "policy",
                                               "default_prefill_tps",
                                               "default_decode_tps",
                                               "speed_smoothing",
                                               "min_prefill_sample_tokens",
                                               "min_decode_sample_tokens",
                                               "exploration",
                                               "default_tokens_per_byte",
                                               "default_answer_tokens",
                                               "cache_budget_bytes",
                                               "slot_prompt_similarity",
                                               "hold_margin",
                                               "hold_min_gain",
                                               "max_overtakes",
                                               "affinity_yield",
                                               "scan_window",
                                               "reserve_margin",
                                               "reserve_prompts",
                                               "reserve_window",
                                               "default_priority",
                                               "band_queue_max",
                                               "fair_share_slack_tokens",
                                               "shed_retry_after_min",
                                               "shed_retry_after_max"};
const std::vector<std::string> kRoutingPolicies = {"least_loaded", "expected_finish"};
const std::vector<std::string> kApiKeyKeys = {"name", "key_env", "priority", "weight"};
const std::vector<std::string> kBandQueueKeys = {"priority", "max"};
// Priorities (x-fleetgate-priority, api key entries, bands): scheduling::parse_priority's range.
constexpr double kPriorityLimit = 1000;
const std::vector<std::string> kUpstreamKeys = {"api_key_env",     "ca_file",
                                                "connect_timeout", "first_byte_timeout",
                                                "idle_timeout",    "max_idle_per_replica",
                                                "max_event_bytes", "max_response_bytes",
                                                "dns_cache_ttl"};
const std::vector<std::string> kLogKeys = {"level", "format"};
const std::vector<std::string> kLogLevels = {"debug", "info", "warn", "error"};
const std::vector<std::string> kLogFormats = {"auto", "json", "text"};

constexpr const char* kListenExample = "127.0.0.1:8080";
constexpr const char* kEndpointExample = "https://a1b2c3.acu.run";

// The gateway's schema over the shared YAML layer (common/config/yaml_reader.hpp): which keys
// exist, their defaults (the structs' initialisers) and the checks across keys.
class Parser {
 public:
  Config parse(const yaml::Document& doc) {
    Config config;
    const Value& root = doc.root();
    if (root.is_null()) {
      root.fail_at(1, "models", "missing; at least one model is required (the file is empty)");
    }
    if (!root.is_map()) {
      root.fail("expected a map of sections (server, admin, models, ...), got " + root.describe());
    }
    const Map top = root.map(kRootKeys);
    if (const Value* v = top.find("server")) {
      parse_server(v->map(kServerKeys), config.server);
    }
    if (const Value* v = top.find("admin")) {
      const Map s = v->map(kAdminKeys);
      if (s.read_host_port("listen", config.admin.listen, kListenExample)) {
        admin_listen_line_ = s.line_of("listen");
      }
      if (const Value* t = s.find("tls")) {
        read_tls(t->map(kTlsKeys), config.admin.tls);
      }
      s.read_env_name("token_env", config.admin.token_env);
      s.read_string("prometheus_sd_file", config.admin.prometheus_sd_file);
    }
    // Before the models: each model's health settings start from the global ones.
    if (const Value* v = top.find("health")) {
      global_health_ = v->map(kHealthKeys);
      read_health(*global_health_, config.health);
      check_health_timeout(nullptr, config.health);
    }
    if (const Value* v = top.find("registration")) {
      parse_registration(v->map(kRegistrationKeys), config.registration);
    }
    const Value* models = top.find("models");
    if (models == nullptr) {
      top.fail("models", "missing; at least one model is required");
    }
    parse_models(*models, config.health, config.models);
    if (const Value* v = top.find("routing")) {
      parse_routing(v->map(kRoutingKeys), config.routing);
    }
    if (const Value* v = top.find("upstream")) {
      parse_upstream(v->map(kUpstreamKeys), config.upstream);
    }
    if (const Value* v = top.find("metrics")) {
      const Map s = v->map(kMetricsKeys);
      s.read_bool("per_replica", config.metrics.per_replica);
      s.read_bool("request_stream_usage", config.metrics.request_stream_usage);
    }
    if (const Value* v = top.find("storage")) {
      parse_storage(v->map(kStorageKeys), config.storage);
    }
    if (const Value* v = top.find("batch")) {
      parse_batch(v->map(kBatchKeys), config.batch);
    }
    if (const Value* v = top.find("log")) {
      const Map s = v->map(kLogKeys);
      s.read_one_of("level", config.log.level, kLogLevels);
      s.read_one_of("format", config.log.format, kLogFormats);
    }
    check_listeners(root, config);
    return config;
  }

 private:
  void parse_server(const Map& s, ServerConfig& out) {
    if (s.read_host_port("listen", out.listen, kListenExample)) {
      server_listen_line_ = s.line_of("listen");
    }
    if (const Value* t = s.find("tls")) {
      read_tls(t->map(kTlsKeys), out.tls);
    }
    s.read_env_name("api_keys_env", out.api_keys_env);
    if (const Value* keys = s.find("api_keys")) {
      parse_api_keys(*keys, out.api_keys);
    }
    s.read_whole("max_body_bytes", out.max_body_bytes, 1);
    s.read_whole("max_buffered_bytes", out.max_buffered_bytes, 1);
    if (out.max_buffered_bytes / 2 < out.max_body_bytes) {
      s.fail(s.has("max_buffered_bytes") ? "max_buffered_bytes" : "max_body_bytes",
             "server.max_buffered_bytes (" + std::to_string(out.max_buffered_bytes) +
                 ") must be at least twice server.max_body_bytes (" +
                 std::to_string(out.max_body_bytes) +
                 "): a body larger than a quarter of it may use only three quarters of it");
    }
    s.read_whole("max_connections", out.max_connections, 1);
    s.read_whole("max_connections_per_ip", out.max_connections_per_ip);
    if (s.has("read_timeout")) {
      s.fail("read_timeout",
             "replaced by server.header_timeout (first byte to end of headers) and "
             "server.body_timeout (the body); set those instead");
    }
    s.read_duration("header_timeout", out.header_timeout, false);
    s.read_duration("body_timeout", out.body_timeout, false);
    s.read_duration("idle_timeout", out.idle_timeout, false);
    s.read_duration("write_timeout", out.write_timeout, false);
    s.read_duration("drain_timeout", out.drain_timeout, true);
  }

  // A priority: a whole number in [-1000, 1000].
  static std::int32_t read_priority(const Value& v) {
    const double p = v.scalar().number_in(-kPriorityLimit, kPriorityLimit);
    if (p != static_cast<double>(static_cast<std::int32_t>(p))) {
      v.fail("expected a whole number between -1000 and 1000, got " +
             yaml::quote(v.scalar().string()));
    }
    return static_cast<std::int32_t>(p);
  }

  void parse_api_keys(const Value& node, std::vector<ApiKeyConfig>& out) {
    std::map<std::string, std::string> names;  // name -> where it was first defined
    for (const Value& item : node.list("a list of API keys (name, key_env, priority, weight)")) {
      if (item.is_null()) {
        item.fail("expected a map with at least 'name' and 'key_env', got nothing");
      }
      const Map k = item.map(kApiKeyKeys);
      ApiKeyConfig key;
      if (!k.read_string("name", key.name)) {
        k.fail("name", "missing; every API key needs a name (the tenant its requests count for)");
      }
      if (key.name.empty() || key.name.size() > 64 ||
          !std::all_of(key.name.begin(), key.name.end(), [](char c) {
            return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' ||
                   c == '.';
          })) {
        k.fail("name",
               "expected 1 to 64 letters, digits, '-', '_' or '.', got " + yaml::quote(key.name));
      }
      if (!k.read_env_name("key_env", key.key_env) || key.key_env.empty()) {
        k.fail("key_env", "missing; the environment variable that holds this key");
      }
      if (const Value* p = k.find("priority")) {
        key.priority = read_priority(*p);
      }
      if (const Value* w = k.find("weight")) {
        key.weight = w->scalar().number_in(0.001, 1e6);
      }
      const std::string where =
          k.path_of("name") + " (line " + std::to_string(k.line_of("name")) + ")";
      if (auto [it, fresh] = names.emplace(key.name, where); !fresh) {
        k.fail("name", "duplicate API key name " + yaml::quote(key.name) + "; already defined at " +
                           it->second);
      }
      out.push_back(std::move(key));
    }
  }

  static void read_tls(const Map& tls, TlsFiles& out) {
    tls.read_string("cert", out.cert);
    tls.read_string("key", out.key);
    if (!out.cert.empty() && out.key.empty()) {
      tls.fail_at(tls.line_of("cert"), tls.path_of("key"),
                  "missing; required when " + tls.path_of("cert") + " is set");
    }
    if (out.cert.empty() && !out.key.empty()) {
      tls.fail_at(tls.line_of("key"), tls.path_of("cert"),
                  "missing; required when " + tls.path_of("key") + " is set");
    }
  }

  void parse_models(const Value& node, const HealthConfig& health, std::vector<ModelConfig>& out) {
    const std::vector<Value> items = node.list("a list of models");
    if (items.empty()) {
      node.fail("at least one model is required");
    }
    std::map<std::string, std::string> names;  // name -> where it was first defined
    for (const Value& item : items) {
      ModelConfig model;
      model.health = health;
      const int name_line = parse_model(item, model);
      const std::string where = item.path() + " (line " + std::to_string(name_line) + ")";
      if (auto [it, fresh] = names.emplace(model.name, where); !fresh) {
        item.fail_at(name_line, item.path() + ".name",
                     "duplicate model name " + yaml::quote(model.name) + "; already defined at " +
                         it->second);
      }
      out.push_back(std::move(model));
    }
  }

  // Returns the line of the model's name, for the duplicate-name check.
  int parse_model(const Value& node, ModelConfig& out) {
    if (node.is_null()) {
      node.fail("expected a map with at least 'name', got nothing");
    }
    const Map s = node.map(kModelKeys);
    if (!s.read_string("name", out.name)) {
      s.fail("name", "missing; every model needs the name clients send");
    }
    if (out.name.empty()) {
      s.fail("name", "must not be empty");
    }
    s.read_whole("replicas", out.replicas);
    s.read_whole("slots", out.slots, 1, kMaxSlots);
    if (const Value* h = s.find("health")) {
      const Map hs = h->map(kHealthKeys);
      read_health(hs, out.health);
      check_health_timeout(&hs, out.health);
    }
    if (const Value* l = s.find("local")) {
      out.local = parse_local(l->map(kLocalKeys));
    }
    if (const Value* eps = s.find("endpoints")) {
      for (const Value& ep : eps->list("a list of endpoints")) {
        out.endpoints.push_back(parse_endpoint(ep, out.slots));
      }
    }
    if (const Value* d = s.find("deploy")) {
      const Map ds = d->map(kDeployKeys);
      if (const Value* a = ds.find("acurast")) {
        out.acurast = parse_acurast(a->map(kAcurastKeys));
        if (out.replicas == 0) {
          // The model's replicas is the number of phones rented: it must be stated.
          s.fail_at(s.has("replicas") ? s.line_of("replicas") : ds.line_of("acurast"),
                    s.path_of("replicas"),
                    "must be at least 1 for a model with deploy.acurast: it is the number of "
                    "phones rented");
        }
        if (out.acurast->stable_url && out.replicas != 1) {
          a->map(kAcurastKeys)
              .fail("stable_url",
                    "true needs replicas: 1: every phone of a deployment gets the same "
                    "environment, so one tunnel key would give all of them one URL");
        }
      }
    }
    return s.line_of("name");
  }

  static bool is_hex64(const std::string& text) {
    return text.size() == 64 && std::all_of(text.begin(), text.end(), [](char c) {
             return std::isxdigit(static_cast<unsigned char>(c)) != 0;
           });
  }

  static void read_url_and_sha(const Map& m, std::string& url, std::string& sha,
                               std::string_view what) {
    if (!m.read_string("url", url) || url.empty()) {
      m.fail("url", "missing; the URL of " + std::string(what) + " is required");
    }
    if (url.rfind("https://", 0) != 0 && url.rfind("http://", 0) != 0) {
      m.fail("url", "must be an http:// or https:// URL, got " + yaml::quote(url));
    }
    if (!m.read_string("sha256", sha) || sha.empty()) {
      m.fail("sha256", "missing; the SHA-256 of " + std::string(what) +
                           " (64 hex characters) is required, so a changed file is refused");
    }
    if (!is_hex64(sha)) {
      m.fail("sha256", "expected 64 hex characters, got " + yaml::quote(sha));
    }
    std::transform(sha.begin(), sha.end(), sha.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  }

  static AcurastDeployConfig parse_acurast(const Map& s) {
    AcurastDeployConfig a;
    a.line = s.line();
    s.read_one_of("network", a.network, kAcurastNetworks);
    if (!s.read_string("gateway_url", a.gateway_url) || a.gateway_url.empty()) {
      s.fail("gateway_url",
             "missing; the URL at which the phones reach this gateway's admin listener to "
             "register (e.g. https://gw.example.com:9090)");
    }
    if (!net::parse_url(a.gateway_url)) {
      s.fail("gateway_url", "not a valid http:// or https:// URL: " + yaml::quote(a.gateway_url));
    }
    if (const Value* f = s.find("model_file")) {
      read_url_and_sha(f->map(kModelFileKeys), a.model_url, a.model_sha256, "the model's GGUF");
    } else {
      s.fail("model_file",
             "missing; {url, sha256} of the GGUF file the phones download is required");
    }
    s.read_duration("execution_window", a.execution_window, false);
    s.read_duration("start_delay", a.start_delay, true);
    s.read_duration("max_start_delay", a.max_start_delay, true);
    s.read_duration("renew_overlap", a.renew_overlap, true);
    if (a.renew_overlap >= a.execution_window) {
      s.fail(s.has("renew_overlap") ? "renew_overlap" : "execution_window",
             "renew_overlap must be shorter than execution_window, got " +
                 format_duration(a.renew_overlap) + " and " + format_duration(a.execution_window));
    }
    if (!s.read_whole("max_cost_per_execution", a.max_cost_per_execution, 1)) {
      s.fail("max_cost_per_execution",
             "missing; the most one phone's execution may cost, in the smallest ACU unit "
             "(1 ACU = 10^12), e.g. 1000000000000 for 1 ACU");
    }
    s.read_whole("min_ram_bytes", a.min_ram_bytes);
    s.read_bool("only_attested_devices", a.only_attested_devices);
    s.read_one_of("restart_policy", a.restart_policy, kRestartPolicies);
    if (const Value* mods = s.find("required_modules")) {
      for (const Value& item : mods->list("a list of Acurast modules such as [DataEncryption]")) {
        const std::string name = item.scalar().text("a module name");
        if (std::find(kExtraModules.begin(), kExtraModules.end(), name) == kExtraModules.end()) {
          item.fail("unknown Acurast module " + yaml::quote(name) +
                    "; known: DataEncryption, LLM, Shell");
        }
        if (name != "Shell" && std::find(a.required_modules.begin(), a.required_modules.end(),
                                         name) == a.required_modules.end()) {
          a.required_modules.push_back(name);
        }
      }
    }
    s.read_whole("min_processor_reputation", a.min_processor_reputation);
    if (const Value* img = s.find("image")) {
      read_url_and_sha(img->map(kImageKeys), a.image_url, a.image_sha256,
                       "the Shell runtime's distro image (.tar.xz)");
    }
    s.read_whole("context_size", a.context_size, 256, 1u << 20);
    s.read_bool("stable_url", a.stable_url);
    return a;
  }

  static LocalFleetConfig parse_local(const Map& s) {
    LocalFleetConfig local;
    s.read_whole("count", local.count, 1, 256);
    s.read_string("engine", local.engine);
    if (local.engine != "sim") {
      s.fail("engine",
             "a local fleet runs the simulator only: use 'sim', got " + yaml::quote(local.engine));
    }
    if (s.read_string("profile", local.profile) && sim::find_profile(local.profile) == nullptr) {
      s.fail("profile", "unknown simulator profile " + yaml::quote(local.profile) +
                            "; known: " + sim::profile_list());
    }
    if (const Value* v = s.find("time_scale")) {
      const yaml::Scalar scalar = v->scalar();
      const std::string expected = "a number greater than 0 (10 runs the profile ten times faster)";
      local.time_scale = scalar.number(expected);
      if (!(local.time_scale > 0) || local.time_scale > sim::kMaxTimeScale) {
        scalar.fail("expected " + expected + ", got " + v->describe());
      }
    }
    s.read_whole("slots", local.slots, 1, kMaxSlots);
    return local;
  }

  // An endpoint is a URL string, or a map {url, slots}.
  Endpoint parse_endpoint(const Value& node, std::uint32_t model_slots) {
    Endpoint ep;
    ep.slots = model_slots;
    const Value* url = &node;
    std::optional<Map> s;
    if (node.is_map()) {
      s = node.map(kEndpointKeys);
      url = s->find("url");
      if (url == nullptr) {
        s->fail("url", "missing; an endpoint map needs a url");
      }
      s->read_whole("slots", ep.slots, 1, kMaxSlots);
    } else if (!node.is_scalar()) {
      node.fail("expected a URL or a map {url, slots}, got " + node.describe());
    }
    ep.url = url->scalar().url(kEndpointExample);
    const std::string normalised = ep.url.to_string();
    const std::string where = node.path() + " (line " + std::to_string(url->line()) + ")";
    if (auto [it, fresh] = endpoint_urls_.emplace(normalised, where); !fresh) {
      url->fail("duplicate endpoint " + normalised + "; already listed at " + it->second);
    }
    return ep;
  }

  // Reads the health keys present in s over out (the defaults, or the global settings for a
  // model's override).
  static void read_health(const Map& s, HealthConfig& out) {
    s.read_duration("interval", out.interval, false);
    s.read_duration("timeout", out.timeout, false);
    if (s.read_string("path", out.path)) {
      const bool clean = std::none_of(out.path.begin(), out.path.end(), [](char c) {
        return static_cast<unsigned char>(c) <= ' ' || c == '\x7f' || c == '#';
      });
      if (out.path.empty() || out.path[0] != '/' || !clean) {
        s.fail("path",
               "expected a URL path starting with \"/\" such as /health (no spaces or '#'), got " +
                   yaml::quote(out.path));
      }
    }
    s.read_whole("unhealthy_after", out.unhealthy_after, 1);
    s.read_whole("healthy_after", out.healthy_after, 1);
    s.read_whole("eject_after", out.eject_after, 1);
  }

  // A probe that may take as long as the interval would overlap the next one. h holds resolved
  // values; model is the model's override (nullptr for the check of the global section itself).
  // Blames the key that made the pair invalid: the model's own timeout or interval when it wrote
  // one, else the global one.
  void check_health_timeout(const Map* model, const HealthConfig& h) const {
    if (h.timeout < h.interval) {
      return;
    }
    // Where a resolved value came from, for the message.
    auto origin = [&](const std::string& key) -> std::string {
      if (model != nullptr && model->has(key)) {
        return model->path_of(key);
      }
      if (global_health_ && global_health_->has(key)) {
        return global_health_->path_of(key);
      }
      return "default";
    };
    const Map& blamed = model != nullptr ? *model : *global_health_;
    const std::string key = blamed.has("timeout") ? "timeout" : "interval";
    blamed.fail(key, "the probe timeout must be less than the interval, got timeout " +
                         format_duration(h.timeout) + " (" + origin("timeout") + ") and interval " +
                         format_duration(h.interval) + " (" + origin("interval") + ")");
  }

  static void parse_registration(const Map& s, RegistrationConfig& out) {
    s.read_env_name("token_env", out.token_env);
    const Value* urls = s.find("allowed_urls");
    if (urls != nullptr) {
      for (const Value& item :
           urls->list("a list of URL patterns such as [\"https://*.acu.run\"]")) {
        const std::string pattern = item.scalar().text("a URL pattern");
        check_url_pattern(item, pattern);
        out.allowed_urls.push_back(pattern);
      }
    }
    s.read_duration("expire_after", out.expire_after, false);
    s.read_duration("heartbeat_interval", out.heartbeat_interval, false);
    s.read_bool("url_challenge", out.url_challenge);
    if (!out.token_env.empty() && out.allowed_urls.empty()) {
      s.fail_at(s.line_of(urls != nullptr ? "allowed_urls" : "token_env"),
                s.path_of("allowed_urls"),
                "empty while registration.token_env is set, so every registration would be "
                "refused; list the URL patterns agents may register (e.g. \"https://*.acu.run\"), "
                "or leave token_env empty to disable registration");
    }
  }

  // Patterns are matched against normalised URLs (lower-case scheme and host, no default port,
  // no trailing slash), so a pattern that could never match one is refused here.
  static void check_url_pattern(const Value& item, const std::string& pattern) {
    const auto bad = [&](const std::string& why) {
      item.fail("invalid URL pattern " + yaml::quote(pattern) + ": " + why);
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

  static void parse_storage(const Map& s, StorageConfig& out) {
    s.read_one_of("backend", out.backend, kStorageBackends);
    s.read_string("path", out.path);
    s.read_env_name("url_env", out.url_env);
    if (out.backend == "sqlite" && out.path.empty()) {
      s.fail("path", "must name the SQLite database file, e.g. .fleetgate/fleetgate.db");
    }
    if (out.backend == "postgres" && out.url_env.empty()) {
      s.fail(s.has("url_env") ? "url_env" : "backend",
             "storage.backend postgres needs storage.url_env (the env var with the URL)");
    }
  }

  static void parse_batch(const Map& s, BatchConfig& out) {
    s.read_bool("enabled", out.enabled);
    s.read_whole("max_file_bytes", out.max_file_bytes, 1);
    s.read_whole("max_file_lines", out.max_file_lines, 1);
    s.read_whole("max_lines", out.max_lines, 1);
    s.read_whole("max_in_flight", out.max_in_flight, 1);
    s.read_whole("slots_per_batch", out.slots_per_batch);
    s.read_whole("max_attempts", out.max_attempts, 1);
    s.read_duration("retry_backoff", out.retry_backoff, true);
    s.read_duration("lease_timeout", out.lease_timeout, false);
    s.read_duration("poll_interval", out.poll_interval, false);
  }

  static void parse_routing(const Map& s, RoutingConfig& out) {
    s.read_whole("queue_max", out.queue_max, 1);
    s.read_duration("queue_timeout", out.queue_timeout, false);
    s.read_duration("request_timeout", out.request_timeout, false);
    s.read_whole("retries", out.retries);
    s.read_duration("keepalive_interval", out.keepalive_interval, true);
    s.read_one_of("policy", out.policy, kRoutingPolicies);
    auto number = [&s](std::string_view key, double& into, double low, double high) {
      if (const Value* v = s.find(key)) {
        into = v->scalar().number_in(low, high);
      }
    };
    number("default_prefill_tps", out.default_prefill_tps, 0.001, 1e7);
    number("default_decode_tps", out.default_decode_tps, 0.001, 1e7);
    number("speed_smoothing", out.speed_smoothing, 0.001, 1);
    s.read_whole("min_prefill_sample_tokens", out.min_prefill_sample_tokens);
    s.read_whole("min_decode_sample_tokens", out.min_decode_sample_tokens);
    number("exploration", out.exploration, 0, 1);
    number("default_tokens_per_byte", out.default_tokens_per_byte, 0.001, 10);
    s.read_whole("default_answer_tokens", out.default_answer_tokens, 1);
    s.read_whole("cache_budget_bytes", out.cache_budget_bytes);
    number("slot_prompt_similarity", out.slot_prompt_similarity, 0, 1);
    number("hold_margin", out.hold_margin, 0, 100);
    s.read_duration("hold_min_gain", out.hold_min_gain, true);
    s.read_whole("max_overtakes", out.max_overtakes);
    s.read_bool("affinity_yield", out.affinity_yield);
    s.read_whole("scan_window", out.scan_window, 1);
    number("reserve_margin", out.reserve_margin, 0, 100);
    s.read_whole("reserve_prompts", out.reserve_prompts);
    s.read_duration("reserve_window", out.reserve_window, false);
    if (const Value* v = s.find("default_priority")) {
      out.default_priority = read_priority(*v);
    }
    if (const Value* v = s.find("band_queue_max")) {
      for (const Value& item : v->list("a list of {priority, max}")) {
        const Map b = item.map(kBandQueueKeys);
        const Value* p = b.find("priority");
        if (p == nullptr) {
          b.fail("priority", "missing; the band this limit is for");
        }
        std::uint32_t max = 0;
        if (!b.read_whole("max", max, 1)) {
          b.fail("max", "missing; the most requests the band may queue");
        }
        if (!out.band_queue_max.emplace(read_priority(*p), max).second) {
          b.fail("priority", "this band already has a limit above");
        }
      }
    }
    number("fair_share_slack_tokens", out.fair_share_slack_tokens, 0, 1e12);
    s.read_duration("shed_retry_after_min", out.shed_retry_after_min, false);
    s.read_duration("shed_retry_after_max", out.shed_retry_after_max, false);
    if (out.shed_retry_after_max < out.shed_retry_after_min) {
      s.fail(s.has("shed_retry_after_max") ? "shed_retry_after_max" : "shed_retry_after_min",
             "routing.shed_retry_after_max must be at least routing.shed_retry_after_min");
    }
  }

  static void parse_upstream(const Map& s, UpstreamConfig& out) {
    s.read_env_name("api_key_env", out.api_key_env);
    s.read_string("ca_file", out.ca_file);
    s.read_duration("connect_timeout", out.connect_timeout, false);
    s.read_duration("first_byte_timeout", out.first_byte_timeout, false);
    s.read_duration("idle_timeout", out.idle_timeout, false);
    s.read_whole("max_idle_per_replica", out.max_idle_per_replica);
    s.read_whole("max_event_bytes", out.max_event_bytes, 1);
    s.read_whole("max_response_bytes", out.max_response_bytes, 1);
    s.read_duration("dns_cache_ttl", out.dns_cache_ttl, true);
  }

  // Two listeners on one address would make the second bind fail at startup; say so now.
  void check_listeners(const Value& root, const Config& config) const {
    const net::HostPort& pub = config.server.listen;
    const net::HostPort& adm = config.admin.listen;
    if (pub.port == 0 || pub.port != adm.port || !hosts_overlap(pub.host, adm.host)) {
      return;
    }
    // Blame the address the operator wrote; with both defaulted this cannot happen.
    if (admin_listen_line_ != 0) {
      root.fail_at(admin_listen_line_, "admin.listen",
                   "must differ from server.listen (both are " + adm.to_string() + ")");
    }
    root.fail_at(server_listen_line_ != 0 ? server_listen_line_ : 1, "server.listen",
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

  std::map<std::string, std::string> endpoint_urls_;  // normalised URL -> where first listed
  int server_listen_line_ = 0;                        // 0 = not written in the file
  int admin_listen_line_ = 0;
  std::optional<Map> global_health_;  // the top-level health section, when written
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
  try {
    return Parser().parse(yaml::Document::parse(text, source));
  } catch (const yaml::Error& e) {
    throw ConfigError(e.what());
  }
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
  Config config = load_config_string(text.str(), path);
  // A relative storage.path is in the service's state directory when it has one (systemd's
  // StateDirectory= sets $STATE_DIRECTORY; the Docker image sets it too: /etc is read-only
  // there), else the config file's neighbour (the embedded config's: the cwd's).
  const char* state_dir = std::getenv("STATE_DIRECTORY");
  // systemd lists several directories separated by ':' when a unit has several: the first.
  const auto dir = state_dir && *state_dir ? std::filesystem::path(std::string(state_dir).substr(
                                                 0, std::string(state_dir).find(':')))
                                           : std::filesystem::path(path).parent_path();
  if (!config.storage.path.empty() && std::filesystem::path(config.storage.path).is_relative() &&
      !dir.empty()) {
    config.storage.path = (dir / config.storage.path).string();
  }
  return config;
}

}  // namespace fg::config
