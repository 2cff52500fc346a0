#include "common/openai/answer.hpp"

#include <cmath>
#include <iterator>
#include <random>
#include <string>

#include <gtest/gtest.h>

namespace fg::openai {
namespace {

TEST(TopLevelMember, FindsTheMemberAtTheTopOnly) {
  const std::string_view doc =
      R"({"id":"x","choices":[{"usage":{"prompt_tokens":1}}],"note":"\"usage\":{}", "usage" : {"prompt_tokens":7} })";
  auto usage = top_level_member(doc, "usage");
  ASSERT_TRUE(usage);
  EXPECT_EQ(*usage, R"({"prompt_tokens":7})");
  EXPECT_EQ(top_level_member(doc, "id").value_or(""), R"("x")");
  EXPECT_FALSE(top_level_member(doc, "prompt_tokens"));
}

TEST(TopLevelMember, ScalarsAndStringsWithBrackets) {
  const std::string_view doc = R"({"a":12.5e3,"b":"}]{[","c":null,"d":[1,{"e":"]"}],"f":true})";
  EXPECT_EQ(top_level_member(doc, "a").value_or(""), "12.5e3");
  EXPECT_EQ(top_level_member(doc, "b").value_or(""), R"("}]{[")");
  EXPECT_EQ(top_level_member(doc, "c").value_or(""), "null");
  EXPECT_EQ(top_level_member(doc, "d").value_or(""), R"([1,{"e":"]"}])");
  EXPECT_EQ(top_level_member(doc, "f").value_or(""), "true");
}

TEST(TopLevelMember, SeveralNamesInOnePassAsEachAlone) {
  const std::string_view docs[] = {
      R"({"id":"x","usage":{"prompt_tokens":7},"timings":{"prompt_n":3},"usage":{"a":1}})",
      R"({"timings":{"prompt_n":3},"id":"x"})",
      R"({"usage":{"prompt_tokens":7},"bad" 1,"timings":{}})",
      R"({"id":"x"})",
      "",
  };
  const std::string_view names[] = {"usage", "timings", "id"};
  for (std::string_view doc : docs) {
    std::optional<std::string_view> found[3];
    top_level_members(doc, names, found);
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(found[i], top_level_member(doc, names[i])) << doc << " " << names[i];
    }
  }
}

TEST(TopLevelMember, MalformedOrUnfinishedIsNothing) {
  for (std::string_view bad : {"", "[]", "\"usage\"", "{\"usage\"", "{\"usage\":", "{\"usage\":{",
                               "{\"a\" 1,\"usage\":{}}", "{\"a\":\"open, \"usage\":{}"}) {
    EXPECT_FALSE(top_level_member(bad, "usage")) << bad;
  }
}

TEST(TopLevelMember, DeepNestingIsWalkedWithoutRecursion) {
  std::string doc = "{\"deep\":";
  doc += std::string(200000, '[');
  doc += std::string(200000, ']');
  doc += ",\"usage\":{\"prompt_tokens\":3}}";
  EXPECT_EQ(top_level_member(doc, "usage").value_or(""), "{\"prompt_tokens\":3}");
}

// Strings are skipped eight bytes at a time: an escape or the closing quote at every offset in
// and across a word must end (or not end) the string exactly where a byte-by-byte scan would.
TEST(TopLevelMember, StringsEndWhereTheyEndAtEveryOffset) {
  // Raw JSON string text: escaped quotes, escaped backslashes (one before the closing quote
  // ends the string), other escapes, UTF-8.
  const std::string_view pieces[] = {"",        R"(\")",       R"(\\)",       R"(\\\")",
                                     R"(\\\\)", R"(\n\u0022)", "caf\xC3\xA9", R"(}]{[,)"};
  for (std::size_t before = 0; before <= 17; ++before) {
    for (std::size_t after = 0; after <= 9; ++after) {
      for (std::string_view piece : pieces) {
        const std::string text =
            std::string(before, 'x') + std::string(piece) + std::string(after, 'y');
        const std::string doc = R"({"a":")" + text + R"(","usage":{"prompt_tokens":3}})";
        EXPECT_EQ(top_level_member(doc, "a").value_or(""), "\"" + text + "\"") << doc;
        EXPECT_EQ(top_level_member(doc, "usage").value_or(""), R"({"prompt_tokens":3})") << doc;
        // The same string never closed: its last quote is escaped.
        const std::string open = R"({"a":")" + text + R"(\","usage":{}})";
        EXPECT_FALSE(top_level_member(open, "usage")) << open;
      }
    }
  }
}

// The first look at a streamed event (found by the names' 'g', eight bytes at a time) against
// the three finds it replaced: random texts of quotes, escapes, the names and their pieces, of
// every length around the word size.
TEST(AnswerStats, AnEventNamesAStatExactlyWhenItHoldsAQuotedName) {
  auto reference = [](std::string_view data) {
    return data.find("\"usage\"") != std::string_view::npos ||
           data.find("\"timings\"") != std::string_view::npos ||
           data.find("\"length\"") != std::string_view::npos;
  };
  std::mt19937 rng(7);
  const std::string_view pieces[] = {
      "\"", "\\\"", "usage", "timings", "length",    "u",          "t",           "l",
      "g",  "ag",   "e\"",   "x",       "\"usage\"", "\"length\"", "\"timings\"", " "};
  int named = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string data;
    const int count = static_cast<int>(rng() % 12);
    for (int k = 0; k < count; ++k) {
      data += pieces[rng() % std::size(pieces)];
    }
    named += reference(data) ? 1 : 0;
    ASSERT_EQ(detail::names_a_stat(data), reference(data)) << data;
  }
  EXPECT_GT(named, 1000);  // both answers were asked often
  EXPECT_GT(20000 - named, 1000);
}

TEST(AnswerStats, UsageAndTimingsOfAWholeAnswer) {
  const std::string_view body = R"({"choices":[{"message":{"content":"RISK_LEVEL: 5"}}],
    "usage":{"prompt_tokens":7012,"completion_tokens":6,"total_tokens":7018,
             "prompt_tokens_details":{"cached_tokens":4096}},
    "timings":{"prompt_n":2916,"prompt_ms":34210.5,"predicted_n":6,"predicted_ms":640.25,
               "cache_n":4096}})";
  AnswerStats stats;
  read_stats_from_body(Api::openai, body, stats);
  EXPECT_EQ(stats.prompt_tokens, 7012u);
  EXPECT_EQ(stats.completion_tokens, 6u);
  EXPECT_EQ(stats.cached_tokens, 4096u);
  EXPECT_EQ(stats.prompt_n, 2916u);
  EXPECT_DOUBLE_EQ(stats.prompt_ms.value_or(0), 34210.5);
  EXPECT_EQ(stats.predicted_n, 6u);
  EXPECT_DOUBLE_EQ(stats.predicted_ms.value_or(0), 640.25);
  EXPECT_EQ(stats.cache_n, 4096u);
}

TEST(AnswerStats, EmbeddingsUsageHasNoCompletion) {
  AnswerStats stats;
  read_stats_from_body(Api::openai, R"({"data":[],"usage":{"prompt_tokens":9,"total_tokens":9}})",
                       stats);
  EXPECT_EQ(stats.prompt_tokens, 9u);
  EXPECT_FALSE(stats.completion_tokens);
  EXPECT_FALSE(stats.prompt_ms);
}

TEST(AnswerStats, FromStreamEvents) {
  AnswerStats stats;
  SseEvent content;
  content.data = R"({"choices":[{"delta":{"content":"hi"}}],"usage":null})";
  read_stats_from_event(Api::openai, content, stats);
  EXPECT_FALSE(stats.prompt_tokens);
  SseEvent last;
  last.data =
      R"({"choices":[],"usage":{"prompt_tokens":70,"completion_tokens":2},"timings":{"predicted_n":2,"predicted_ms":81}})";
  read_stats_from_event(Api::openai, last, stats);
  EXPECT_EQ(stats.prompt_tokens, 70u);
  EXPECT_EQ(stats.completion_tokens, 2u);
  EXPECT_EQ(stats.predicted_n, 2u);
  EXPECT_DOUBLE_EQ(stats.predicted_ms.value_or(0), 81);
  SseEvent done;
  done.data = "[DONE]";
  read_stats_from_event(Api::openai, done, stats);
  EXPECT_EQ(stats.prompt_tokens, 70u);
}

TEST(AnswerStats, WrongTypesAndHostileValuesAreIgnored) {
  AnswerStats stats;
  read_stats_from_body(
      Api::openai,
      R"({"usage":{"prompt_tokens":-4,"completion_tokens":"6"},"timings":{"prompt_ms":-1,"predicted_ms":"x"}})",
      stats);
  EXPECT_FALSE(stats.prompt_tokens);
  EXPECT_FALSE(stats.completion_tokens);
  EXPECT_FALSE(stats.prompt_ms);
  EXPECT_FALSE(stats.predicted_ms);
  // A usage object nested past the JSON depth limit is not parsed (and does not crash).
  std::string deep = "{\"usage\":{\"x\":";
  deep += std::string(100000, '[');
  deep += std::string(100000, ']');
  deep += "}}";
  read_stats_from_body(Api::openai, deep, stats);
  EXPECT_FALSE(stats.prompt_tokens);
}

// The small reader of usage and timings (answer.cpp) against nlohmann's DOM, which it must read
// exactly like: every field equal, including what stays untouched.
bool same_stats(const AnswerStats& a, const AnswerStats& b) {
  auto same_ms = [](const std::optional<double>& x, const std::optional<double>& y) {
    return x.has_value() == y.has_value() &&
           (!x || (*x == *y && std::signbit(*x) == std::signbit(*y)));
  };
  return a.prompt_tokens == b.prompt_tokens && a.completion_tokens == b.completion_tokens &&
         a.cached_tokens == b.cached_tokens && a.prompt_n == b.prompt_n &&
         same_ms(a.prompt_ms, b.prompt_ms) && a.predicted_n == b.predicted_n &&
         same_ms(a.predicted_ms, b.predicted_ms) && a.cache_n == b.cache_n &&
         a.truncated == b.truncated;
}

TEST(AnswerSmallReader, ReadsLikeTheDom) {
  const std::string usages[] = {
      R"({"prompt_tokens":7012,"completion_tokens":6,"total_tokens":7018,"prompt_tokens_details":{"cached_tokens":4096}})",
      R"({ "prompt_tokens" : 1 , "completion_tokens" : 2 })",
      "{\"prompt_tokens\":\t1,\n\"completion_tokens\":\r2}",
      R"({})",
      R"({"prompt_tokens":1,"prompt_tokens":"x"})",  // the last of repeated keys wins
      R"({"prompt_tokens":"x","prompt_tokens":3})",
      R"({"prompt_tokens_details":{"cached_tokens":5},"prompt_tokens_details":{}})",
      R"({"prompt_tokens_details":{"cached_tokens":5},"prompt_tokens_details":null})",
      R"({"prompt_tokens":18446744073709551615,"completion_tokens":18446744073709551616})",
      R"({"prompt_tokens":-0,"completion_tokens":0,"cached_tokens":1})",
      R"({"prompt_tokens":1.0,"completion_tokens":1e2,"input_tokens":3,"output_tokens":4})",
      R"({"input_tokens":20,"cache_read_input_tokens":100,"cache_creation_input_tokens":5,"output_tokens":4})",
      R"({"input_tokens":20,"cache_read_input_tokens":-1,"input_tokens_details":{"cached_tokens":9}})",
      // The small reader keeps the first 10 members as it checks them: at, and past, that.
      R"({"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"prompt_tokens":8,"completion_tokens":9,"prompt_tokens":10})",
      R"({"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"prompt_tokens":10,"completion_tokens":11,"prompt_tokens":12})",
      R"({"prompt_tokens":01})",  // invalid: nlohmann refuses, nothing read
      R"({"prompt_tokens":1,})",
      R"({"prompt_tokens":1 "completion_tokens":2})",
      R"({"prompt_tokens":1}x)",
      R"({"prompt_tokens":1e400})",
      R"({"prompt_tokens":2,"x":1e-400})",
      R"({"prompt_tokens":2,"x":"caf\u00e9","y":"\u00e9t\u00e9"})",  // escapes: the DOM reads it
      "{\"prompt_tokens\":2,\"x\":\"caf\xc3\xa9\"}",                 // UTF-8: the DOM reads it
      "{\"prompt_tokens\":2,\"x\":\"\xff\"}",                        // invalid UTF-8: refused
      "{\"prompt_tokens\":2,\"x\":\"a\x01\"}",                       // a control byte: refused
      R"({"prompt_\u0074okens":2})",
      R"({"prompt_tokens":2,"x":[1,[2,{"a":[true,false,null]}],"s"],"y":{"z":{}}})",
      R"({"prompt_tokens":2,"x":[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]})",  // past 16: the DOM
      R"({"prompt_tokens":2,"x":tru})",
      R"({"prompt_tokens":2,"x":-})",
      R"({"prompt_tokens":2,"x":1.})",
      R"({"prompt_tokens":2,"x":.5})",
      R"({"prompt_tokens":2,"x":[1,]})",
      R"([1,2])",
      R"("usage")",
      R"(7)",
      R"(null)",
  };
  const std::string timings[] = {
      R"({"prompt_n":2916,"prompt_ms":34210.5,"predicted_n":6,"predicted_ms":640.25,"cache_n":4096})",
      R"({"cache_n":0,"prompt_n":12,"prompt_ms":8.31,"prompt_per_token_ms":0.6925,"prompt_per_second":1444.04,"predicted_n":16,"predicted_ms":402.114,"predicted_per_token_ms":25.132125,"predicted_per_second":39.789})",
      R"({"a":0,"b":1,"prompt_n":12,"c":2,"d":3,"e":4,"f":5,"g":6,"h":7,"i":8,"predicted_n":16,"prompt_n":13})",
      R"({"prompt_ms":-0.0,"predicted_ms":-0})",
      R"({"prompt_ms":-1,"predicted_ms":"x","prompt_n":1.5,"cache_n":-3})",
      R"({"prompt_ms":1.7976931348623157e308,"predicted_ms":0.1e1,"predicted_n":99999999999999999999})",
      R"({"prompt_ms":123456789012345678901234567890.123456789})",
      R"({"prompt_ms":1E+2,"predicted_ms":2e-2})",
      R"({"prompt_ms":1,"prompt_ms":2})",
      R"({"prompt_ms":1})",
      R"({"prompt_ms":1)",
      R"(false)",
  };
  for (Api api : {Api::openai, Api::responses, Api::anthropic}) {
    for (const auto& usage : usages) {
      for (const auto& t : timings) {
        for (bool prefilled : {false, true}) {
          const std::string body = R"({"id":"x","usage":)" + usage + R"(,"timings":)" + t + "}";
          AnswerStats small;
          AnswerStats dom;
          if (prefilled) {
            small = {1, 2, 3, 4, 5.5, 6, 7.5, 8, true};
            dom = small;
          }
          read_stats_from_body(api, body, small);
          detail::read_stats_from_body_dom(api, body, dom);
          EXPECT_TRUE(same_stats(small, dom)) << static_cast<int>(api) << " " << body;
        }
      }
    }
  }
}

TEST(AnswerSmallReader, TakesWhatReplicasSendWithoutTheDom) {
  // llama-server's usage and timings, an Anthropic and a Responses usage: no DOM for these.
  for (
      std::string_view object : {
          R"({"completion_tokens":16,"prompt_tokens":12,"total_tokens":28,"prompt_tokens_details":{"cached_tokens":0}})",
          R"({"cache_n":0,"prompt_n":12,"prompt_ms":8.31,"prompt_per_token_ms":0.6925,"prompt_per_second":1444.04,"predicted_n":16,"predicted_ms":402.114,"predicted_per_token_ms":25.132125,"predicted_per_second":39.789})",
          R"({"input_tokens":20,"cache_creation_input_tokens":0,"cache_read_input_tokens":100,"output_tokens":4,"service_tier":"standard"})",
          R"({"input_tokens":120,"input_tokens_details":{"cached_tokens":100},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":127})",
      }) {
    EXPECT_TRUE(detail::small_reader_takes(object)) << object;
  }
  EXPECT_FALSE(detail::small_reader_takes(R"({"x":"\u00e9"})"));
  EXPECT_FALSE(detail::small_reader_takes(R"({"x":1e400})"));
  EXPECT_FALSE(detail::small_reader_takes("7"));
}

TEST(ReadError, OpenAiErrorObject) {
  auto e = read_error(
      R"({"error":{"message":"the model 'm' does not exist","type":"invalid_request_error","param":"model","code":"model_not_found"}})");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->message, "the model 'm' does not exist");
  EXPECT_EQ(e->code, "model_not_found");
  auto null_code = read_error(R"({"error":{"message":"x","code":null}})");
  ASSERT_TRUE(null_code);
  EXPECT_EQ(null_code->code, "");
}

TEST(ReadError, NotAnErrorObject) {
  EXPECT_FALSE(read_error("not json"));
  EXPECT_FALSE(read_error(R"({"error":"a string"})"));
  EXPECT_FALSE(read_error(R"({"detail":{"code":"model_not_found"}})"));
  std::string deep = "{\"error\":";
  deep += std::string(100000, '{');
  EXPECT_FALSE(read_error(deep));
}

TEST(ReadStats, ResponsesBodyUsage) {
  AnswerStats stats;
  read_stats_from_body(
      Api::responses,
      R"({"id":"resp_1","object":"response","output":[{"type":"message","content":[{"type":"output_text","text":"\"usage\":{\"input_tokens\":9}"}]}],"usage":{"input_tokens":120,"input_tokens_details":{"cached_tokens":100},"output_tokens":7,"total_tokens":127}})",
      stats);
  EXPECT_EQ(stats.prompt_tokens, 120u);
  EXPECT_EQ(stats.cached_tokens, 100u);
  EXPECT_EQ(stats.completion_tokens, 7u);
}

TEST(ReadStats, ResponsesStreamReadsTheFinalResponseOnly) {
  AnswerStats stats;
  SseEvent created{
      "response.created",
      R"({"type":"response.created","sequence_number":0,"response":{"id":"r","usage":null}})", ""};
  SseEvent delta{"response.output_text.delta",
                 R"({"type":"response.output_text.delta","delta":"usage"})", ""};
  read_stats_from_event(Api::responses, created, stats);
  read_stats_from_event(Api::responses, delta, stats);
  EXPECT_FALSE(stats.prompt_tokens);
  SseEvent completed{
      "response.completed",
      R"({"type":"response.completed","sequence_number":9,"response":{"id":"r","output":[{"content":[{"text":"a long answer"}]}],"usage":{"input_tokens":7000,"output_tokens":3,"total_tokens":7003}}})",
      ""};
  read_stats_from_event(Api::responses, completed, stats);
  EXPECT_EQ(stats.prompt_tokens, 7000u);
  EXPECT_EQ(stats.completion_tokens, 3u);
  // A usage member at the top level of an event is not the Responses API's: ignored.
  AnswerStats other;
  read_stats_from_event(Api::responses, {"", R"({"usage":{"input_tokens":5}})", ""}, other);
  EXPECT_FALSE(other.prompt_tokens);
}

TEST(ReadStats, AnthropicBodyCountsTheCachedPromptToo) {
  AnswerStats stats;
  read_stats_from_body(
      Api::anthropic,
      R"({"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":20,"cache_read_input_tokens":100,"cache_creation_input_tokens":5,"output_tokens":4}})",
      stats);
  EXPECT_EQ(stats.prompt_tokens, 125u);
  EXPECT_EQ(stats.cached_tokens, 100u);
  EXPECT_EQ(stats.completion_tokens, 4u);
}

TEST(ReadStats, AnthropicStreamStartThenDelta) {
  AnswerStats stats;
  read_stats_from_event(
      Api::anthropic,
      {"message_start",
       R"({"type":"message_start","message":{"id":"msg_1","type":"message","usage":{"input_tokens":30,"cache_read_input_tokens":0,"output_tokens":1}}})",
       ""},
      stats);
  EXPECT_EQ(stats.prompt_tokens, 30u);
  EXPECT_EQ(stats.completion_tokens, 1u);
  read_stats_from_event(
      Api::anthropic,
      {"content_block_delta", R"({"type":"content_block_delta","delta":{"text":"x"}})", ""}, stats);
  read_stats_from_event(
      Api::anthropic,
      {"message_delta",
       R"({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":12}})",
       ""},
      stats);
  EXPECT_EQ(stats.prompt_tokens, 30u);  // the delta said nothing of the prompt
  EXPECT_EQ(stats.completion_tokens, 12u);
}

// Whether the answer was cut by its token limit: choices[0].finish_reason (chat, completions),
// the response's status and incomplete_details (Responses API), stop_reason (Anthropic).
TEST(ReadStats, FinishReasonSaysWhetherTheTokenLimitCutTheAnswer) {
  AnswerStats cut;
  read_stats_from_body(
      Api::openai,
      R"({"choices":[{"index":0,"message":{"role":"assistant","content":"\"finish_reason\":\"stop\" is text"},"finish_reason":"length"}],"usage":{"completion_tokens":8}})",
      cut);
  EXPECT_EQ(cut.truncated, true);
  AnswerStats whole;
  read_stats_from_body(Api::openai,
                       R"({"choices":[{"text":"x","finish_reason":"stop"}],"usage":{}})", whole);
  EXPECT_EQ(whole.truncated, false);
  AnswerStats none;
  read_stats_from_body(Api::openai, R"({"object":"list","data":[],"usage":{}})", none);
  EXPECT_FALSE(none.truncated);

  AnswerStats stream;
  read_stats_from_event(
      Api::openai, {"", R"({"choices":[{"delta":{"content":"hi"},"finish_reason":null}]})", ""},
      stream);
  EXPECT_FALSE(stream.truncated);
  read_stats_from_event(
      Api::openai, {"", R"({"choices":[{"delta":{},"finish_reason":"length","index":0}]})", ""},
      stream);
  EXPECT_EQ(stream.truncated, true);

  AnswerStats responses;
  read_stats_from_body(
      Api::responses,
      R"({"object":"response","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"output_tokens":8}})",
      responses);
  EXPECT_EQ(responses.truncated, true);
  AnswerStats completed;
  read_stats_from_body(Api::responses,
                       R"({"object":"response","status":"completed","usage":{"output_tokens":8}})",
                       completed);
  EXPECT_EQ(completed.truncated, false);

  AnswerStats anthropic;
  read_stats_from_event(
      Api::anthropic,
      {"message_delta",
       R"({"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":12}})",
       ""},
      anthropic);
  EXPECT_EQ(anthropic.truncated, true);
  AnswerStats body;
  read_stats_from_body(
      Api::anthropic,
      R"({"type":"message","stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":2}})",
      body);
  EXPECT_EQ(body.truncated, false);
}

TEST(ReadStats, CountingAnswersReportNoUsage) {
  AnswerStats stats;
  read_stats_from_body(Api::anthropic, R"({"input_tokens":42})", stats);
  read_stats_from_body(Api::responses, R"({"object":"response.input_tokens","input_tokens":42})",
                       stats);
  EXPECT_FALSE(stats.prompt_tokens);
  EXPECT_FALSE(stats.completion_tokens);
}

}  // namespace
}  // namespace fg::openai
