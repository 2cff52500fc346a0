#include "orchestrator/deploy/acurast_render.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "common/util/json.hpp"
#include "orchestrator/deploy/acurast_schema.hpp"
#include "orchestrator/fleet/deployment.hpp"

namespace fg::deploy {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

const std::string kSha = std::string(64, 'a');
const std::string kImageSha = std::string(64, 'b');

// A model with deploy.acurast, as the YAML would give it.
std::string yaml(const std::string& model_extra = "", const std::string& acurast_extra = "") {
  return "registration:\n"
         "  token_env: FG_REG_TOKEN\n"
         "  allowed_urls: [\"https://*.acu.run\"]\n"
         "upstream: {api_key_env: FG_PHONE_KEY}\n"
         "models:\n"
         "  - name: qwen3.5-0.8b\n"
         "    replicas: 10\n"
         "    slots: 4\n" +
         model_extra +
         "    deploy:\n"
         "      acurast:\n"
         "        gateway_url: https://gw.example.com:9090\n"
         "        model_file: {url: \"https://models.example.com/q.gguf\", sha256: " +
         kSha +
         "}\n"
         "        max_cost_per_execution: 1000000000000\n" +
         acurast_extra;
}

config::Config load(const std::string& text) {
  return config::load_config_string(text, "fleet.yaml");
}

const SystemTime kNow = fleet::parse_rfc3339("2026-12-03T18:00:00Z").value();

const RenderedFile* file(const RenderedDeployment& d, const std::string& path) {
  for (const auto& f : d.files) {
    if (f.path == path) {
      return &f;
    }
  }
  return nullptr;
}

json acurast_of(const RenderedDeployment& d) {
  return parse_network_json(file(d, "acurast.json")->content);
}

TEST(AcurastRender, OneProjectWithTheModelsReplicasAndTheDefaults) {
  const auto c = load(yaml());
  const auto d = render_acurast(c, c.models[0], kNow);
  EXPECT_EQ(d.folder, "qwen3.5-0.8b");
  const json doc = acurast_of(d);
  EXPECT_TRUE(check_acurast_json(doc, kNow).empty());
  ASSERT_EQ(doc["projects"].size(), 1u);
  const json& p = doc["projects"]["fleetgate-qwen3.5-0.8b-g1"];
  EXPECT_EQ(p["projectName"], "fleetgate-qwen3.5-0.8b-g1");
  EXPECT_EQ(p["numberOfReplicas"], 10);
  EXPECT_EQ(p["runtime"], "Shell");
  EXPECT_EQ(p["fileUrl"], "app");
  EXPECT_EQ(p["entrypoint"], "start.sh");
  EXPECT_EQ(p["onlyAttestedDevices"], true);
  EXPECT_EQ(p["network"], "mainnet");
  EXPECT_EQ(p["assignmentStrategy"], json({{"type", "Single"}}));
  EXPECT_EQ(p["execution"], json({{"type", "onetime"}, {"maxExecutionTimeInMs", 86'400'000}}));
  EXPECT_EQ(p["startAt"], json({{"msFromNow", 600'000}}));
  EXPECT_EQ(p["maxAllowedStartDelayInMs"], 600'000);
  EXPECT_EQ(p["maxCostPerExecution"], 1'000'000'000'000);
  EXPECT_EQ(p["restartPolicy"], "onFailure");
  EXPECT_EQ(p["requiredModules"], json({"Shell"}));
  EXPECT_EQ(p["image"]["url"], kDefaultImageUrl);
  EXPECT_EQ(p["includeEnvironmentVariables"], json({"FG_REG_TOKEN", "FG_PHONE_KEY"}));
  EXPECT_FALSE(p.contains("benchmarkFilters"));
  EXPECT_EQ(d.state.generation, 1u);
  EXPECT_EQ(d.state.starts_at, kNow + 10min);
  EXPECT_EQ(d.state.ends_at, kNow + 10min + 24h);
}

TEST(AcurastRender, EveryYamlKeyReachesTheProject) {
  const auto c = load(yaml("",
                           "        network: canary\n"
                           "        execution_window: 12h\n"
                           "        start_delay: 0s\n"
                           "        max_start_delay: 2m\n"
                           "        min_ram_bytes: 12000000000\n"
                           "        only_attested_devices: false\n"
                           "        restart_policy: always\n"
                           "        required_modules: [DataEncryption, Shell]\n"
                           "        min_processor_reputation: 500\n"
                           "        image: {url: \"https://img.example/d.tar.xz\", sha256: " +
                               kImageSha + "}\n"));
  const auto d = render_acurast(c, c.models[0], kNow);
  const json p = acurast_of(d)["projects"]["fleetgate-qwen3.5-0.8b-g1"];
  EXPECT_TRUE(check_acurast_json(acurast_of(d), kNow).empty());
  EXPECT_EQ(p["network"], "canary");
  EXPECT_EQ(p["execution"]["maxExecutionTimeInMs"], 43'200'000);
  EXPECT_FALSE(p.contains("startAt")) << "start_delay 0: as soon as matched";
  EXPECT_EQ(p["maxAllowedStartDelayInMs"], 120'000);
  EXPECT_EQ(p["benchmarkFilters"], json({{"minRamTotalBytes", 12'000'000'000}}));
  EXPECT_EQ(p["onlyAttestedDevices"], false);
  EXPECT_EQ(p["restartPolicy"], "always");
  EXPECT_EQ(p["requiredModules"], json({"Shell", "DataEncryption"}));
  EXPECT_EQ(p["minProcessorReputation"], 500);
  EXPECT_EQ(p["image"], json({{"url", "https://img.example/d.tar.xz"}, {"sha256", kImageSha}}));
  const json manifest = parse_network_json(file(d, "app/manifest.json")->content);
  EXPECT_TRUE(check_shell_manifest(manifest).empty());
  EXPECT_EQ(manifest["image"], p["image"]);
  EXPECT_EQ(manifest["entrypoint"], "start.sh");
  const std::string agent = file(d, "app/agent.yaml")->content;
  EXPECT_NE(agent.find("domain_suffix: canary.acu.run"), std::string::npos);
  EXPECT_NE(agent.find("window: 12h"), std::string::npos) << agent;
}

TEST(AcurastRender, TheShellFolderRunsTheAgentWithTheModelsSettings) {
  const auto c = load(yaml());
  const auto d = render_acurast(c, c.models[0], kNow);
  const auto* start = file(d, "app/start.sh");
  ASSERT_NE(start, nullptr);
  EXPECT_TRUE(start->executable);
  EXPECT_EQ(start->content.rfind("#!/bin/sh\n", 0), 0u);
  EXPECT_NE(start->content.find("exec ./fleetgate-agent --config ./agent.yaml"), std::string::npos);
  EXPECT_NE(start->content.find("TMPDIR"), std::string::npos);
  const std::string agent = file(d, "app/agent.yaml")->content;
  for (const std::string& want :
       {std::string("model: \"qwen3.5-0.8b\""), std::string("kind: llama-server"),
        std::string("\"{model_path}\""), std::string("--parallel, \"4\""),
        std::string("sha256: ") + kSha, std::string("url: \"https://models.example.com/q.gguf\""),
        std::string("key_env: FLEETGATE_TUNNEL_KEY"),
        std::string("relays: [\"relay-1.mainnet.acurast.com:4433\"]"),
        std::string("domain_suffix: acu.run"), std::string("window: 24h"),
        std::string("url: \"https://gw.example.com:9090\""), std::string("token_env: FG_REG_TOKEN"),
        std::string("api_key_env: FG_PHONE_KEY")}) {
    EXPECT_NE(agent.find(want), std::string::npos) << want << "\n" << agent;
  }
  EXPECT_EQ(d.binaries.size(), 2u);
  EXPECT_EQ(d.binaries[0].from, "build-aarch64/dist/fleetgate-agent");
  EXPECT_EQ(d.binaries[1].to, "app/llama-server");
  const std::string env = file(d, ".env.example")->content;
  EXPECT_NE(env.find("\nFG_REG_TOKEN=\n"), std::string::npos);
  EXPECT_NE(env.find("\nFG_PHONE_KEY=\n"), std::string::npos);
  EXPECT_NE(env.find("# FLEETGATE_TUNNEL_KEY=\n"), std::string::npos) << "not passed by default";
}

TEST(AcurastRender, NoRenderedFileCarriesASecret) {
  // The renderer sees only the configuration, which holds names of variables, never values:
  // whatever the environment holds cannot reach a file. What it writes for secrets is names.
  ::setenv("FG_REG_TOKEN", "reg-token-value-7f3a9c", 1);
  ::setenv("FG_PHONE_KEY", "phone-key-value-1b2c3d", 1);
  const auto c = load(yaml());
  const auto d = render_acurast(c, c.models[0], kNow);
  for (const auto& f : d.files) {
    EXPECT_EQ(f.content.find("reg-token-value-7f3a9c"), std::string::npos) << f.path;
    EXPECT_EQ(f.content.find("phone-key-value-1b2c3d"), std::string::npos) << f.path;
    // No assignment of a value to a secret's name either (.env.example leaves them empty).
    for (const auto& name : d.secret_env) {
      const auto at = f.content.find(name + "=");
      if (at != std::string::npos) {
        const auto end = at + name.size() + 1;
        EXPECT_TRUE(end == f.content.size() || f.content[end] == '\n') << f.path << ": " << name;
      }
    }
  }
  ::unsetenv("FG_REG_TOKEN");
  ::unsetenv("FG_PHONE_KEY");
}

TEST(AcurastRender, LargeFleetsAreSplitIntoProjectsOfAtMost64) {
  auto c = load(yaml());
  c.models[0].replicas = 150;
  const auto d = render_acurast(c, c.models[0], kNow);
  const json doc = acurast_of(d);
  EXPECT_TRUE(check_acurast_json(doc, kNow).empty());
  ASSERT_EQ(doc["projects"].size(), 3u);
  int total = 0;
  for (const auto& [name, p] : doc["projects"].items()) {
    EXPECT_LE(p["numberOfReplicas"].get<int>(), 64);
    total += p["numberOfReplicas"].get<int>();
  }
  EXPECT_EQ(total, 150);
  EXPECT_EQ(doc["projects"]["fleetgate-qwen3.5-0.8b-g1-p1"]["numberOfReplicas"], 50);
  EXPECT_EQ(d.state.projects.size(), 3u);
}

TEST(AcurastRender, RenewStartsTheNextGenerationBeforeTheLastEnds) {
  const auto c = load(yaml());
  const auto first = render_acurast(c, c.models[0], kNow);
  std::string why;
  const auto state = parse_state(file(first, "deployment.json")->content, &why);
  ASSERT_TRUE(state) << why;
  EXPECT_EQ(state->generation, 1u);
  EXPECT_EQ(state->ends_at, first.state.ends_at);
  // Twenty hours later: the first ends at +24h10m; the next starts an hour before.
  const auto next = render_acurast(c, c.models[0], kNow + 20h, state);
  EXPECT_EQ(next.state.generation, 2u);
  EXPECT_EQ(next.state.starts_at, first.state.ends_at - 1h);
  EXPECT_EQ(next.state.ends_at, next.state.starts_at + 24h);
  const json doc = acurast_of(next);
  EXPECT_TRUE(check_acurast_json(doc, kNow + 20h).empty());
  ASSERT_TRUE(doc["projects"].contains("fleetgate-qwen3.5-0.8b-g2"));
  EXPECT_EQ(doc["projects"]["fleetgate-qwen3.5-0.8b-g2"]["startAt"],
            json({{"timestamp", fleet::format_rfc3339(first.state.ends_at - 1h)}}));
  EXPECT_TRUE(next.notes.empty());
}

TEST(AcurastRender, RenewTooLateStartsAsSoonAsItCanAndSaysSo) {
  const auto c = load(yaml());
  const auto first = render_acurast(c, c.models[0], kNow);
  const auto late = kNow + 24h;  // the first ends in 10 minutes
  const auto next = render_acurast(c, c.models[0], late, first.state);
  EXPECT_EQ(next.state.starts_at, late + 10min);
  ASSERT_EQ(next.notes.size(), 1u);
  EXPECT_NE(next.notes[0].find("starts as soon as it can"), std::string::npos);
}

TEST(AcurastRender, StableUrlPassesTheTunnelKey) {
  const auto c = load(
      yaml("", "        stable_url: true\n")
          .replace(yaml().find("replicas: 10"), std::string("replicas: 10").size(), "replicas: 1"));
  const auto d = render_acurast(c, c.models[0], kNow);
  const json p = acurast_of(d)["projects"]["fleetgate-qwen3.5-0.8b-g1"];
  EXPECT_EQ(p["includeEnvironmentVariables"],
            json({"FG_REG_TOKEN", "FG_PHONE_KEY", "FLEETGATE_TUNNEL_KEY"}));
  EXPECT_NE(file(d, ".env.example")->content.find("\nFLEETGATE_TUNNEL_KEY=\n"), std::string::npos);
}

TEST(AcurastRender, TheGatewayMustLetThePhonesRegister) {
  const auto ok = load(yaml());
  EXPECT_TRUE(gateway_problems(ok, ok.models[0]).empty());
  std::string off = yaml();
  off.erase(0, off.find("upstream:"));
  const auto no_registration = load(off);
  ASSERT_EQ(gateway_problems(no_registration, no_registration.models[0]).size(), 1u);
  EXPECT_NE(gateway_problems(no_registration, no_registration.models[0])[0].find(
                "registration.token_env is not set"),
            std::string::npos);
  // Patterns for local agents only: the tunnel URLs would be refused.
  std::string local = yaml();
  local.replace(local.find("https://*.acu.run"), std::string("https://*.acu.run").size(),
                "http://127.0.0.1:*");
  const auto c = load(local);
  const auto problems = gateway_problems(c, c.models[0]);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("add \"https://*.acu.run\""), std::string::npos) << problems[0];
}

TEST(AcurastRender, StateFilesAreCheckedWhenRead) {
  std::string why;
  EXPECT_FALSE(parse_state("nope", &why));
  EXPECT_FALSE(parse_state(R"({"generation":0,"rendered_at":"x"})", &why));
  EXPECT_FALSE(parse_state(R"({"generation":1,"rendered_at":"2026-12-03T18:00:00Z",)"
                           R"("starts_at":"2026-12-03T18:00:00Z","ends_at":"tomorrow"})",
                           &why));
  EXPECT_NE(why.find("ends_at"), std::string::npos);
  EXPECT_EQ(model_folder("org/model:7b"), "org-model-7b");
  EXPECT_EQ(model_folder(".."), "model");
}

TEST(AcurastDeployConfig, YamlErrorsNameFileLineAndKey) {
  const auto error_of = [](const std::string& text) {
    try {
      load(text);
    } catch (const config::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string no_sha = yaml();
  no_sha.replace(no_sha.find(", sha256: " + kSha), 10 + kSha.size(), "");
  EXPECT_NE(
      error_of(no_sha).find("fleet.yaml:12: models[0].deploy.acurast.model_file.sha256: missing"),
      std::string::npos)
      << error_of(no_sha);
  std::string no_url = yaml();
  no_url.replace(no_url.find("url: \"https://models.example.com/q.gguf\", "),
                 std::string("url: \"https://models.example.com/q.gguf\", ").size(), "");
  EXPECT_NE(error_of(no_url).find("models[0].deploy.acurast.model_file.url: missing"),
            std::string::npos)
      << error_of(no_url);
  std::string no_file = yaml();
  no_file.erase(no_file.find("        model_file:"),
                no_file.find("        max_cost") - no_file.find("        model_file:"));
  EXPECT_NE(error_of(no_file).find("models[0].deploy.acurast.model_file: missing"),
            std::string::npos)
      << error_of(no_file);
  std::string zero = yaml();
  zero.replace(zero.find("replicas: 10"), 12, "replicas: 0");
  EXPECT_NE(error_of(zero).find("fleet.yaml:7: models[0].replicas: must be at least 1"),
            std::string::npos)
      << error_of(zero);
  EXPECT_NE(
      error_of(yaml("", "        network: testnet\n")).find("models[0].deploy.acurast.network"),
      std::string::npos);
  EXPECT_NE(error_of(yaml("", "        network: testnet\n")).find("testnet"), std::string::npos);
  EXPECT_NE(error_of(yaml("", "        required_modules: [GPU]\n"))
                .find("unknown Acurast module \"GPU\""),
            std::string::npos);
  EXPECT_NE(
      error_of(yaml("", "        stable_url: true\n")).find("stable_url: true needs replicas: 1"),
      std::string::npos)
      << error_of(yaml("", "        stable_url: true\n"));
  EXPECT_NE(error_of(yaml("", "        netwrok: canary\n")).find("netwrok"), std::string::npos);
  EXPECT_NE(error_of(yaml("", "        renew_overlap: 30h\n")).find("renew_overlap"),
            std::string::npos);
  std::string no_cost = yaml();
  no_cost.erase(no_cost.find("        max_cost"));
  EXPECT_NE(error_of(no_cost).find("max_cost_per_execution: missing"), std::string::npos)
      << error_of(no_cost);
  EXPECT_EQ(error_of(yaml()), "");
  EXPECT_FALSE(load("models:\n  - name: m\n").models[0].acurast);
}

}  // namespace
}  // namespace fg::deploy
