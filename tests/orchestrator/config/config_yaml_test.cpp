// The gateway's configuration on the shared YAML layer (common/config): the rules it now has in
// common with the agent's, and hostile files.
#include "orchestrator/config/config.hpp"

#include <gtest/gtest.h>

#include <string>

namespace fg::config {
namespace {

constexpr const char* kModels = "models:\n  - name: m\n";

std::string error_of(const std::string& yaml) {
  try {
    load_config_string(yaml, "t.yaml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigYamlRules, BooleansAreTrueOrFalse) {
  EXPECT_FALSE(
      load_config_string(std::string(kModels) + "metrics: {per_replica: False}\n", "t.yaml")
          .metrics.per_replica);
  EXPECT_EQ(error_of(std::string(kModels) + "metrics:\n  per_replica: yes\n"),
            "t.yaml:4: metrics.per_replica: expected true or false, got \"yes\"");
  EXPECT_EQ(error_of(std::string(kModels) + "metrics:\n  per_replica: off\n"),
            "t.yaml:4: metrics.per_replica: expected true or false, got \"off\"");
}

TEST(ConfigYamlRules, NumbersForTimeScale) {
  auto local = [](const std::string& scale) {
    return "models:\n  - name: m\n    local: {time_scale: " + scale + "}\n";
  };
  EXPECT_DOUBLE_EQ(load_config_string(local("1e1"), "t.yaml").models[0].local->time_scale, 10);
  EXPECT_DOUBLE_EQ(load_config_string(local("0.5"), "t.yaml").models[0].local->time_scale, 0.5);
  for (const char* bad : {"+2", ".inf", ".nan", "0x10", "fast", "2000000"}) {
    EXPECT_EQ(error_of(local(bad)),
              "t.yaml:3: models[0].local.time_scale: expected a number greater than 0 (10 runs "
              "the profile ten times faster), got \"" +
                  std::string(bad) + "\"")
        << bad;
  }
}

TEST(ConfigYamlRules, TypedValuesSayWhatTheyExpect) {
  EXPECT_EQ(error_of(std::string(kModels) + "server:\n  listen:\n"),
            "t.yaml:4: server.listen: expected host:port such as 127.0.0.1:8080, got nothing");
  EXPECT_EQ(error_of(std::string(kModels) + "routing:\n  queue_timeout: 1.5s\n"),
            "t.yaml:4: routing.queue_timeout: expected a duration such as 600s, got \"1.5s\" "
            "(whole numbers only: write 1500ms)");
  EXPECT_EQ(error_of("models:\n  - name: m\n    endpoints: [\"http://a b\"]\n"),
            "t.yaml:3: models[0].endpoints[0]: invalid URL \"http://a b\": URL must be printable "
            "ASCII without spaces (expected an http(s) URL such as https://a1b2c3.acu.run)");
  EXPECT_EQ(error_of("models:\n"), "t.yaml:1: models: at least one model is required");
  EXPECT_EQ(error_of(std::string(kModels) + "log:\n  level:\n"),
            "t.yaml:4: log.level: expected one of debug, info, warn, error, got nothing");
}

TEST(ConfigYamlRules, AliasesShareSettings) {
  const Config c = load_config_string(R"(health: &probe {interval: 10s, timeout: 2s}
models:
  - name: a
    health: *probe
  - name: b
    health: *probe
)",
                                      "t.yaml");
  EXPECT_EQ(c.models[1].health.interval, std::chrono::milliseconds(10'000));
}

TEST(ConfigYamlHostile, DeepNestingIsRefused) {
  const std::string deep = std::string(kModels) + "server: " + std::string(100'000, '[') +
                           std::string(100'000, ']') + "\n";
  EXPECT_EQ(error_of(deep),
            "t.yaml:3: (root): maps and lists nested deeper than 32 levels; a configuration "
            "needs a handful");
  std::string dashes = "models:\n";
  for (int i = 0; i < 20'000; ++i) {
    dashes += "- ";
  }
  EXPECT_EQ(error_of(dashes + "x\n").rfind("t.yaml:2: (root): maps and lists nested deeper", 0),
            0u);
}

TEST(ConfigYamlHostile, LoopsAreRefused) {
  EXPECT_EQ(error_of("models: &m\n  - name: a\n    endpoints: *m\n"),
            "t.yaml:3: (root): an alias inside the node it refers to (a loop)");
}

// A file holding only "," made yaml-cpp loop forever (fleetgate --check --config hung).
TEST(ConfigYamlHostile, ALoneCommaIsASyntaxError) {
  EXPECT_EQ(error_of(","), "t.yaml:1: (syntax): unexpected ',' where a value should start");
  EXPECT_EQ(error_of(std::string(kModels) + "---\n,"),
            "t.yaml:4: (syntax): unexpected ',' where a value should start");
}

}  // namespace
}  // namespace fg::config
