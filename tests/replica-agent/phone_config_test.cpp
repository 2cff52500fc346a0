// The agent's keys for phones (issue 12): model_file, tunnel, deployment.
#include <gtest/gtest.h>

#include <string>

#include "replica-agent/config/agent_config.hpp"

namespace fg::agent {
namespace {

const std::string kSha(64, 'a');

std::string file_error(const std::string& yaml) {
  try {
    AgentConfig config;
    Origins origins;
    load_agent_config_string(yaml, "agent.yaml", config, &origins);
    validate_agent_config(config, origins);
  } catch (const AgentConfigError& e) {
    return e.what();
  }
  return "";
}

AgentConfig load(const std::string& yaml) {
  AgentConfig config;
  Origins origins;
  load_agent_config_string(yaml, "agent.yaml", config, &origins);
  validate_agent_config(config, origins);
  return config;
}

TEST(AgentPhoneConfig, Defaults) {
  AgentConfig c = load("model: m\n");
  EXPECT_FALSE(c.model_file.enabled());
  EXPECT_EQ(c.tunnel.kind, TunnelKind::none);
  EXPECT_EQ(c.tunnel.key_env, "FLEETGATE_TUNNEL_KEY");
  EXPECT_EQ(c.tunnel.relays, std::vector<std::string>{"relay-1.mainnet.acurast.com:4433"});
  EXPECT_EQ(c.tunnel.domain_suffix, "acu.run");
  EXPECT_EQ(c.tunnel.poll_interval.count(), 5000);
  EXPECT_EQ(c.deployment.window.count(), 24LL * 3600 * 1000);
}

TEST(AgentPhoneConfig, ModelFileAndItsToken) {
  AgentConfig c = load(
      "model: m\nengine:\n  kind: llama-server\n  command: [llama-server, -m, '{model_path}', "
      "'--x={model_path}']\nmodel_file:\n  url: https://example.com/q.gguf\n  sha256: " +
      std::string(64, 'A') + "\n  path: /data/q.gguf\n");
  EXPECT_EQ(c.model_file.url, "https://example.com/q.gguf");
  EXPECT_EQ(c.model_file.sha256, kSha);  // lower-cased
  EXPECT_EQ(c.model_file.path, "/data/q.gguf");
  EXPECT_EQ(expand_model_path(c.engine.command, c.model_file.path),
            (std::vector<std::string>{"llama-server", "-m", "/data/q.gguf", "--x=/data/q.gguf"}));
}

TEST(AgentPhoneConfig, ModelFileErrorsNameTheKey) {
  EXPECT_EQ(file_error("model: m\nmodel_file:\n  url: http://h/q.gguf\n  path: q.gguf\n"),
            "agent.yaml:3: model_file.url: needs model_file.sha256 too (model_file takes url, "
            "sha256 and path)");
  EXPECT_NE(file_error("model: m\nmodel_file:\n  url: http://h/q\n  sha256: abc\n  path: q\n")
                .find("agent.yaml:4: model_file.sha256: expected the file's SHA-256 as 64 "
                      "hexadecimal digits"),
            std::string::npos);
  EXPECT_NE(
      file_error("model: m\nmodel_file:\n  url: ftp://h/q\n").find("agent.yaml:3: model_file.url"),
      std::string::npos);
  EXPECT_EQ(file_error("model: m\nmodel_file:\n  urll: x\n")
                .find("agent.yaml:3: model_file.urll: unknown key"),
            0u);
  EXPECT_EQ(file_error("model: m\nengine:\n  kind: llama-server\n  command: [x, '{model_path}']\n"),
            "agent.yaml:4: engine.command: uses {model_path} but model_file is not set");
}

TEST(AgentPhoneConfig, Tunnel) {
  AgentConfig c = load(
      "model: m\ngateway:\n  url: http://gw:9090\n  token_env: T\ntunnel:\n  kind: acurast\n"
      "  key_env: MY_KEY\n  relays: [r1.example:4433, 'r2.example:4433']\n  domain_suffix: "
      "canary.acu.run\n  poll_interval: 250ms\n");
  EXPECT_EQ(c.tunnel.kind, TunnelKind::acurast);
  EXPECT_EQ(c.tunnel.key_env, "MY_KEY");
  EXPECT_EQ(c.tunnel.relays, (std::vector<std::string>{"r1.example:4433", "r2.example:4433"}));
  EXPECT_EQ(c.tunnel.domain_suffix, "canary.acu.run");
  EXPECT_EQ(c.tunnel.poll_interval.count(), 250);
  EXPECT_TRUE(c.public_url.empty());  // the tunnel gives it
}

TEST(AgentPhoneConfig, TunnelErrors) {
  EXPECT_EQ(file_error("model: m\ntunnel:\n  kind: cloudflare\n").find("agent.yaml:3: tunnel.kind"),
            0u);
  EXPECT_EQ(file_error("model: m\npublic_url: https://a.acu.run\ntunnel:\n  kind: acurast\n"),
            "agent.yaml:2: public_url: not with tunnel.kind acurast: the tunnel gives the phone's "
            "public URL");
  EXPECT_EQ(file_error("model: m\ntunnel:\n  relays: [r:1]\n"),
            "agent.yaml:3: tunnel.relays: only with tunnel.kind acurast");
  EXPECT_EQ(file_error("model: m\ntunnel:\n  kind: acurast\n  relays: []\n")
                .find("agent.yaml:4: tunnel.relays: expected at least one relay"),
            0u);
  EXPECT_EQ(file_error("model: m\ntunnel:\n  kind: acurast\n  domain_suffix: 'a..b'\n")
                .find("agent.yaml:4: tunnel.domain_suffix: expected a domain"),
            0u);
  EXPECT_EQ(file_error("model: m\ntunnel:\n  kind: acurast\n  poll_interval: 10ms\n"),
            "agent.yaml:4: tunnel.poll_interval: must be at least 100ms");
  EXPECT_EQ(file_error("model: m\ngateway:\n  url: http://gw:9090\n  token_env: T\n")
                .find("needs public_url"),
            std::string("agent.yaml:3: gateway.url: ").size());
}

TEST(AgentPhoneConfig, DeploymentWindow) {
  EXPECT_EQ(load("model: m\ndeployment:\n  window: 90m\n").deployment.window.count(),
            90LL * 60 * 1000);
  EXPECT_EQ(
      file_error("model: m\ndeployment:\n  window: 0s\n").find("agent.yaml:3: deployment.window"),
      0u);
}

TEST(AgentPhoneConfig, Flags) {
  auto r = parse_command_line({"--model", "m", "--tunnel", "acurast", "--tunnel-relays", "a:1,b:2",
                               "--model-url", "http://h/q.gguf", "--model-sha256", kSha,
                               "--model-path", "q.gguf", "--deployment-window", "2h"},
                              "9");
  auto* inv = std::get_if<Invocation>(&r);
  ASSERT_NE(inv, nullptr) << std::get<CliExit>(r).text;
  EXPECT_EQ(inv->config.tunnel.relays, (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_EQ(inv->config.model_file.path, "q.gguf");
  EXPECT_EQ(inv->config.deployment.window.count(), 2LL * 3600 * 1000);
}

}  // namespace
}  // namespace fg::agent
