#include "orchestrator/fleet/reload_plan.hpp"

#include <gtest/gtest.h>

#include <string>

namespace fg::fleet {
namespace {

using Kind = ReloadPlan::LocalAction::Kind;

config::ModelConfig model(std::string name,
                          std::vector<std::pair<std::string, int>> endpoints = {}) {
  config::ModelConfig m;
  m.name = std::move(name);
  for (const auto& [url, slots] : endpoints) {
    config::Endpoint e;
    e.url = *net::parse_url(url);
    e.slots = static_cast<std::uint32_t>(slots);
    m.endpoints.push_back(e);
  }
  return m;
}

config::LocalFleetConfig local(std::uint32_t count, std::string profile = "fast-test",
                               double time_scale = 1.0, std::uint32_t slots = 0) {
  config::LocalFleetConfig l;
  l.count = count;
  l.profile = std::move(profile);
  l.time_scale = time_scale;
  l.slots = slots;
  return l;
}

config::Config with(std::vector<config::ModelConfig> models) {
  config::Config c;
  c.models = std::move(models);
  return c;
}

RunningFleet running_locals(const std::string& name, std::uint32_t count,
                            const config::LocalFleetConfig& settings) {
  RunningFleet old;
  old.models = {name};
  for (std::uint32_t i = 0; i < count; ++i) {
    old.locals.push_back({name, i, settings});
  }
  return old;
}

std::string describe(const std::vector<ReloadPlan::LocalAction>& actions) {
  std::string out;
  for (const auto& a : actions) {
    out += std::string(a.kind == Kind::start  ? "start "
                       : a.kind == Kind::stop ? "stop "
                                              : "restart ") +
           a.model + "#" + std::to_string(a.index) + " ";
  }
  return out;
}

TEST(PlanReload, NothingChangesNothing) {
  RunningFleet old;
  old.models = {"m"};
  old.statics.push_back({1, "m", "http://a:1", 2, false});
  auto next = with({model("m", {{"http://a:1", 2}})});
  auto plan = plan_reload(old, next);
  EXPECT_TRUE(plan.empty());
  ASSERT_EQ(plan.keep_statics.size(), 1u);
  EXPECT_EQ(plan.keep_statics[0].slots, 2u);
  EXPECT_FALSE(plan.keep_statics[0].restore);
}

TEST(PlanReload, ModelsAddedAndRemoved) {
  RunningFleet old;
  old.models = {"a", "b"};
  auto plan = plan_reload(old, with({model("b"), model("c")}));
  EXPECT_EQ(plan.add_models, std::vector<std::string>{"c"});
  EXPECT_EQ(plan.remove_models, std::vector<std::string>{"a"});
}

TEST(PlanReload, StaticEndpointsAddedRemovedResizedAndMoved) {
  RunningFleet old;
  old.models = {"m", "n"};
  old.statics.push_back({1, "m", "http://keep:1", 1, false});
  old.statics.push_back({2, "m", "http://gone:1", 1, false});
  old.statics.push_back({3, "m", "http://moves:1", 1, false});
  auto next = with({model("m", {{"http://keep:1", 4}, {"http://new:1", 1}}),
                    model("n", {{"http://moves:1", 1}})});
  auto plan = plan_reload(old, next);
  EXPECT_EQ(plan.remove_statics, (std::vector<scheduling::ReplicaId>{2, 3}));
  ASSERT_EQ(plan.keep_statics.size(), 1u);
  EXPECT_EQ(plan.keep_statics[0].id, 1u);
  EXPECT_EQ(plan.keep_statics[0].slots, 4u);
  ASSERT_EQ(plan.add_statics.size(), 2u);
  EXPECT_EQ(plan.add_statics[0].url.to_string(), "http://moves:1");
  EXPECT_EQ(plan.add_statics[0].model, "n");
  EXPECT_EQ(plan.add_statics[1].url.to_string(), "http://new:1");
}

TEST(PlanReload, AnEndpointListedAgainBeforeItsRemovalEndedIsRestored) {
  RunningFleet old;
  old.models = {"m"};
  old.statics.push_back({1, "m", "http://a:1", 1, true});
  auto plan = plan_reload(old, with({model("m", {{"http://a:1", 1}})}));
  ASSERT_EQ(plan.keep_statics.size(), 1u);
  EXPECT_TRUE(plan.keep_statics[0].restore);
  EXPECT_TRUE(plan.add_statics.empty());
  // Still unlisted: nothing more to do, its removal goes on.
  EXPECT_TRUE(plan_reload(old, with({model("m")})).remove_statics.empty());
}

TEST(PlanReload, AStaticEndpointIsNotAddedOverAnAgentsRegistration) {
  RunningFleet old;
  old.models = {"m"};
  old.other_urls = {"http://phone:1"};
  auto plan = plan_reload(old, with({model("m", {{"http://phone:1", 1}})}));
  EXPECT_TRUE(plan.add_statics.empty());
  EXPECT_EQ(plan.shadowed_statics, std::vector<std::string>{"http://phone:1"});
}

TEST(PlanReload, StaticsOfARemovedModelGoWithIt) {
  RunningFleet old;
  old.models = {"m"};
  old.statics.push_back({1, "m", "http://a:1", 1, false});
  auto plan = plan_reload(old, with({model("n")}));
  EXPECT_EQ(plan.remove_models, std::vector<std::string>{"m"});
  EXPECT_TRUE(plan.remove_statics.empty());
}

TEST(PlanReload, LocalAgentsStartForANewLocalFleet) {
  RunningFleet old;
  old.models = {"m"};
  auto m = model("m");
  m.local = local(2);
  auto plan = plan_reload(old, with({m}));
  EXPECT_EQ(describe(plan.locals), "start m#0 start m#1 ");
}

TEST(PlanReload, ACountChangeStartsOrStopsTheDifference) {
  const auto settings = local(3);
  auto m = model("m");
  m.local = local(5);
  EXPECT_EQ(describe(plan_reload(running_locals("m", 3, settings), with({m})).locals),
            "start m#3 start m#4 ");
  m.local = local(1);
  EXPECT_EQ(describe(plan_reload(running_locals("m", 3, settings), with({m})).locals),
            "stop m#1 stop m#2 ");
}

TEST(PlanReload, ChangedSettingsRestartEveryAgent) {
  const auto settings = local(2);
  for (auto changed : {local(2, "qwen3.5-4b/snapdragon-8-elite"), local(2, "fast-test", 10.0),
                       local(2, "fast-test", 1.0, 3)}) {
    auto m = model("m");
    m.local = changed;
    EXPECT_EQ(describe(plan_reload(running_locals("m", 2, settings), with({m})).locals),
              "restart m#0 restart m#1 ");
  }
  auto m = model("m");
  m.local = local(3, "qwen3.5-4b/snapdragon-8-elite");
  EXPECT_EQ(describe(plan_reload(running_locals("m", 2, settings), with({m})).locals),
            "restart m#0 restart m#1 start m#2 ");
}

TEST(PlanReload, ARemovedModelOrLocalSectionStopsItsAgents) {
  const auto settings = local(2);
  EXPECT_EQ(describe(plan_reload(running_locals("m", 2, settings), with({model("n")})).locals),
            "stop m#0 stop m#1 ");
  EXPECT_EQ(describe(plan_reload(running_locals("m", 2, settings), with({model("m")})).locals),
            "stop m#0 stop m#1 ");
}

TEST(PlanReload, SameAgentSettings) {
  EXPECT_TRUE(same_agent_settings(local(1), local(7)));  // the count is not a setting
  EXPECT_FALSE(same_agent_settings(local(1), local(1, "other")));
}

}  // namespace
}  // namespace fg::fleet
