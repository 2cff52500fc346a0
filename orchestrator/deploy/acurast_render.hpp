#pragma once

// `fleetgate deploy acurast`: the gateway's YAML -> an Acurast project per model with a
// `deploy.acurast` section (acurast.json, the Shell runtime folder, .env.example). Pure: the
// time is passed in, files are returned as text, binaries as copies for the CLI to make.
// docs/deploy-acurast.md.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "orchestrator/config/config.hpp"

namespace fg::deploy {

using SystemTime = std::chrono::system_clock::time_point;

// The Acurast CLI takes at most this many replicas per project (acurast-cli's schema): a larger
// fleet is split into several projects of one deployment generation.
inline constexpr std::uint32_t kMaxReplicasPerProject = 64;

// Defaults of deploy.acurast.image: Debian 12 (bookworm) aarch64 from termux/proot-distro v4.17.3.
inline constexpr const char* kDefaultImageUrl =
    "https://github.com/termux/proot-distro/releases/download/v4.17.3/"
    "debian-bookworm-aarch64-pd-v4.17.3.tar.xz";
inline constexpr const char* kDefaultImageSha256 =
    "3a841a794ae5999b33e33b329582ed0379d4f54ca62c6ce5a8eb9cff5ef8900b";

// The environment variables the phones get (values set by the operator in .env, encrypted by
// the CLI per phone; never in a rendered file).
inline constexpr const char* kTunnelKeyEnv = "FLEETGATE_TUNNEL_KEY";
inline constexpr const char* kDefaultRegistrationTokenEnv = "FLEETGATE_REGISTRATION_TOKEN";

// Where the agent's port is, and llama-server's, on the phone (loopback only).
inline constexpr int kAgentPort = 8081;
inline constexpr int kEnginePort = 8082;

// What a rendered deployment is, kept in deployment.json beside it for --renew. No secret.
struct DeploymentState {
  std::string model;
  std::uint32_t generation = 1;
  std::vector<std::string> projects;
  SystemTime rendered_at{};
  SystemTime starts_at{};  // planned (the CLI may start up to maxAllowedStartDelayInMs later)
  SystemTime ends_at{};    // starts_at + execution_window
};

nlohmann::json state_json(const DeploymentState& state);
// nullopt (and why) when the text is not a state this renderer wrote.
std::optional<DeploymentState> parse_state(const std::string& text, std::string* why);

struct RenderedFile {
  std::string path;  // relative to the model's output folder, '/'-separated
  std::string content;
  bool executable = false;
};

// A binary the CLI copies into the Shell folder (it must exist unless --no-binaries).
struct BinaryCopy {
  std::string from;  // relative to the source tree
  std::string to;    // relative to the model's output folder
};

struct RenderedDeployment {
  std::string model;
  std::string folder;  // the model's output folder name, below --out
  DeploymentState state;
  std::vector<RenderedFile> files;
  std::vector<BinaryCopy> binaries;
  std::vector<std::string> secret_env;  // the variables includeEnvironmentVariables names
  std::vector<std::string> notes;       // said to the operator (e.g. a renewal starting now)
};

// Renders model `model` (which must have deploy.acurast). previous: the state of the deployment
// being renewed (--renew), which the new one overlaps by renew_overlap; nullopt for the first.
RenderedDeployment render_acurast(const config::Config& config, const config::ModelConfig& model,
                                  SystemTime now,
                                  const std::optional<DeploymentState>& previous = std::nullopt);

// What in the gateway's own configuration would keep the rendered phones out: registration off,
// or no registration.allowed_urls pattern matching a tunnel URL (https://<8 hex>.<domain>).
// Empty: they can join.
std::vector<std::string> gateway_problems(const config::Config& config,
                                          const config::ModelConfig& model);

// The folder name a model renders into (its name, with characters outside [A-Za-z0-9._-]
// replaced by '-').
std::string model_folder(const std::string& model);

}  // namespace fg::deploy
