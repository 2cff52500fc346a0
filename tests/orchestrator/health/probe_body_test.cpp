#include "orchestrator/health/probe_body.hpp"

#include <gtest/gtest.h>

#include <string>

namespace fg::health {
namespace {

TEST(ProbeBody, AnAgentsHealthNamesItsModelAndSlots) {
  auto b = parse_probe_body(R"({"status":"ok","model":"m","slots_total":4,"slots_idle":3})", "m");
  EXPECT_EQ(b.model, ModelCheck::match);
  EXPECT_EQ(b.slots_total, 4u);
  EXPECT_EQ(b.slots_idle, 3u);
}

TEST(ProbeBody, AnAgentServingAnotherModelIsAMismatch) {
  auto b = parse_probe_body(R"({"status":"ok","model":"qwen3.5-4b"})", "qwen3.5-9b");
  EXPECT_EQ(b.model, ModelCheck::mismatch);
  EXPECT_EQ(b.served, "qwen3.5-4b");
}

TEST(ProbeBody, ModelsListMustContainTheConfiguredModel) {
  const char* list = R"({"object":"list","data":[{"id":"a"},{"id":"m"}]})";
  EXPECT_EQ(parse_probe_body(list, "m").model, ModelCheck::match);
  auto other = parse_probe_body(list, "z");
  EXPECT_EQ(other.model, ModelCheck::mismatch);
  EXPECT_EQ(other.served, "a, m");
  auto many = parse_probe_body(R"({"data":[{"id":"a"},{"id":"b"},{"id":"c"},{"id":"d"}]})", "z");
  EXPECT_EQ(many.served, "a, b, c, ... (4 models)");
}

TEST(ProbeBody, NoModelNamedLeavesItUnverified) {
  EXPECT_EQ(parse_probe_body(R"({"status":"ok"})", "m").model, ModelCheck::unverified);
  EXPECT_EQ(parse_probe_body("OK", "m").model, ModelCheck::unverified);
  EXPECT_EQ(parse_probe_body("", "m").model, ModelCheck::unverified);
  EXPECT_EQ(parse_probe_body(R"({"data":[]})", "m").model, ModelCheck::unverified);
  EXPECT_EQ(parse_probe_body(R"({"data":[{"name":"x"},7]})", "m").model, ModelCheck::unverified);
  EXPECT_EQ(parse_probe_body(R"({"model":7})", "m").model, ModelCheck::unverified);
}

TEST(ProbeBody, SlotReportsOutOfRangeAreIgnored) {
  auto b = parse_probe_body(R"({"slots_total":0,"slots_idle":5000})", "m");
  EXPECT_FALSE(b.slots_total);
  EXPECT_FALSE(b.slots_idle);
  EXPECT_FALSE(parse_probe_body(R"({"slots_total":-2})", "m").slots_total);
}

TEST(ProbeBody, DeepOrLongBodiesAreHarmless) {
  const std::string deep = "{\"model\":" + std::string(100000, '[') + "}";
  EXPECT_EQ(parse_probe_body(deep, "m").model, ModelCheck::unverified);
  auto b = parse_probe_body("{\"model\":\"" + std::string(1000, 'x') + "\"}", "m");
  EXPECT_EQ(b.model, ModelCheck::mismatch);
  EXPECT_LT(b.served.size(), 80u);
}

}  // namespace
}  // namespace fg::health
