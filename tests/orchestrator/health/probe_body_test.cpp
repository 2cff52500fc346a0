#include "orchestrator/health/probe_body.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

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

TEST(ProbeBody, AKeySpeltWithEscapesIsStillRead) {
  // The unparsed fast path must not miss a key written with \u escapes.
  auto b = parse_probe_body(R"({"mod\u0065l":"x","slots_\u0074otal":3})", "m");
  EXPECT_EQ(b.model, ModelCheck::mismatch);
  EXPECT_EQ(b.served, "x");
  EXPECT_EQ(b.slots_total, 3u);
}

TEST(ProbeBody, EveryKeyReadIsReadAlone) {
  // Each key the reader knows, as the only one in its body: none may be skipped unparsed.
  EXPECT_EQ(parse_probe_body(R"({"model":"m"})", "m").model, ModelCheck::match);
  EXPECT_EQ(parse_probe_body(R"({"data":[{"id":"m"}]})", "m").model, ModelCheck::match);
  EXPECT_EQ(parse_probe_body(R"({"slots_total":2})", "m").slots_total, 2u);
  EXPECT_EQ(parse_probe_body(R"({"slots_idle":1})", "m").slots_idle, 1u);
  EXPECT_EQ(parse_probe_body(R"({"prefill_tps":50.5})", "m").prefill_tps, 50.5);
  EXPECT_EQ(parse_probe_body(R"({"decode_tps":9})", "m").decode_tps, 9.0);
  EXPECT_EQ(parse_probe_body(R"({"host_prompt_cache_tokens":7})", "m").host_prompt_cache_tokens,
            7u);
  EXPECT_EQ(parse_probe_body(R"({"engine_starts":4})", "m").engine_starts, 4u);
}

void expect_same(const ProbeBody& a, const ProbeBody& b) {
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.served, b.served);
  EXPECT_EQ(a.slots_total, b.slots_total);
  EXPECT_EQ(a.slots_idle, b.slots_idle);
  EXPECT_EQ(a.prefill_tps, b.prefill_tps);
  EXPECT_EQ(a.decode_tps, b.decode_tps);
  EXPECT_EQ(a.host_prompt_cache_tokens, b.host_prompt_cache_tokens);
  EXPECT_EQ(a.engine_starts, b.engine_starts);
}

TEST(ProbeBodyMemo, SaysWhatParsingSaysForEveryBodyInTurn) {
  const std::string big = R"({"data":[)" + std::string(5000, ' ') + R"({"id":"m"}]})";
  const std::vector<std::pair<std::string, std::string>> probes = {
      {R"({"model":"m","slots_total":4,"slots_idle":4})", "m"},
      {R"({"model":"m","slots_total":4,"slots_idle":4})", "m"},  // the same: remembered
      {R"({"model":"m","slots_total":4,"slots_idle":3})", "m"},  // changed
      {R"({"model":"m","slots_total":4,"slots_idle":3})", "x"},  // another expected model
      {R"({"model":"m","slots_total":4,"slots_idle":3})", "m"},
      {big, "m"},  // over kMaxKept: parsed, not kept
      {big, "z"},
      {R"({"status":"ok"})", "m"},
      {"", "m"},
      {R"({"model":"m","slots_total":4,"slots_idle":3})", "m"},
  };
  ProbeBodyMemo memo;
  for (const auto& [body, model] : probes) {
    SCOPED_TRACE(body.substr(0, 60) + " / " + model);
    expect_same(memo.parse(body, model), parse_probe_body(body, model));
  }
}

TEST(ProbeAnswer, AMemoChangesNothingInTheOutcome) {
  ProbeBodyMemo memo;
  for (int i = 0; i < 2; ++i) {
    auto o = judge_answer(200, R"({"model":"m","slots_total":4,"slots_idle":1})", "m", &memo);
    EXPECT_EQ(o.result, ProbeResult::pass);
    EXPECT_EQ(o.model, ModelCheck::match);
    EXPECT_EQ(o.slots_idle, 1u);
    o = judge_answer(200, R"({"model":"q"})", "m", &memo);
    EXPECT_EQ(o.error, "serves model q, not m");
  }
}

TEST(ProbeAnswer, A200Passes) {
  auto o = judge_answer(200, R"({"status":"ok"})", "m");
  EXPECT_EQ(o.result, ProbeResult::pass);
  EXPECT_EQ(o.model, ModelCheck::unverified);
  EXPECT_EQ(o.error, "");
  o = judge_answer(200, R"({"model":"m","slots_total":4,"slots_idle":1,"engine_starts":2})", "m");
  EXPECT_EQ(o.result, ProbeResult::pass);
  EXPECT_EQ(o.model, ModelCheck::match);
  EXPECT_EQ(o.slots_total, 4u);
  EXPECT_EQ(o.slots_idle, 1u);
  EXPECT_EQ(o.engine_starts, 2u);
}

TEST(ProbeAnswer, OtherStatusesFail) {
  auto o = judge_answer(500, R"({"model":"m","slots_total":4})", "m");
  EXPECT_EQ(o.result, ProbeResult::fail);
  EXPECT_EQ(o.error, "HTTP 500");
  EXPECT_FALSE(o.slots_total);
  EXPECT_EQ(judge_answer(503, "busy", "m").error, "HTTP 503");
  EXPECT_EQ(judge_answer(204, "", "m").result, ProbeResult::fail);
}

TEST(ProbeAnswer, A503SayingLoadingIsLoadingWithoutItsSlots) {
  auto o = judge_answer(503, R"({"error":{"message":"Loading model"}})", "m");
  EXPECT_EQ(o.result, ProbeResult::loading);
  o = judge_answer(503, R"({"status":"loading","model":"m","slots_total":4})", "m");
  EXPECT_EQ(o.result, ProbeResult::loading);
  EXPECT_EQ(o.model, ModelCheck::match);
  EXPECT_FALSE(o.slots_total);
}

TEST(ProbeAnswer, AnotherModelFailsWithWhatItServes) {
  auto o = judge_answer(200, R"({"model":"qwen3.5-4b"})", "qwen3.5-9b");
  EXPECT_EQ(o.result, ProbeResult::fail);
  EXPECT_EQ(o.model, ModelCheck::mismatch);
  EXPECT_EQ(o.error, "serves model qwen3.5-4b, not qwen3.5-9b");
  o = judge_answer(503, R"({"status":"loading","model":"x"})", "m");
  EXPECT_EQ(o.result, ProbeResult::fail);
  EXPECT_EQ(o.error, "serves model x, not m");
}

}  // namespace
}  // namespace fg::health
