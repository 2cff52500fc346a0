// The agent's configuration on the shared YAML layer (common/config): a value means the same in
// the file and on the command line, the rules shared with the gateway, and hostile files.
#include "replica-agent/config/agent_config.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fg::agent {
namespace {

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

// The message after "<where>: " of a bad flag, or "" when it was accepted.
std::string flag_error(const std::string& flag, const std::string& value) {
  const auto r = parse_command_line({"--model", "m", flag, value}, "9.9.9");
  const auto* exit = std::get_if<CliExit>(&r);
  if (exit == nullptr) {
    return "";
  }
  const std::string prefix = "fleetgate-agent: " + flag + ": ";
  if (exit->code != 2 || exit->text.rfind(prefix, 0) != 0) {
    return "unexpected: " + exit->text;
  }
  return exit->text.substr(prefix.size(), exit->text.find('\n') - prefix.size());
}

// A file setting key ("engine.seed" becomes "engine:\n  seed: <value>\n") after the model.
std::string yaml_for(const std::string& key, const std::string& value) {
  const auto dot = key.rfind('.');
  if (dot == std::string::npos) {
    return "model: m\n" + key + ": " + value + "\n";
  }
  std::string text = "model: m\n";
  std::string indent;
  std::size_t start = 0;
  for (std::size_t next; (next = key.find('.', start)) != std::string::npos; start = next + 1) {
    text += indent + key.substr(start, next - start) + ":\n";
    indent += "  ";
  }
  return text + indent + key.substr(start) + ": " + value + "\n";
}

TEST(AgentConfigYaml, AFlagAndItsKeyReadValuesTheSameWay) {
  struct Case {
    const char* key;
    const char* flag;
    const char* value;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"slots", "--slots", "0", "must be between 1 and 256, got 0"},
      {"slots", "--slots", "1.5", "expected a whole number, got \"1.5\""},
      {"engine.seed", "--seed", "-3", "must not be negative, got -3"},
      {"engine.jitter", "--jitter", "2", "must be between 0 and 0.95, got 2"},
      {"engine.fail_rate", "--fail-rate", "+0.5", "expected a number, got \"+0.5\""},
      {"engine.time_scale", "--time-scale", "fast",
       "expected a number greater than 0 (10 runs the profile ten times faster), got \"fast\""},
      {"engine.time_scale", "--time-scale", "0",
       "expected a number greater than 0 (10 runs the profile ten times faster), got \"0\""},
      {"listen", "--listen", "nowhere",
       "expected host:port such as 0.0.0.0:8081, got \"nowhere\" (missing port)"},
      {"engine.kind", "--engine", "mnn", "expected sim, llama-server or openai, got \"mnn\""},
      {"engine.profile", "--profile", "pixel",
       "unknown simulator profile \"pixel\"; known: qwen3.5-9b/snapdragon-8-elite, "
       "qwen3.5-4b/snapdragon-8-elite, qwen3.5-0.8b/snapdragon-8-elite, fast-test"},
      {"api_key_env", "--api-key-env", "1KEY",
       "expected an environment variable name (letters, digits, '_'; not starting with a "
       "digit), got \"1KEY\""},
      {"log.level", "--log-level", "loud",
       "expected one of debug, info, warn, error, got \"loud\""},
      {"log.format", "--log-format", "xml", "expected one of auto, json, text, got \"xml\""},
      {"public_url", "--public-url", "ftp://x",
       "invalid URL \"ftp://x\": scheme must be http or https (expected an http(s) URL such as "
       "https://a1b2c3.acu.run)"},
      {"engine.autotune.prompt_tokens", "--autotune-prompt-tokens", "0",
       "must be between 1 and 65536, got 0"},
      {"drain_timeout", "--drain-timeout", "1.5s",
       "expected a duration such as 30s, got \"1.5s\" (whole numbers only: write 1500ms)"},
  };
  for (const Case& c : cases) {
    const std::string yaml = yaml_for(c.key, c.value);
    const std::string from_file = file_error(yaml);
    const std::string prefix = std::string(": ") + c.key + ": ";
    const auto at = from_file.find(prefix);
    ASSERT_NE(at, std::string::npos) << c.key << ": " << from_file << "\n" << yaml;
    EXPECT_EQ(from_file.substr(at + prefix.size()), c.message) << yaml;
    EXPECT_EQ(flag_error(c.flag, c.value), c.message) << c.flag;
  }
}

TEST(AgentConfigYaml, FlagsOnlyTakeBareSecondsForTheDrainTimeout) {
  auto r = parse_command_line({"--model", "m", "--drain-timeout", "2"}, "9.9.9");
  ASSERT_TRUE(std::holds_alternative<Invocation>(r));
  EXPECT_EQ(std::get<Invocation>(r).config.drain_timeout.count(), 2000);
  EXPECT_EQ(flag_error("--drain-timeout", "90000"), "must be between 0 and 86400, got 90000");
  EXPECT_NE(file_error("model: m\ndrain_timeout: 2\n").find("(add a unit: ms, s, m or h)"),
            std::string::npos);
}

TEST(AgentConfigYaml, KeysWithNoValue) {
  // Sections and lists are empty, strings are "", anything else needs its value.
  EXPECT_EQ(file_error("model: m\nengine:\ntls:\napi_key_env:\npublic_url:\n"), "");
  EXPECT_EQ(file_error("model: m\nengine:\n  kind: llama-server\n  command:\n"), "");
  EXPECT_EQ(file_error("model: m\nslots:\n"),
            "agent.yaml:2: slots: expected a whole number, got nothing");
  EXPECT_EQ(file_error("model: m\nengine:\n  kind:\n"),
            "agent.yaml:3: engine.kind: expected sim, llama-server or openai, got nothing");
  EXPECT_EQ(file_error("model:\n"), "agent.yaml:1: model: must not be empty");
  EXPECT_EQ(file_error("model: m\ndrain_timeout:\n"),
            "agent.yaml:2: drain_timeout: expected a duration such as 30s, got nothing");
}

TEST(AgentConfigYaml, ListItemsNameTheirIndex) {
  EXPECT_EQ(file_error("model: m\nengine:\n  kind: llama-server\n  command: [a, {b: 1}]\n"),
            "agent.yaml:4: engine.command[1]: expected a string, got a map");
}

TEST(AgentConfigYaml, OriginsPointAtTheValues) {
  AgentConfig config;
  Origins origins;
  load_agent_config_string("model: m\nengine:\n  kind: sim\n  seed: 4\n", "agent.yaml", config,
                           &origins);
  EXPECT_EQ(origins.at("model"), "agent.yaml:1");
  EXPECT_EQ(origins.at("engine.kind"), "agent.yaml:3");
  EXPECT_EQ(origins.at("engine.seed"), "agent.yaml:4");
}

TEST(AgentConfigYaml, DeepNestingAndLoopsAreRefused) {
  EXPECT_EQ(file_error("model: m\nengine: " + std::string(50'000, '{')),
            "agent.yaml:2: (root): maps and lists nested deeper than 32 levels; a configuration "
            "needs a handful");
  EXPECT_EQ(file_error("model: m\nengine: &e {autotune: *e}\n"),
            "agent.yaml:2: (root): an alias inside the node it refers to (a loop)");
}

// A file holding only "," made yaml-cpp loop forever (fleetgate-agent --check --config hung).
TEST(AgentConfigYaml, ALoneCommaIsASyntaxError) {
  EXPECT_EQ(file_error(","), "agent.yaml:1: (syntax): unexpected ',' where a value should start");
  EXPECT_EQ(file_error("model: m\n---\n,"),
            "agent.yaml:3: (syntax): unexpected ',' where a value should start");
}

}  // namespace
}  // namespace fg::agent
