#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/net/url.hpp"

namespace fg::config {

using std::chrono::milliseconds;

// Upper bound for slots: far beyond what one phone can serve, low enough to catch typos.
inline constexpr std::uint32_t kMaxSlots = 1024;

struct TlsFiles {
  std::string cert;  // PEM file; empty = no TLS
  std::string key;
  bool enabled() const { return !cert.empty(); }
};

// A named client key (server.api_keys): the name is the tenant of its requests (fair shares,
// batch ownership, logs); the key itself is read from the environment.
struct ApiKeyConfig {
  std::string name;
  std::string key_env;                   // env var holding the key
  std::optional<std::int32_t> priority;  // band of its requests; absent: routing.default_priority
  double weight = 1.0;                   // its fair share within a band, against other keys'
};

struct ServerConfig {
  net::HostPort listen{"127.0.0.1", 8080};
  TlsFiles tls;
  std::string api_keys_env;  // name of an env var with comma-separated keys
  std::vector<ApiKeyConfig> api_keys;
  std::uint64_t max_body_bytes = 4 * 1024 * 1024;
  // Request bodies held at once, in total (read, queued, being sent): bounds their memory.
  std::uint64_t max_buffered_bytes = 1024ull * 1024 * 1024;
  // Open client connections at most; beyond it new connections are closed at once.
  std::uint32_t max_connections = 10000;
  std::uint32_t max_connections_per_ip = 1000;  // 0 = no per-address cap
  milliseconds header_timeout{10'000};          // first byte of a request to the end of its headers
  milliseconds body_timeout{60'000};            // the body, once the headers are in
  milliseconds idle_timeout{60'000};            // a keep-alive connection waiting for a request
  milliseconds write_timeout{60'000};  // one write to a client (a reader that stopped is dropped)
  milliseconds drain_timeout{30'000};  // SIGTERM: in-flight requests get this long
};

struct AdminConfig {
  net::HostPort listen{"127.0.0.1", 9090};
  TlsFiles tls;           // the admin listener over HTTPS (phones register across the Internet)
  std::string token_env;  // name of an env var with the /admin/v1 bearer token; empty = none
  // When set, the gateway writes its agents as a Prometheus file_sd target list here.
  std::string prometheus_sd_file;
};

struct MetricsConfig {
  bool per_replica = true;  // per-replica series (labels: model, replica id); off for huge fleets
  // Ask replicas for usage on streams when the client did not (and strip it from what the client
  // receives), so that token counts are always known.
  bool request_stream_usage = true;
};

// Active health checks and passive ejection. The top-level `health:` section sets the fleet-wide
// values; `models[i].health:` may override any subset for one model.
struct HealthConfig {
  milliseconds interval{5000};        // between probes of one replica (> 0)
  milliseconds timeout{3000};         // for one probe (> 0, < interval)
  std::string path = "/health";       // probed with GET {replica}{path}
  std::uint32_t unhealthy_after = 3;  // consecutive failed probes -> unhealthy
  std::uint32_t healthy_after = 2;    // consecutive passed probes -> healthy
  std::uint32_t eject_after = 3;      // consecutive failures on real traffic -> unhealthy
};

// Dynamic fleet: phones registering themselves on the admin listener.
struct RegistrationConfig {
  std::string token_env;  // env var with the registration bearer token; empty = disabled
  // Glob patterns (see glob_match) a registered URL, normalised with net::Url::to_string(), must
  // match. Empty = nothing is allowed.
  std::vector<std::string> allowed_urls;
  milliseconds expire_after{600000};       // no heartbeat for this long -> gone
  milliseconds heartbeat_interval{10000};  // returned to agents as heartbeat_interval_s
  // A registered URL must answer the challenge (fleet/url_challenge.hpp) before it gets traffic.
  bool url_challenge = true;
  bool enabled() const { return !token_env.empty(); }
};

struct Endpoint {
  net::Url url;
  std::uint32_t slots = 0;  // resolved: the endpoint's own, else the model's
};

// A fleet of simulated phones the gateway starts and supervises itself (fleetgate-agent
// processes on free 127.0.0.1 ports): a whole system on one machine, for trying and testing.
struct LocalFleetConfig {
  std::uint32_t count = 1;            // agents to start, 1..256
  std::string engine = "sim";         // the only engine a local fleet runs today
  std::string profile = "fast-test";  // a simulator profile (docs/simulator.md)
  double time_scale = 1.0;            // > 0; 10 runs the profile ten times faster
  std::uint32_t slots = 0;            // per agent; 0 = the profile's own
};

// `models[i].deploy.acurast`: what `fleetgate deploy acurast` renders for the model (issue 12;
// docs/deploy-acurast.md). The gateway itself only validates it.
struct AcurastDeployConfig {
  std::string network = "mainnet";  // mainnet | canary
  // Where the phones' agents register: the gateway's admin listener as the phones reach it.
  std::string gateway_url;
  std::string model_url;     // model_file.url: the GGUF the agent downloads (http or https)
  std::string model_sha256;  // model_file.sha256: 64 hex characters
  milliseconds execution_window{24 * 3600 * 1000};  // how long each phone runs (> 0)
  milliseconds start_delay{10 * 60 * 1000};         // startAt.msFromNow
  milliseconds max_start_delay{10 * 60 * 1000};     // maxAllowedStartDelayInMs
  milliseconds renew_overlap{3600 * 1000};          // --renew: the next one starts this long before
  std::uint64_t max_cost_per_execution = 0;         // smallest ACU unit; required (> 0)
  std::uint64_t min_ram_bytes = 0;                  // benchmarkFilters.minRamTotalBytes; 0 = none
  bool only_attested_devices = true;
  std::string restart_policy = "onFailure";   // no | onFailure | always
  std::vector<std::string> required_modules;  // besides Shell: DataEncryption, LLM
  std::uint32_t min_processor_reputation = 0;
  std::string image_url;              // the Shell runtime's distro image; defaults in deploy/
  std::string image_sha256;           // its sha256 (64 hex)
  std::uint32_t context_size = 8192;  // llama-server --ctx-size (whole, shared by the slots)
  // One fixed tunnel key (FLEETGATE_TUNNEL_KEY, so one URL known before deploy): only for one
  // phone per deployment; otherwise each phone makes its own key and URL.
  bool stable_url = false;
  int line = 0;  // of `acurast:`, for messages
};

struct ModelConfig {
  std::string name;
  std::uint32_t replicas = 0;  // desired replica count (0 = not stated: the endpoint count)
  std::uint32_t slots = 1;     // default slots per replica
  std::vector<Endpoint> endpoints;
  HealthConfig health;  // resolved: the global health settings overridden by the model's own
  std::optional<LocalFleetConfig> local;
  std::optional<AcurastDeployConfig> acurast;  // deploy.acurast
  // The fleet size to aim for: replicas when stated, else static endpoints plus local agents.
  std::uint32_t desired_replicas() const {
    if (replicas != 0) {
      return replicas;
    }
    return static_cast<std::uint32_t>(endpoints.size()) + (local ? local->count : 0);
  }
};

struct RoutingConfig {
  std::uint32_t queue_max = 10000;
  milliseconds queue_timeout{600'000};
  // One request from start to end: queue wait and every attempt (a long stream included).
  milliseconds request_timeout{1'800'000};
  std::uint32_t retries = 2;
  milliseconds keepalive_interval{15'000};  // SSE ": keep-alive" while waiting; 0 = never

  // The scheduler's knobs (docs/routing.md; scheduling::RoutingOptions holds the same defaults).
  std::string policy = "expected_finish";  // expected_finish | least_loaded
  double default_prefill_tps = 50.0;
  double default_decode_tps = 10.0;
  double speed_smoothing = 0.2;
  std::uint32_t min_prefill_sample_tokens = 32;
  std::uint32_t min_decode_sample_tokens = 2;
  double exploration = 0.01;
  double default_tokens_per_byte = 0.25;
  std::uint32_t default_answer_tokens = 16;
  std::uint64_t cache_budget_bytes = 64ull * 1024 * 1024;
  double slot_prompt_similarity = 0.1;
  double hold_margin = 0.0;
  milliseconds hold_min_gain{1000};
  std::uint32_t max_overtakes = 128;
  bool affinity_yield = true;
  std::uint32_t scan_window = 64;
  double reserve_margin = 0.5;
  std::uint32_t reserve_prompts = 8;
  milliseconds reserve_window{600'000};
  std::int32_t default_priority = 0;
  std::map<std::int32_t, std::uint32_t> band_queue_max;  // priority -> queue limit
  double fair_share_slack_tokens = 16384.0;
  milliseconds shed_retry_after_min{1000};
  milliseconds shed_retry_after_max{60'000};
};

struct UpstreamConfig {
  std::string api_key_env;
  std::string ca_file;
  milliseconds connect_timeout{10'000};
  milliseconds first_byte_timeout{600'000};
  milliseconds idle_timeout{120'000};
  std::uint32_t max_idle_per_replica = 8;  // pooled keep-alive connections kept per replica
  // One server-sent event (or line) from a replica; a longer one ends the stream as a protocol
  // failure of that replica.
  std::uint64_t max_event_bytes = 1024 * 1024;
  std::uint64_t max_response_bytes = 64ull * 1024 * 1024;  // a whole (non-streamed) answer
  milliseconds dns_cache_ttl{30'000};  // resolved replica addresses are reused this long
};

// Where the Files and Batches API keep their state (docs/batch.md).
struct StorageConfig {
  std::string backend = "sqlite";                // sqlite | postgres
  std::string path = ".fleetgate/fleetgate.db";  // sqlite: the database file (relative: to the cwd)
  std::string url_env;                           // postgres: env var holding the connection URL
};

// The Batch API's limits and its runner (docs/batch.md).
struct BatchConfig {
  bool enabled = true;
  std::uint64_t max_file_bytes = 200ull * 1024 * 1024;  // OpenAI's: 200 MB per batch input file
  std::uint32_t max_lines = 50'000;                     // OpenAI's: 50,000 requests per batch
  std::uint64_t max_file_lines = 1'000'000;  // lines of one uploaded file (refused with a 413)
  std::uint32_t max_in_flight = 64;     // lines running at once, over every batch (memory bound)
  std::uint32_t slots_per_batch = 0;    // cap on one batch's slots in use; 0 = none
  std::uint32_t max_attempts = 3;       // runs of one line before it goes to the error file
  milliseconds retry_backoff{1000};     // before the 2nd run; doubles each time (at most 60 s)
  milliseconds lease_timeout{300'000};  // a line's lease; renewed while it runs
  milliseconds poll_interval{1000};     // how often the runner looks for work it was not told of
};

struct LogConfig {
  std::string level = "info";
  std::string format = "auto";  // json, text, or auto: text when stderr is a terminal
};

struct Config {
  ServerConfig server;
  AdminConfig admin;
  HealthConfig health;  // global; each ModelConfig::health holds the resolved per-model values
  RegistrationConfig registration;
  std::vector<ModelConfig> models;
  RoutingConfig routing;
  UpstreamConfig upstream;
  MetricsConfig metrics;
  StorageConfig storage;
  BatchConfig batch;
  LogConfig log;
  // The model with this name, or nullptr.
  const ModelConfig* find_model(std::string_view name) const {
    for (const auto& m : models) {
      if (m.name == name) {
        return &m;
      }
    }
    return nullptr;
  }
};

// The configuration in force. A reload replaces it; whoever took a snapshot keeps the one it
// had, so each request runs to its end on the configuration it started with. One thread: no
// lock.
class ConfigSource {
 public:
  explicit ConfigSource(Config config)
      : current_(std::make_shared<const Config>(std::move(config))) {}
  std::shared_ptr<const Config> snapshot() const { return current_; }
  const Config& current() const { return *current_; }
  void replace(Config next) { current_ = std::make_shared<const Config>(std::move(next)); }

 private:
  std::shared_ptr<const Config> current_;
};

// A configuration problem. what() names the file, the line and the key:
// "config/local.yaml:12: routing.queue_timeout: expected a duration such as 600s, got \"ten\"".
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Whether text matches the glob pattern, case-sensitively: '*' matches any run of characters
// (including none) and '?' exactly one character, except that neither matches ':', '/', '@', '['
// or ']', so a wildcard cannot cross from one part of a URL into another ("https://*.acu.run"
// matches neither "https://evil.com/x.acu.run" nor "https://evil.com:1@x.acu.run"). Every other
// character matches itself. Used to check registered replica URLs, normalised with
// net::Url::to_string(), against registration.allowed_urls.
bool glob_match(std::string_view pattern, std::string_view text);

// Parses and validates YAML text; source names the file in messages. Throws ConfigError.
Config load_config_string(const std::string& text, const std::string& source);
// Reads a file and calls load_config_string. Throws ConfigError (also for an unreadable file).
Config load_config_file(const std::string& path);

}  // namespace fg::config
