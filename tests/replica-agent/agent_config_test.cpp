#include "replica-agent/config/agent_config.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace fg::agent {
namespace {

AgentConfig load(const std::string& yaml, Origins* origins = nullptr) {
  AgentConfig config;
  load_agent_config_string(yaml, "agent.yaml", config, origins);
  return config;
}

std::string error_of(const std::string& yaml) {
  try {
    Origins origins;
    AgentConfig config = load(yaml, &origins);
    validate_agent_config(config, origins);
  } catch (const AgentConfigError& e) {
    return e.what();
  }
  return "";
}

// The error starts with "agent.yaml:<line>: <key>: " and contains what.
::testing::AssertionResult fails_with(const std::string& yaml, int line, const std::string& key,
                                      const std::string& what = "") {
  const std::string error = error_of(yaml);
  if (error.empty()) {
    return ::testing::AssertionFailure() << "loaded without error:\n" << yaml;
  }
  const std::string prefix = "agent.yaml:" + std::to_string(line) + ": " + key + ": ";
  if (error.rfind(prefix, 0) != 0) {
    return ::testing::AssertionFailure()
           << "expected prefix '" << prefix << "', got '" << error << "'";
  }
  if (error.find(what) == std::string::npos) {
    return ::testing::AssertionFailure() << "expected '" << what << "' in '" << error << "'";
  }
  return ::testing::AssertionSuccess();
}

// A temporary file holding text, removed at the end of the test.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    char name[] = "/tmp/agent-config-test-XXXXXX";
    int fd = mkstemp(name);
    path_ = name;
    ::close(fd);
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::variant<Invocation, CliExit> run(std::vector<std::string> args) {
  return parse_command_line(args, "9.9.9");
}

const CliExit& exit_of(const std::variant<Invocation, CliExit>& r) {
  static const CliExit none{-1, "(no exit: it would serve)"};
  const auto* e = std::get_if<CliExit>(&r);
  return e != nullptr ? *e : none;
}

TEST(AgentConfigParse, DefaultsWithoutAFile) {
  AgentConfig c;
  EXPECT_EQ(c.listen.to_string(), "127.0.0.1:8081");
  EXPECT_EQ(c.engine.kind, EngineKind::sim);
  EXPECT_EQ(c.engine.profile, "fast-test");
  EXPECT_FALSE(c.slots.has_value());
  EXPECT_EQ(c.drain_timeout.count(), 30000);
  EXPECT_FALSE(c.gateway.enabled());
  EXPECT_FALSE(c.tls.enabled());
}

TEST(AgentConfigParse, EveryKeyIsRead) {
  const AgentConfig c = load(
      "listen: 0.0.0.0:9001\n"
      "model: qwen3.5-9b-fraud\n"
      "slots: 3\n"
      "engine:\n"
      "  kind: sim\n"
      "  profile: qwen3.5-9b/snapdragon-8-elite\n"
      "  time_scale: 10\n"
      "  jitter: 0.1\n"
      "  fail_rate: 0.05\n"
      "  seed: 42\n"
      "public_url: https://a1b2c3.acu.run/\n"
      "gateway: {url: \"https://gw.example:9090\", token_env: FLEETGATE_AGENT_TOKEN}\n"
      "tls: {cert: a.pem, key: a.key}\n"
      "api_key_env: PHONE_KEY\n"
      "log: {level: debug, format: text}\n"
      "drain_timeout: 90s\n");
  EXPECT_EQ(c.listen.to_string(), "0.0.0.0:9001");
  EXPECT_EQ(c.model, "qwen3.5-9b-fraud");
  EXPECT_EQ(c.slots, 3u);
  EXPECT_EQ(c.engine.profile, "qwen3.5-9b/snapdragon-8-elite");
  EXPECT_DOUBLE_EQ(c.engine.time_scale, 10);
  EXPECT_DOUBLE_EQ(c.engine.jitter, 0.1);
  EXPECT_DOUBLE_EQ(c.engine.fail_rate, 0.05);
  EXPECT_EQ(c.engine.seed, 42u);
  EXPECT_EQ(c.public_url, "https://a1b2c3.acu.run");  // normalised
  EXPECT_EQ(c.gateway.url, "https://gw.example:9090");
  EXPECT_EQ(c.gateway.token_env, "FLEETGATE_AGENT_TOKEN");
  EXPECT_EQ(c.tls.cert, "a.pem");
  EXPECT_EQ(c.tls.key, "a.key");
  EXPECT_EQ(c.api_key_env, "PHONE_KEY");
  EXPECT_EQ(c.log_level, log::Level::debug);
  EXPECT_EQ(c.log_format, "text");
  EXPECT_EQ(c.drain_timeout.count(), 90000);
}

TEST(AgentConfigParse, ProxyEngineKeys) {
  const AgentConfig c = load(
      "model: m\n"
      "engine:\n"
      "  kind: llama-server\n"
      "  url: http://127.0.0.1:8085\n"
      "  command: [llama-server, -m, /models/q.gguf, --port, \"8085\"]\n");
  EXPECT_EQ(c.engine.kind, EngineKind::llama_server);
  EXPECT_EQ(c.engine.url.to_string(), "http://127.0.0.1:8085");
  EXPECT_EQ(c.engine.command,
            (std::vector<std::string>{"llama-server", "-m", "/models/q.gguf", "--port", "8085"}));
  EXPECT_EQ(load("engine: {kind: openai}\n").engine.kind, EngineKind::openai);
  // A command written as one string is split on spaces.
  EXPECT_EQ(load("engine: {kind: llama-server, command: \"llama-server -m x.gguf\"}\n")
                .engine.command.size(),
            3u);
}

TEST(AgentConfigParse, EmptyValuesMeanUnset) {
  const AgentConfig c = load(
      "model: m\n"
      "tls: {cert: \"\", key: \"\"}\n"
      "api_key_env: \"\"\n"
      "gateway:\n"
      "engine:\n");
  EXPECT_FALSE(c.slots.has_value());
  EXPECT_FALSE(c.tls.enabled());
  EXPECT_TRUE(c.api_key_env.empty());
  EXPECT_FALSE(c.gateway.enabled());
  EXPECT_EQ(error_of("model: m\ntls: {cert: \"\", key: \"\"}\napi_key_env: \"\"\n"), "");
  // A number needs its value (as in the gateway's YAML): leave the key out for the default.
  EXPECT_TRUE(fails_with("model: m\nslots:\n", 2, "slots", "expected a whole number, got nothing"));
}

TEST(AgentConfigParse, EmptyFileSetsNothing) {
  AgentConfig c = load("");
  EXPECT_TRUE(c.model.empty());
  c = load("# only a comment\n");
  EXPECT_TRUE(c.model.empty());
}

TEST(AgentConfigErrors, UnknownKeysNameLineAndSuggest) {
  EXPECT_TRUE(fails_with("model: m\nslot: 2\n", 2, "slot", "unknown key; did you mean 'slots'?"));
  EXPECT_TRUE(fails_with("model: m\nengine:\n  kind: sim\n  auto_tune: true\n", 4,
                         "engine.auto_tune", "unknown key; did you mean 'autotune'?"));
  EXPECT_TRUE(fails_with("model: m\ngateway:\n  url: http://g:1\n  heartbeat: 5s\n", 4,
                         "gateway.heartbeat", "unknown key"));
  EXPECT_TRUE(fails_with("model: m\nlog: {lvl: debug}\n", 2, "log.lvl", "did you mean 'level'"));
}

TEST(AgentConfigErrors, DuplicateKey) {
  EXPECT_TRUE(fails_with("model: m\nslots: 1\nslots: 2\n", 3, "slots", "duplicate key"));
}

TEST(AgentConfigErrors, SyntaxAndShape) {
  EXPECT_TRUE(fails_with("model: [unclosed\n", 2, "(syntax)"));
  EXPECT_TRUE(fails_with("- a\n- b\n", 1, "(root)", "expected a map"));
  EXPECT_TRUE(fails_with("model: m\nengine: sim\n", 2, "engine", "expected a map"));
  EXPECT_TRUE(fails_with("model: m\n---\nmodel: n\n", 3, "(root)", "one YAML document"));
  EXPECT_TRUE(fails_with("model: [a, b]\n", 1, "model", "expected a string, got a list"));
}

TEST(AgentConfigErrors, BadValuesNameTheKey) {
  EXPECT_TRUE(fails_with("model: m\nlisten: nowhere\n", 2, "listen", "host:port"));
  EXPECT_TRUE(fails_with("model: m\nslots: 0\n", 2, "slots", "between 1 and 256"));
  EXPECT_TRUE(fails_with("model: m\nslots: two\n", 2, "slots", "whole number"));
  EXPECT_TRUE(fails_with("model: m\nengine:\n  kind: mnn\n", 3, "engine.kind",
                         "sim, llama-server or openai"));
  EXPECT_TRUE(fails_with("model: m\nengine: {profile: pixel}\n", 2, "engine.profile",
                         "unknown simulator profile"));
  EXPECT_TRUE(
      fails_with("model: m\nengine:\n  time_scale: 0\n", 3, "engine.time_scale", "greater than 0"));
  EXPECT_TRUE(
      fails_with("model: m\nengine:\n  jitter: 2\n", 3, "engine.jitter", "between 0 and 0.95"));
  EXPECT_TRUE(
      fails_with("model: m\nengine:\n  fail_rate: -1\n", 3, "engine.fail_rate", "between 0 and 1"));
  EXPECT_TRUE(
      fails_with("model: m\nengine:\n  seed: -3\n", 3, "engine.seed", "must not be negative"));
  EXPECT_TRUE(fails_with("model: m\nengine:\n  kind: openai\n  url: ftp://x\n", 4, "engine.url",
                         "http(s) URL"));
  EXPECT_TRUE(fails_with("model: m\nengine:\n  kind: llama-server\n  command: {a: 1}\n", 4,
                         "engine.command", "list"));
  EXPECT_TRUE(
      fails_with("model: m\napi_key_env: 1KEY\n", 2, "api_key_env", "environment variable name"));
  EXPECT_TRUE(fails_with("model: m\nlog:\n  level: loud\n", 3, "log.level", "debug, info"));
  EXPECT_TRUE(
      fails_with("model: m\ndrain_timeout: 30\n", 2, "drain_timeout", "add a unit: ms, s, m or h"));
  EXPECT_TRUE(fails_with("model: m\nlisten:\n", 2, "listen",
                         "host:port such as 0.0.0.0:8081, got nothing"));
}

TEST(AgentConfigParse, SimPromptCacheKeys) {
  const AgentConfig c =
      load("model: m\nengine:\n  slot_prompt_similarity: 0.5\n  host_cache_tokens: 100000\n");
  EXPECT_DOUBLE_EQ(c.engine.slot_prompt_similarity, 0.5);
  EXPECT_EQ(c.engine.host_cache_tokens, 100000u);
  const AgentConfig defaults = load("model: m\n");
  EXPECT_DOUBLE_EQ(defaults.engine.slot_prompt_similarity, 0.1);  // llama.cpp's default
  EXPECT_EQ(defaults.engine.host_cache_tokens, 0u);
  EXPECT_TRUE(fails_with("model: m\nengine:\n  slot_prompt_similarity: 1.5\n", 3,
                         "engine.slot_prompt_similarity", "between 0 and 1"));
  EXPECT_TRUE(fails_with("model: m\nengine:\n  host_cache_tokens: lots\n", 3,
                         "engine.host_cache_tokens", "whole number"));
  EXPECT_TRUE(fails_with("model: m\nengine:\n  kind: llama-server\n  host_cache_tokens: 5\n", 4,
                         "engine.host_cache_tokens", "only for the sim engine"));
}

TEST(AgentConfigValidate, ModelIsRequired) {
  EXPECT_TRUE(fails_with("slots: 1\n", 1, "model", "missing"));
}

TEST(AgentConfigValidate, EngineKeysMustFitTheKind) {
  EXPECT_TRUE(fails_with("model: m\nengine:\n  kind: sim\n  url: http://127.0.0.1:8080\n", 4,
                         "engine.url", "only for the llama-server and openai engines"));
  EXPECT_TRUE(fails_with("model: m\nengine:\n  kind: llama-server\n  time_scale: 2\n", 4,
                         "engine.time_scale", "only for the sim engine"));
  EXPECT_TRUE(fails_with("model: m\nengine:\n  kind: openai\n  command: [x]\n", 4, "engine.command",
                         "only for the llama-server engine"));
}

TEST(AgentConfigValidate, TlsNeedsBothFiles) {
  EXPECT_TRUE(fails_with("model: m\ntls:\n  cert: a.pem\n", 3, "tls.cert", "needs tls.key"));
  EXPECT_TRUE(fails_with("model: m\ntls:\n  key: a.key\n", 3, "tls.key", "needs tls.cert"));
}

TEST(AgentConfigValidate, GatewayNeedsPublicUrlAndToken) {
  EXPECT_TRUE(fails_with("model: m\ngateway:\n  url: http://gw:9090\n  token_env: T\n", 3,
                         "gateway.url", "needs public_url"));
  EXPECT_TRUE(fails_with("model: m\npublic_url: http://p:1\ngateway:\n  url: http://gw:9090\n", 4,
                         "gateway.url", "needs gateway.token_env"));
  EXPECT_EQ(error_of("model: m\npublic_url: http://p:1\ngateway: {url: http://gw:9090, "
                     "token_env: T}\n"),
            "");
}

TEST(AgentConfigCommandLine, FlagsAloneServe) {
  auto r = run({"--model", "m", "--listen=127.0.0.1:0", "--slots", "2", "--profile",
                "qwen3.5-0.8b/snapdragon-8-elite", "--time-scale", "5", "--seed", "7",
                "--drain-timeout", "1.5"});
  ASSERT_TRUE(std::holds_alternative<Invocation>(r)) << exit_of(r).text;
  const auto& c = std::get<Invocation>(r).config;
  EXPECT_EQ(c.model, "m");
  EXPECT_EQ(c.listen.port, 0);
  EXPECT_EQ(c.slots, 2u);
  EXPECT_DOUBLE_EQ(c.engine.time_scale, 5);
  EXPECT_EQ(c.engine.seed, 7u);
  EXPECT_EQ(c.drain_timeout.count(), 1500);  // a bare number of seconds is fine on a flag
  EXPECT_EQ(run({"--model", "m", "--drain-timeout", "250ms"}).index(), 0u);
}

TEST(AgentConfigCommandLine, FlagsOverrideTheFile) {
  TempFile file("model: from-file\nslots: 1\nengine: {kind: sim, time_scale: 2}\n");
  auto r = run({"--config", file.path(), "--slots", "4", "--model", "from-flag"});
  ASSERT_TRUE(std::holds_alternative<Invocation>(r)) << exit_of(r).text;
  const auto& c = std::get<Invocation>(r).config;
  EXPECT_EQ(c.model, "from-flag");
  EXPECT_EQ(c.slots, 4u);
  EXPECT_DOUBLE_EQ(c.engine.time_scale, 2);  // from the file, not overridden
}

TEST(AgentConfigCommandLine, ProxyEngineGetsTheDefaultUrl) {
  auto r = run({"--model", "m", "--engine", "llama-server"});
  ASSERT_TRUE(std::holds_alternative<Invocation>(r)) << exit_of(r).text;
  EXPECT_EQ(std::get<Invocation>(r).config.engine.url.to_string(), "http://127.0.0.1:8080");
  r = run({"--model", "m", "--engine", "llama-server", "--engine-command",
           "llama-server -m q.gguf --port 8080"});
  ASSERT_TRUE(std::holds_alternative<Invocation>(r)) << exit_of(r).text;
  EXPECT_EQ(std::get<Invocation>(r).config.engine.command.size(), 5u);
}

TEST(AgentConfigCommandLine, BadFlagsExit2NamingTheFlag) {
  EXPECT_EQ(exit_of(run({"--model", "m", "--slots", "0"})).code, 2);
  EXPECT_NE(exit_of(run({"--model", "m", "--slots", "0"})).text.find("--slots: must be between"),
            std::string::npos);
  EXPECT_EQ(exit_of(run({"--model", "m", "--bogus"})).code, 2);
  EXPECT_EQ(exit_of(run({"--model"})).code, 2);
  EXPECT_EQ(exit_of(run({})).code, 2);  // no model
  EXPECT_NE(exit_of(run({})).text.find("--model"), std::string::npos);
  auto sim_url = exit_of(run({"--model", "m", "--engine-url", "http://127.0.0.1:1"}));
  EXPECT_EQ(sim_url.code, 2);
  EXPECT_NE(sim_url.text.find("--engine-url: only for"), std::string::npos);
}

TEST(AgentConfigCommandLine, BadFileExits1WithFileLineAndKey) {
  TempFile file("model: m\nengine:\n  profile: nope\n");
  auto e = exit_of(run({"--config", file.path()}));
  EXPECT_EQ(e.code, 1);
  EXPECT_NE(e.text.find(file.path() + ":3: engine.profile: unknown simulator profile"),
            std::string::npos)
      << e.text;
  auto missing = exit_of(run({"--config", "/nonexistent/agent.yaml"}));
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.text.find("cannot read"), std::string::npos);
}

TEST(AgentConfigCommandLine, CheckExits0Or1) {
  TempFile good("model: m\n");
  auto ok = exit_of(run({"--config", good.path(), "--check"}));
  EXPECT_EQ(ok.code, 0);
  EXPECT_NE(ok.text.find("is valid"), std::string::npos);
  TempFile bad("model: m\nslots: 999\n");
  EXPECT_EQ(exit_of(run({"--check", "--config", bad.path()})).code, 1);
  // Under --check a bad flag is an invalid configuration too.
  EXPECT_EQ(exit_of(run({"--check", "--config", good.path(), "--slots", "x"})).code, 1);
  // A file without a model is completed by the flag.
  TempFile no_model("slots: 1\n");
  EXPECT_EQ(exit_of(run({"--check", "--config", no_model.path(), "--model", "m"})).code, 0);
  auto missing = exit_of(run({"--check", "--config", no_model.path()}));
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.text.find(no_model.path() + ":1: model: missing"), std::string::npos)
      << missing.text;
}

TEST(AgentConfigCommandLine, HelpAndVersion) {
  EXPECT_EQ(exit_of(run({"--help"})).code, 0);
  EXPECT_NE(exit_of(run({"--help"})).text.find("--config FILE"), std::string::npos);
  EXPECT_EQ(exit_of(run({"--version"})).text, "fleetgate-agent 9.9.9\n");
}

}  // namespace
}  // namespace fg::agent

namespace fg::agent {
namespace {

TEST(AgentConfigExample, TheCommentedExampleIsValid) {
  AgentConfig c;
  Origins origins;
  load_agent_config_file(std::string(FG_SOURCE_DIR) + "/replica-agent/agent.example.yaml", c,
                         &origins);
  validate_agent_config(c, origins);
  EXPECT_EQ(c.model, "qwen3.5-9b-fraud");
  EXPECT_EQ(c.engine.profile, "qwen3.5-9b/snapdragon-8-elite");
  EXPECT_EQ(c.listen.to_string(), "0.0.0.0:8081");
}

}  // namespace
}  // namespace fg::agent
