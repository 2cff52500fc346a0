#include "orchestrator/deploy/acurast_render.hpp"

#include <algorithm>

#include "common/util/duration.hpp"
#include "common/util/json.hpp"
#include "orchestrator/fleet/deployment.hpp"

namespace fg::deploy {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr const char* kAppFolder = "app";
constexpr const char* kEntrypoint = "start.sh";

long long ms(std::chrono::milliseconds d) {
  return static_cast<long long>(d.count());
}

// YAML double-quoted scalar (JSON string syntax is valid YAML).
std::string q(const std::string& text) {
  return json(text).dump();
}

std::string relay_for(const std::string& network) {
  return network == "canary" ? "relay-1.canary.acurast.com:4433"
                             : "relay-1.mainnet.acurast.com:4433";
}

std::string domain_suffix_for(const std::string& network) {
  return network == "canary" ? "canary.acu.run" : "acu.run";
}

std::string registration_token_env(const config::Config& config) {
  return config.registration.token_env.empty() ? kDefaultRegistrationTokenEnv
                                               : config.registration.token_env;
}

std::string agent_yaml(const config::Config& config, const config::ModelConfig& model,
                       const config::AcurastDeployConfig& a) {
  const std::string file = "models/" + model_folder(model.name) + ".gguf";
  std::string y;
  y += "# Rendered by `fleetgate deploy acurast` from the gateway's configuration; regenerate it\n"
       "# instead of editing. The agent on the phone (docs/agent.md): it downloads and checks the\n"
       "# model, starts llama-server, opens the tunnel and registers with the gateway. Secrets\n"
       "# come from the environment (the *_env keys name them), never from this file.\n";
  y += "listen: 127.0.0.1:" + std::to_string(kAgentPort) + "\n";
  y += "model: " + q(model.name) + "\n";
  y += "engine:\n";
  y += "  kind: llama-server\n";
  y += "  url: http://127.0.0.1:" + std::to_string(kEnginePort) + "\n";
  y += "  command: [./llama-server, --model, \"{model_path}\", --alias, " + q(model.name) +
       ", --host, 127.0.0.1, --port, \"" + std::to_string(kEnginePort) + "\", --parallel, \"" +
       std::to_string(model.slots) + "\", --ctx-size, \"" + std::to_string(a.context_size) +
       "\", --metrics, --no-webui]\n";
  y += "model_file:\n";
  y += "  url: " + q(a.model_url) + "\n";
  y += "  sha256: " + a.model_sha256 + "\n";
  y += "  path: " + file + "\n";
  y += "tunnel:\n";
  y += "  kind: acurast\n";
  y += std::string("  key_env: ") + kTunnelKeyEnv + "\n";
  y += "  relays: [" + q(relay_for(a.network)) + "]\n";
  y += "  domain_suffix: " + domain_suffix_for(a.network) + "\n";
  y += "deployment:\n";
  y += "  window: " + format_duration(a.execution_window) + "\n";
  y += "gateway:\n";
  y += "  url: " + q(a.gateway_url) + "\n";
  y += "  token_env: " + registration_token_env(config) + "\n";
  if (!config.upstream.api_key_env.empty()) {
    y += "api_key_env: " + config.upstream.api_key_env + "\n";
  }
  y += "log: {level: info, format: json}\n";
  return y;
}

std::string start_script() {
  return "#!/bin/sh\n"
         "# Rendered by `fleetgate deploy acurast`. The Shell runtime's entry point: it only\n"
         "# prepares the folder and starts the agent, which does the rest (model download and\n"
         "# check, llama-server, tunnel, registration, drain on SIGTERM).\n"
         "set -eu\n"
         "cd \"$(dirname \"$0\")\"\n"
         "export HOME=\"${HOME:-/root}\"\n"
         "export TMPDIR=\"${TMPDIR:-$PWD/tmp}\"\n"
         "mkdir -p \"$TMPDIR\" models\n"
         "# HTTPS to the gateway and the model URL: the static agent's OpenSSL looks for CA\n"
         "# certificates where Debian keeps them (/usr/lib/ssl), which an image may not have;\n"
         "# the image's own bundle is named instead, unless SSL_CERT_FILE is set already.\n"
         "if [ -z \"${SSL_CERT_FILE:-}\" ]; then\n"
         "  for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt "
         "/etc/ssl/cert.pem; do\n"
         "    if [ -f \"$f\" ]; then export SSL_CERT_FILE=\"$f\"; break; fi\n"
         "  done\n"
         "fi\n"
         "chmod 0755 ./fleetgate-agent ./llama-server\n"
         "exec ./fleetgate-agent --config ./agent.yaml\n";
}

std::string env_example(const config::Config& config, const config::AcurastDeployConfig& a) {
  std::string e;
  e +=
      "# The variables the phones get. Copy to .env beside acurast.json, fill in, and keep it out\n"
      "# of version control: `acurast deploy` encrypts each value for each phone, and\n"
      "# `acurast deployments <id> -e` updates them later. Nothing here is in a rendered file.\n";
  e += "\n# The gateway's registration token (its registration.token_env).\n";
  e += registration_token_env(config) + "=\n";
  if (!config.upstream.api_key_env.empty()) {
    e += "\n# The bearer key the phones require on /v1 (the gateway's upstream.api_key_env).\n";
    e += config.upstream.api_key_env + "=\n";
  }
  e += "\n# The tunnel's P-256 key (base64 PKCS#8): the phone's URL follows from it.\n";
  if (a.stable_url) {
    e += "# Required: stable_url is on (one phone, a URL known before deploy).\n";
    e += std::string(kTunnelKeyEnv) + "=\n";
  } else {
    e += "# Not passed (stable_url is off): every phone of a deployment gets the same\n"
         "# environment, so each makes its own key and URL instead.\n";
    e += std::string("# ") + kTunnelKeyEnv + "=\n";
  }
  return e;
}

std::vector<std::uint32_t> split_replicas(std::uint32_t n) {
  const std::uint32_t parts = (n + kMaxReplicasPerProject - 1) / kMaxReplicasPerProject;
  std::vector<std::uint32_t> sizes(parts, n / parts);
  for (std::uint32_t i = 0; i < n % parts; ++i) {
    ++sizes[i];
  }
  return sizes;
}

}  // namespace

std::string model_folder(const std::string& model) {
  std::string out = model;
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      c = '-';
    }
  }
  if (out.empty() || out == "." || out == "..") {
    out = "model";
  }
  return out;
}

json state_json(const DeploymentState& s) {
  return {{"model", s.model},
          {"generation", s.generation},
          {"projects", s.projects},
          {"rendered_at", fleet::format_rfc3339(s.rendered_at)},
          {"starts_at", fleet::format_rfc3339(s.starts_at)},
          {"ends_at", fleet::format_rfc3339(s.ends_at)}};
}

std::optional<DeploymentState> parse_state(const std::string& text, std::string* why) {
  const json doc = parse_network_json(text);
  auto fail = [&](const std::string& w) -> std::optional<DeploymentState> {
    if (why != nullptr) {
      *why = w;
    }
    return std::nullopt;
  };
  if (!doc.is_object()) {
    return fail("not a JSON object");
  }
  DeploymentState s;
  auto gen = doc.find("generation");
  if (gen == doc.end() || !gen->is_number_unsigned() || gen->get<std::uint64_t>() < 1 ||
      gen->get<std::uint64_t>() > 1'000'000) {
    return fail("\"generation\" must be a whole number from 1");
  }
  s.generation = static_cast<std::uint32_t>(gen->get<std::uint64_t>());
  if (auto m = doc.find("model"); m != doc.end() && m->is_string()) {
    s.model = m->get<std::string>();
  }
  for (const char* key : {"rendered_at", "starts_at", "ends_at"}) {
    auto it = doc.find(key);
    std::optional<SystemTime> t;
    if (it != doc.end() && it->is_string()) {
      t = fleet::parse_rfc3339(it->get<std::string>());
    }
    if (!t) {
      return fail(std::string("\"") + key + "\" must be an RFC 3339 time");
    }
    (std::string_view(key) == "rendered_at" ? s.rendered_at
     : std::string_view(key) == "starts_at" ? s.starts_at
                                            : s.ends_at) = *t;
  }
  if (auto p = doc.find("projects"); p != doc.end() && p->is_array()) {
    for (const auto& name : *p) {
      if (name.is_string()) {
        s.projects.push_back(name.get<std::string>());
      }
    }
  }
  return s;
}

std::vector<std::string> gateway_problems(const config::Config& config,
                                          const config::ModelConfig& model) {
  std::vector<std::string> problems;
  if (!config.registration.enabled()) {
    problems.push_back(
        "registration.token_env is not set: registration is off, so the phones could not "
        "register (set it and list their URLs in registration.allowed_urls)");
    return problems;
  }
  const std::string sample = "https://0a1b2c3d." + domain_suffix_for(model.acurast->network);
  const auto& patterns = config.registration.allowed_urls;
  if (std::none_of(patterns.begin(), patterns.end(),
                   [&](const std::string& p) { return config::glob_match(p, sample); })) {
    problems.push_back("no registration.allowed_urls pattern matches the phones' tunnel URLs (" +
                       sample + "): add \"https://*." + domain_suffix_for(model.acurast->network) +
                       "\"");
  }
  return problems;
}

RenderedDeployment render_acurast(const config::Config& config, const config::ModelConfig& model,
                                  SystemTime now, const std::optional<DeploymentState>& previous) {
  const config::AcurastDeployConfig& a = *model.acurast;
  RenderedDeployment out;
  out.model = model.name;
  out.folder = model_folder(model.name);
  const auto seconds = [](SystemTime t) { return std::chrono::floor<std::chrono::seconds>(t); };

  DeploymentState& st = out.state;
  st.model = model.name;
  st.rendered_at = seconds(now);
  ordered_json start_at;
  if (previous) {
    st.generation = previous->generation + 1;
    st.starts_at = previous->ends_at - a.renew_overlap;
    const SystemTime earliest = seconds(now) + a.start_delay;
    if (st.starts_at < earliest) {
      out.notes.push_back("the deployment being renewed ends at " +
                          fleet::format_rfc3339(previous->ends_at) + ", less than renew_overlap (" +
                          format_duration(a.renew_overlap) +
                          ") from now: the next one starts as soon as it can, at " +
                          fleet::format_rfc3339(earliest));
      st.starts_at = earliest;
    }
    start_at = {{"timestamp", fleet::format_rfc3339(st.starts_at)}};
  } else {
    st.starts_at = seconds(now) + a.start_delay;
    start_at = {{"msFromNow", ms(a.start_delay)}};
  }
  st.ends_at = st.starts_at + a.execution_window;

  out.secret_env.push_back(registration_token_env(config));
  if (!config.upstream.api_key_env.empty()) {
    out.secret_env.push_back(config.upstream.api_key_env);
  }
  if (a.stable_url) {
    out.secret_env.push_back(kTunnelKeyEnv);
  }

  const std::string image_url = a.image_url.empty() ? kDefaultImageUrl : a.image_url;
  const std::string image_sha = a.image_url.empty() ? kDefaultImageSha256 : a.image_sha256;
  std::vector<std::string> modules = {"Shell"};
  modules.insert(modules.end(), a.required_modules.begin(), a.required_modules.end());

  ordered_json projects = ordered_json::object();
  const auto sizes = split_replicas(model.replicas);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    std::string name = "fleetgate-" + out.folder + "-g" + std::to_string(st.generation);
    if (sizes.size() > 1) {
      name += "-p" + std::to_string(i + 1);
    }
    st.projects.push_back(name);
    ordered_json p;
    p["projectName"] = name;
    p["fileUrl"] = kAppFolder;
    p["entrypoint"] = kEntrypoint;
    p["runtime"] = "Shell";
    p["image"] = {{"url", image_url}, {"sha256", image_sha}};
    p["network"] = a.network;
    p["onlyAttestedDevices"] = a.only_attested_devices;
    if (previous || a.start_delay.count() > 0) {
      p["startAt"] = start_at;
    }
    p["assignmentStrategy"] = {{"type", "Single"}};
    p["execution"] = {{"type", "onetime"}, {"maxExecutionTimeInMs", ms(a.execution_window)}};
    p["maxAllowedStartDelayInMs"] = ms(a.max_start_delay);
    p["usageLimit"] = {{"maxMemory", 0}, {"maxNetworkRequests", 0}, {"maxStorage", 0}};
    p["numberOfReplicas"] = sizes[i];
    p["requiredModules"] = modules;
    p["minProcessorReputation"] = a.min_processor_reputation;
    p["maxCostPerExecution"] = a.max_cost_per_execution;
    p["includeEnvironmentVariables"] = out.secret_env;
    p["restartPolicy"] = a.restart_policy;
    if (a.min_ram_bytes > 0) {
      p["benchmarkFilters"] = {{"minRamTotalBytes", a.min_ram_bytes}};
    }
    projects[name] = std::move(p);
  }
  const ordered_json acurast = {{"projects", projects}};
  const ordered_json manifest = {{"version", "1"},
                                 {"entrypoint", kEntrypoint},
                                 {"image", {{"url", image_url}, {"sha256", image_sha}}}};

  const std::string app = kAppFolder;
  out.files.push_back({"acurast.json", acurast.dump(2) + "\n"});
  out.files.push_back({app + "/manifest.json", manifest.dump(2) + "\n"});
  out.files.push_back({app + "/" + kEntrypoint, start_script(), true});
  out.files.push_back({app + "/agent.yaml", agent_yaml(config, model, a)});
  out.files.push_back({".env.example", env_example(config, a)});
  out.files.push_back({"deployment.json", state_json(st).dump(2) + "\n"});
  out.binaries.push_back({"build-aarch64/dist/fleetgate-agent", app + "/fleetgate-agent"});
  out.binaries.push_back({".cache/llama-aarch64/bin/llama-server", app + "/llama-server"});
  return out;
}

}  // namespace fg::deploy
