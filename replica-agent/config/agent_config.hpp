#pragma once

// fleetgate-agent's configuration: the YAML file (`--config agent.yaml`) and the command-line
// flags that override it, parsed and validated in one place. Pure: no Asio, no sockets.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "common/log/log.hpp"
#include "common/net/url.hpp"

namespace fg::agent {

inline constexpr std::uint32_t kMaxAgentSlots = 256;
inline constexpr const char* kDefaultEngineUrl = "http://127.0.0.1:8080";
inline constexpr std::chrono::milliseconds kDefaultDrainTimeout{30'000};

enum class EngineKind { sim, llama_server, openai };

// Limits of engine.autotune's values (checked when parsed).
inline constexpr std::uint32_t kMaxAutotuneThreads = 1024;
inline constexpr std::uint32_t kMaxAutotuneBatchSize = 65536;
inline constexpr std::uint32_t kMaxAutotunePromptTokens = 65536;
inline constexpr std::uint32_t kMaxAutotunePredictTokens = 4096;
inline constexpr std::size_t kMaxAutotuneCandidates = 64;

// engine.autotune (llama-server with engine.command only): before serving, the agent starts
// llama-server once per combination of the listed values, measures a fixed job and keeps the
// fastest setting (see replica-agent/engines/autotune.hpp and docs/agent.md).
struct AutotuneConfig {
  bool enabled = false;                   // any engine.autotune key (or --autotune-* flag) was set
  std::vector<std::uint32_t> threads;     // --threads values to try; empty: not tuned
  std::vector<std::uint32_t> batch_size;  // --batch-size values to try; empty: not tuned
  std::uint32_t prompt_tokens = 256;      // the reference job's prompt length
  std::uint32_t predict_tokens = 32;      // and answer length
};

const char* to_string(EngineKind kind);

struct EngineConfig {
  EngineKind kind = EngineKind::sim;
  // sim only
  std::string profile = "fast-test";  // a built-in profile name
  double time_scale = 1.0;            // > 0
  double jitter = 0.0;                // 0..0.95
  double fail_rate = 0.0;             // 0..1
  std::uint64_t seed = 0;
  // llama-server and openai only
  net::Url url;                      // the engine's base URL; default kDefaultEngineUrl
  std::vector<std::string> command;  // llama-server only: argv of a child the agent supervises
  AutotuneConfig autotune;           // llama-server with command only
};

struct GatewayLink {
  std::string url;        // "" = no registration
  std::string token_env;  // env var holding the registration bearer token
  bool enabled() const { return !url.empty(); }
};

struct AgentTls {
  std::string cert;  // PEM files; both set = HTTPS listener
  std::string key;
  bool enabled() const { return !cert.empty(); }
};

// model_file: a GGUF the agent downloads before it starts the engine (resumed with HTTP Range
// requests into path + ".part", checked against sha256, then renamed to path). "{model_path}" in
// engine.command stands for path.
struct ModelFileConfig {
  std::string url;     // http or https; "" = no download
  std::string sha256;  // 64 hex digits, lower case
  std::string path;    // where the file goes
  bool enabled() const { return !url.empty(); }
};
inline constexpr const char* kModelPathToken = "{model_path}";

// tunnel: how the phone's public URL comes about. none: public_url is given; acurast: the agent
// opens the Acurast tunnel through the bridge (BRIDGE_SOCKET) with the P-256 key in key_env and
// registers the URL it returns.
enum class TunnelKind { none, acurast };
const char* to_string(TunnelKind kind);
inline constexpr const char* kDefaultTunnelKeyEnv = "FLEETGATE_TUNNEL_KEY";
inline constexpr const char* kDefaultTunnelRelay = "relay-1.mainnet.acurast.com:4433";
inline constexpr const char* kDefaultDomainSuffix = "acu.run";
struct TunnelConfig {
  TunnelKind kind = TunnelKind::none;
  std::string key_env = kDefaultTunnelKeyEnv;
  std::vector<std::string> relays = {kDefaultTunnelRelay};  // host:port each
  std::string domain_suffix = kDefaultDomainSuffix;
  // How often tunnel_status is asked; a tunnel found down is opened again.
  std::chrono::milliseconds poll_interval{5000};
};

// deployment.window: how long this phone's deployment runs from the agent's start (Acurast ends
// deployments); the environment variable FLEETGATE_DEPLOYMENT_ENDS_AT (RFC 3339) overrides it.
inline constexpr std::chrono::milliseconds kDefaultDeploymentWindow{24LL * 3600 * 1000};
inline constexpr const char* kDeploymentEndsAtEnv = "FLEETGATE_DEPLOYMENT_ENDS_AT";
struct DeploymentConfig {
  std::chrono::milliseconds window = kDefaultDeploymentWindow;
};

// Everything the file and the flags set. After parse_command_line it is complete and valid.
struct AgentConfig {
  net::HostPort listen{"127.0.0.1", 8081};
  std::string model;                   // the model id this phone serves (required)
  std::optional<std::uint32_t> slots;  // unset: the profile's (sim) or the engine's /props
  EngineConfig engine;
  std::string public_url;  // what is registered; required with gateway.url unless tunneled
  GatewayLink gateway;
  ModelFileConfig model_file;
  TunnelConfig tunnel;
  DeploymentConfig deployment;
  AgentTls tls;
  std::string api_key_env;  // env var holding the bearer key of the OpenAI routes; "" = open
  log::Level log_level = log::Level::info;
  std::string log_format = "auto";  // json, text, or auto: text when stderr is a terminal
  std::chrono::milliseconds drain_timeout = kDefaultDrainTimeout;
};

// A configuration problem. what() names where the value came from and the key:
// "agent.yaml:7: engine.time_scale: expected a number greater than 0, got \"fast\"" or
// "--slots: must be between 1 and 256, got '0'".
class AgentConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where each key that was set came from ("agent.yaml:7" or "--time-scale"), for messages of the
// checks that look at several keys together.
using Origins = std::map<std::string, std::string>;

// Parses YAML text into config (keys absent from the file keep config's values). Unknown keys,
// wrong types and out-of-range values throw AgentConfigError naming source:line and the key.
void load_agent_config_string(const std::string& text, const std::string& source,
                              AgentConfig& config, Origins* origins = nullptr);
// Reads the file and calls load_agent_config_string (an unreadable file throws too).
void load_agent_config_file(const std::string& path, AgentConfig& config,
                            Origins* origins = nullptr);

// Checks that hold across keys (model required, engine keys fit the engine kind, TLS cert and
// key together, public_url and gateway.token_env with gateway.url). Throws AgentConfigError.
void validate_agent_config(const AgentConfig& config, const Origins& origins);

// What main should do.
struct Invocation {
  AgentConfig config;
  std::string config_path;  // "" = no file
  bool check = false;       // --check: validate, print, exit
};

// What main should do instead of serving: print text (to stdout for code 0, else stderr) and
// exit with code.
struct CliExit {
  int code = 0;
  std::string text;
};

// Parses argv[1..]: "--flag value" and "--flag=value"; --config FILE is read first and every
// other flag overrides the file. Bad flags exit 2, a bad file 1; with --check every invalid
// configuration exits 1 and a valid one 0 (with a message on stdout).
std::variant<Invocation, CliExit> parse_command_line(const std::vector<std::string>& args,
                                                     const std::string& version);

std::string usage_text();

// engine.command with every "{model_path}" replaced by model_file.path.
std::vector<std::string> expand_model_path(const std::vector<std::string>& command,
                                           const std::string& model_path);

}  // namespace fg::agent
