#include "replica-agent/engines/autotune.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "replica-agent/config/agent_config.hpp"

namespace fg::agent::autotune {
namespace {

using Argv = std::vector<std::string>;

const Argv kCommand = {"llama-server", "-m", "q.gguf", "--port", "8080", "--parallel", "2"};

AutotuneConfig tune(std::vector<std::uint32_t> threads, std::vector<std::uint32_t> batch) {
  AutotuneConfig c;
  c.enabled = true;
  c.threads = std::move(threads);
  c.batch_size = std::move(batch);
  return c;
}

Candidate cand(std::optional<std::uint32_t> t, std::optional<std::uint32_t> b) {
  return Candidate{t, b};
}

Result measured(Candidate c, double prefill, double decode, std::uint32_t prompt = 256,
                std::uint32_t predict = 32) {
  Result r;
  r.candidate = c;
  r.measured = true;
  r.speeds = Speeds{prefill, decode};
  r.seconds = reference_seconds(prompt, predict, r.speeds);
  return r;
}

Result pending(Candidate c) {
  Result r;
  r.candidate = c;
  return r;
}

Result failed(Candidate c, std::string error) {
  Result r;
  r.candidate = c;
  r.error = std::move(error);
  return r;
}

// ---------------------------------------------------------------------------------------------

TEST(AutotuneCandidates, EveryCombinationThreadsOuterInTheOrderWritten) {
  const auto c = expand_candidates(tune({4, 1, 2}, {256, 64}), kCommand);
  ASSERT_EQ(c.size(), 6u);
  EXPECT_EQ(c[0], cand(4, 256));
  EXPECT_EQ(c[1], cand(4, 64));
  EXPECT_EQ(c[2], cand(1, 256));
  EXPECT_EQ(c[3], cand(1, 64));
  EXPECT_EQ(c[4], cand(2, 256));
  EXPECT_EQ(c[5], cand(2, 64));
}

TEST(AutotuneCandidates, AnUntunedValueIsTheCommandsOrUnset) {
  // Only threads tuned; the command sets no batch size: llama-server's default (unset).
  auto c = expand_candidates(tune({1, 2}, {}), kCommand);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0], cand(1, std::nullopt));
  EXPECT_EQ(c[1], cand(2, std::nullopt));
  // The command's own value (the last one, as llama.cpp reads it) is reported.
  Argv with_batch = kCommand;
  with_batch.insert(with_batch.end(), {"-b", "512", "--batch-size", "1024", "-t", "3"});
  c = expand_candidates(tune({1, 2}, {}), with_batch);
  EXPECT_EQ(c[0], cand(1, 1024));
  c = expand_candidates(tune({}, {64, 128}), with_batch);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0], cand(3, 64));
  EXPECT_EQ(c[1], cand(3, 128));
  // A value that is not a whole number is not reported (but stays in the command).
  c = expand_candidates(tune({}, {64}), Argv{"llama-server", "--threads", "-1"});
  EXPECT_EQ(c[0], cand(std::nullopt, 64));
}

TEST(AutotuneFlags, FlagValueTakesTheLastOccurrenceOfAnySpelling) {
  EXPECT_EQ(flag_value(kCommand, threads_flags()), std::nullopt);
  EXPECT_EQ(flag_value(Argv{"ls", "-t", "2", "--threads", "6"}, threads_flags()), "6");
  EXPECT_EQ(flag_value(Argv{"ls", "--batch_size", "99"}, batch_size_flags()), "99");
  // argv[0] is the program, and a trailing flag has no value.
  EXPECT_EQ(flag_value(Argv{"-t", "5"}, threads_flags()), std::nullopt);
  EXPECT_EQ(flag_value(Argv{"ls", "-t"}, threads_flags()), std::nullopt);
  // Other flags that start alike are not it.
  EXPECT_EQ(flag_value(Argv{"ls", "-tb", "4", "--threads-batch", "4"}, threads_flags()),
            std::nullopt);
}

TEST(AutotuneFlags, WithFlagReplacesEveryOccurrenceInPlace) {
  EXPECT_EQ(with_flag(Argv{"ls", "-t", "2", "-m", "x", "--threads", "6"}, threads_flags(), "4"),
            (Argv{"ls", "-t", "4", "-m", "x", "--threads", "4"}));
  EXPECT_EQ(with_flag(Argv{"ls", "--batch_size", "9"}, batch_size_flags(), "64"),
            (Argv{"ls", "--batch_size", "64"}));
  // --threads-batch is a different flag: left alone, --threads appended.
  EXPECT_EQ(with_flag(Argv{"ls", "-tb", "8"}, threads_flags(), "2"),
            (Argv{"ls", "-tb", "8", "--threads", "2"}));
}

TEST(AutotuneFlags, WithFlagAppendsWhenAbsent) {
  EXPECT_EQ(with_flag(Argv{"ls"}, batch_size_flags(), "64"), (Argv{"ls", "--batch-size", "64"}));
  EXPECT_EQ(with_flag(Argv{"ls", "-t"}, threads_flags(), "2"), (Argv{"ls", "-t", "2"}));
  EXPECT_EQ(with_flag(Argv{"-t"}, threads_flags(), "2"), (Argv{"-t", "--threads", "2"}));
}

TEST(AutotuneFlags, CandidateCommand) {
  EXPECT_EQ(candidate_command(kCommand, cand(2, 64)),
            (Argv{"llama-server", "-m", "q.gguf", "--port", "8080", "--parallel", "2", "--threads",
                  "2", "--batch-size", "64"}));
  EXPECT_EQ(candidate_command(Argv{"s", "--threads", "8", "-b", "2048"}, cand(1, std::nullopt)),
            (Argv{"s", "--threads", "1", "-b", "2048"}));
  EXPECT_EQ(candidate_command(kCommand, cand(std::nullopt, std::nullopt)), kCommand);
}

TEST(AutotuneJob, ThePromptIsFixedWordsOfTheRequestedLength) {
  const std::string p = reference_prompt(256);
  EXPECT_EQ(p, reference_prompt(256));  // deterministic
  std::istringstream in(p);
  std::vector<std::string> words;
  for (std::string w; in >> w;) {
    words.push_back(w);
  }
  EXPECT_EQ(words.size(), 256u);
  EXPECT_EQ(p.front() != ' ' && p.back() != ' ', true);
  EXPECT_EQ(reference_prompt(1).find(' '), std::string::npos);
  EXPECT_EQ(reference_prompt(0), "");
  // Not one word repeated: the words vary.
  EXPECT_NE(words[0] + words[1] + words[2], words[3] + words[3] + words[3]);
  EXPECT_EQ(reference_prompt(10), p.substr(0, reference_prompt(10).size()));
}

TEST(AutotuneJob, TheRequestIsGreedyUncachedAndRunsToItsLength) {
  const auto body = nlohmann::json::parse(reference_request(128, 16));
  EXPECT_EQ(body["prompt"], reference_prompt(128));
  EXPECT_EQ(body["n_predict"], 16);
  EXPECT_EQ(body["temperature"], 0);
  EXPECT_EQ(body["cache_prompt"], false);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["stream"], false);
}

TEST(AutotuneTimings, ReadsLlamaCppTimings) {
  const std::string body =
      R"({"content":"x","timings":{"prompt_n":256,"prompt_ms":4.6,"prompt_per_second":55101.1,)"
      R"("predicted_n":32,"predicted_ms":38.4,"predicted_per_second":806.5}})";
  auto s = parse_timings(body);
  ASSERT_TRUE(s.has_value());
  EXPECT_DOUBLE_EQ(s->prefill_tps, 55101.1);
  EXPECT_DOUBLE_EQ(s->decode_tps, 806.5);
}

TEST(AutotuneTimings, RefusesAnswersWithoutUsableTimings) {
  std::string why;
  EXPECT_FALSE(parse_timings("not json", &why));
  EXPECT_NE(why.find("not a JSON object"), std::string::npos);
  EXPECT_FALSE(parse_timings(R"({"content":"x"})", &why));
  EXPECT_NE(why.find("no timings"), std::string::npos);
  EXPECT_FALSE(
      parse_timings(R"({"timings":{"prompt_per_second":0,"predicted_per_second":5}})", &why));
  EXPECT_NE(why.find("prompt_per_second"), std::string::npos);
  EXPECT_FALSE(parse_timings(R"({"timings":{"prompt_per_second":10}})"));
  EXPECT_FALSE(parse_timings(R"({"timings":{"prompt_per_second":"10","predicted_per_second":5}})"));
}

TEST(AutotuneScore, TheReferenceJobsSeconds) {
  // 256 tokens at 128/s = 2 s, 32 tokens at 16/s = 2 s.
  EXPECT_DOUBLE_EQ(reference_seconds(256, 32, Speeds{128, 16}), 4.0);
  EXPECT_DOUBLE_EQ(reference_seconds(100, 0, Speeds{50, 1}), 2.0);
  EXPECT_TRUE(std::isinf(reference_seconds(256, 32, Speeds{0, 16})));
  EXPECT_TRUE(std::isinf(reference_seconds(256, 32, Speeds{128, -1})));
}

TEST(AutotuneScore, TheLowestTimeWinsNotTheFastestOfOneSpeed) {
  // b decodes fastest, but a's prefill saves more on a 256-token prompt with a 32-token answer:
  // a: 256/512 + 32/20 = 0.5 + 1.6 = 2.1 s; b: 256/64 + 32/25 = 4 + 1.28 = 5.28 s.
  std::vector<Result> r = {measured(cand(1, 64), 512, 20), measured(cand(2, 64), 64, 25)};
  EXPECT_EQ(pick_fastest(r), 0u);
  // A long answer turns it around: 16 + 1024 tokens.
  r = {measured(cand(1, 64), 512, 20, 16, 1024), measured(cand(2, 64), 64, 25, 16, 1024)};
  EXPECT_EQ(pick_fastest(r), 1u);
}

TEST(AutotuneScore, FailedCandidatesAreSkippedAndTiesGoToTheFirst) {
  std::vector<Result> r = {failed(cand(1, 64), "exited"), measured(cand(2, 64), 100, 10),
                           measured(cand(4, 64), 100, 10), failed(cand(8, 64), "timeout")};
  EXPECT_EQ(pick_fastest(r), 1u);
  r.push_back(measured(cand(16, 64), 100, 11));
  EXPECT_EQ(pick_fastest(r), 4u);
}

TEST(AutotuneScore, NothingMeasuredNothingChosen) {
  EXPECT_EQ(pick_fastest({}), std::nullopt);
  EXPECT_EQ(pick_fastest({failed(cand(1, 1), "a"), failed(cand(2, 1), "b")}), std::nullopt);
  EXPECT_EQ(pick_fastest({pending(cand(1, 1))}), std::nullopt);
}

TEST(AutotuneReport, HealthJsonListsEveryCandidate) {
  Report report;
  report.state = Report::State::done;
  report.results = {measured(cand(1, 64), 512, 20), failed(cand(2, std::nullopt), "exited"),
                    pending(cand(4, 64))};
  report.chosen = 0;
  AutotuneConfig config = tune({1, 2, 4}, {64});
  const auto j = report_json(report, config);
  EXPECT_EQ(j["state"], "done");
  EXPECT_EQ(j["prompt_tokens"], 256);
  EXPECT_EQ(j["predict_tokens"], 32);
  EXPECT_EQ(j["chosen"]["threads"], 1);
  EXPECT_EQ(j["chosen"]["batch_size"], 64);
  ASSERT_EQ(j["candidates"].size(), 3u);
  EXPECT_EQ(j["candidates"][0]["status"], "ok");
  EXPECT_DOUBLE_EQ(j["candidates"][0]["prefill_tps"].get<double>(), 512);
  EXPECT_DOUBLE_EQ(j["candidates"][0]["decode_tps"].get<double>(), 20);
  EXPECT_DOUBLE_EQ(j["candidates"][0]["seconds"].get<double>(), 2.1);
  EXPECT_EQ(j["candidates"][1]["status"], "failed");
  EXPECT_EQ(j["candidates"][1]["error"], "exited");
  EXPECT_TRUE(j["candidates"][1]["batch_size"].is_null());
  EXPECT_FALSE(j["candidates"][1].contains("seconds"));
  EXPECT_EQ(j["candidates"][2]["status"], "pending");
  report.chosen.reset();
  report.state = Report::State::failed;
  EXPECT_TRUE(report_json(report, config)["chosen"].is_null());
  EXPECT_EQ(report_json(report, config)["state"], "failed");
}

TEST(AutotuneReport, LabelsAndDescriptions) {
  EXPECT_EQ(label(std::nullopt), "default");
  EXPECT_EQ(label(8u), "8");
  EXPECT_EQ(describe(cand(2, std::nullopt)), "threads=2 batch_size=default");
}

// --- configuration -----------------------------------------------------------------------------

std::string error_of(const std::string& yaml) {
  try {
    Origins origins;
    AgentConfig config;
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

const std::string kLlama =
    "model: m\n"
    "engine:\n"
    "  kind: llama-server\n"
    "  command: [llama-server, -m, q.gguf]\n";

TEST(AutotuneConfigParse, TheYamlKeys) {
  AgentConfig c = load(kLlama +
                       "  autotune: {threads: [1, 2], batch_size: [64, 256], prompt_tokens: 128, "
                       "predict_tokens: 16}\n");
  EXPECT_TRUE(c.engine.autotune.enabled);
  EXPECT_EQ(c.engine.autotune.threads, (std::vector<std::uint32_t>{1, 2}));
  EXPECT_EQ(c.engine.autotune.batch_size, (std::vector<std::uint32_t>{64, 256}));
  EXPECT_EQ(c.engine.autotune.prompt_tokens, 128u);
  EXPECT_EQ(c.engine.autotune.predict_tokens, 16u);
  // Defaults, and a list may be written as a comma-separated string.
  c = load(kLlama + "  autotune:\n    threads: \"2, 4,6\"\n");
  EXPECT_EQ(c.engine.autotune.threads, (std::vector<std::uint32_t>{2, 4, 6}));
  EXPECT_TRUE(c.engine.autotune.batch_size.empty());
  EXPECT_EQ(c.engine.autotune.prompt_tokens, 256u);
  EXPECT_EQ(c.engine.autotune.predict_tokens, 32u);
  EXPECT_FALSE(load(kLlama).engine.autotune.enabled);
}

TEST(AutotuneConfigErrors, ValuesAreChecked) {
  auto with = [](const std::string& autotune) {
    return error_of(kLlama + "  autotune:\n" + autotune);
  };
  EXPECT_EQ(with("    threads: []\n"),
            "agent.yaml:6: engine.autotune.threads: expected a list of at least one value to try, "
            "such as [1, 2, 4]");
  EXPECT_EQ(with("    threads: [0, 1]\n"),
            "agent.yaml:6: engine.autotune.threads: must be between 1 and 1024, got 0");
  EXPECT_EQ(with("    batch_size: [64, 64]\n"),
            "agent.yaml:6: engine.autotune.batch_size: lists 64 twice");
  EXPECT_EQ(with("    batch_size: [a]\n"),
            "agent.yaml:6: engine.autotune.batch_size: expected a whole number, got \"a\"");
  EXPECT_EQ(with("    threads: [[1]]\n"),
            "agent.yaml:6: engine.autotune.threads[0]: expected a whole number, got a list");
  EXPECT_EQ(with("    threads: [1]\n    prompt_tokens: 0\n"),
            "agent.yaml:7: engine.autotune.prompt_tokens: must be between 1 and 65536, got 0");
  EXPECT_EQ(with("    threads: [1]\n    predict_tokens: 5000\n"),
            "agent.yaml:7: engine.autotune.predict_tokens: must be between 1 and 4096, got 5000");
  EXPECT_EQ(with("    threads:\n"),
            "agent.yaml:6: engine.autotune.threads: expected a list of at least one value to try, "
            "such as [1, 2, 4]");
  EXPECT_EQ(with("    thread: [1]\n"),
            "agent.yaml:6: engine.autotune.thread: unknown key; did you mean 'threads'?");
  EXPECT_EQ(error_of(kLlama + "  autotune: true\n"),
            "agent.yaml:5: engine.autotune: expected a map, got \"true\"");
}

TEST(AutotuneConfigValidate, OnlyWithLlamaServerACommandAndValuesToTry) {
  EXPECT_EQ(error_of("model: m\nengine:\n  kind: sim\n  autotune: {threads: [1]}\n"),
            "agent.yaml:4: engine.autotune: only for the llama-server engine (engine.kind is sim)");
  EXPECT_EQ(error_of("model: m\nengine:\n  kind: openai\n  autotune: {threads: [1]}\n"),
            "agent.yaml:4: engine.autotune: only for the llama-server engine (engine.kind is "
            "openai)");
  EXPECT_EQ(error_of("model: m\nengine:\n  kind: llama-server\n  autotune: {threads: [1]}\n"),
            "agent.yaml:4: engine.autotune: needs engine.command: the agent starts llama-server "
            "itself with each setting it tries");
  EXPECT_EQ(error_of(kLlama + "  autotune: {prompt_tokens: 64}\n"),
            "agent.yaml:5: engine.autotune: needs threads or batch_size: the values to try "
            "(threads: [2, 4, 6])");
  EXPECT_EQ(error_of(kLlama + "  autotune:\n"),
            "agent.yaml:5: engine.autotune: needs threads or batch_size: the values to try "
            "(threads: [2, 4, 6])");
  std::string many = "[";
  for (int i = 1; i <= 9; ++i) {
    many += std::to_string(i) + (i < 9 ? "," : "]");
  }
  EXPECT_EQ(error_of(kLlama + "  autotune: {threads: " + many + ", batch_size: " + many + "}\n"),
            "agent.yaml:5: engine.autotune: 81 combinations of threads and batch_size to try; at "
            "most 64");
  EXPECT_EQ(error_of(kLlama + "  autotune: {threads: [1, 2], batch_size: [64]}\n"), "");
}

TEST(AutotuneConfigCommandLine, FlagsSetTheKeys) {
  auto r = parse_command_line(
      {"--model", "m", "--engine", "llama-server", "--engine-command", "llama-server -m q.gguf",
       "--autotune-threads", "1,2", "--autotune-batch-size=64", "--autotune-prompt-tokens", "100",
       "--autotune-predict-tokens", "8"},
      "9.9.9");
  ASSERT_TRUE(std::holds_alternative<Invocation>(r));
  const auto& t = std::get<Invocation>(r).config.engine.autotune;
  EXPECT_TRUE(t.enabled);
  EXPECT_EQ(t.threads, (std::vector<std::uint32_t>{1, 2}));
  EXPECT_EQ(t.batch_size, (std::vector<std::uint32_t>{64}));
  EXPECT_EQ(t.prompt_tokens, 100u);
  EXPECT_EQ(t.predict_tokens, 8u);

  r = parse_command_line({"--model", "m", "--autotune-threads", "1,2"}, "9.9.9");
  ASSERT_TRUE(std::holds_alternative<CliExit>(r));
  EXPECT_EQ(std::get<CliExit>(r).code, 2);
  EXPECT_NE(std::get<CliExit>(r).text.find(
                "--autotune-threads: only for the llama-server engine (engine.kind is sim)"),
            std::string::npos);
  r = parse_command_line({"--model", "m", "--engine", "llama-server", "--engine-command", "x",
                          "--autotune-threads", "1,,x"},
                         "9.9.9");
  ASSERT_TRUE(std::holds_alternative<CliExit>(r));
  EXPECT_NE(
      std::get<CliExit>(r).text.find("--autotune-threads: expected a whole number, got \"x\""),
      std::string::npos);
  EXPECT_NE(usage_text().find("--autotune-threads"), std::string::npos);
}

}  // namespace
}  // namespace fg::agent::autotune
