#include "replica-agent/engines/responses.hpp"

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "common/openai/answer.hpp"
#include "common/openai/sse.hpp"

namespace fg::agent {
namespace {

using nlohmann::json;

std::vector<openai::SseEvent> events_of(const std::string& stream) {
  std::vector<openai::SseEvent> out;
  openai::SseParser parser([&](const openai::SseEvent& e) { out.push_back(e); });
  parser.feed(stream);
  return out;
}

ResponseMeta meta_for(Endpoint endpoint) {
  ResponseMeta meta;
  meta.endpoint = endpoint;
  meta.id = make_response_id(endpoint, 12345, 67890);
  meta.created = 1700000000;
  meta.model = "m";
  return meta;
}

// A whole stream as the sim writes it: opening with token 0, the tokens, the closing.
std::string whole_stream(const ResponseMeta& meta, const std::vector<std::string>& tokens,
                         const Usage& usage, std::string_view finish = "stop") {
  std::string text;
  std::string out = stream_opening(meta, usage);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    out += stream_token(meta, i, tokens[i]);
    text += tokens[i];
  }
  return out + stream_closing(meta, text, finish, usage, Timings{});
}

TEST(SimResponses, ResponsesStreamIsTypedAndEndsWithUsage) {
  const auto meta = meta_for(Endpoint::responses);
  EXPECT_EQ(meta.id.rfind("resp_", 0), 0u);
  const Usage usage{40, 8, 2};
  const auto events = events_of(whole_stream(meta, {"risk", " low"}, usage));
  std::vector<std::string> types;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const json data = json::parse(events[i].data);
    EXPECT_EQ(events[i].event, data["type"]);  // the event name repeats the type
    EXPECT_EQ(data["sequence_number"], i);
    types.push_back(events[i].event);
  }
  EXPECT_EQ(types,
            (std::vector<std::string>{"response.created", "response.in_progress",
                                      "response.output_item.added", "response.content_part.added",
                                      "response.output_text.delta", "response.output_text.delta",
                                      "response.output_text.done", "response.content_part.done",
                                      "response.output_item.done", "response.completed"}));
  const json done = json::parse(events.back().data)["response"];
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["output"][0]["content"][0]["text"], "risk low");
  // The gateway's reader finds the usage where it looks for it.
  openai::AnswerStats stats;
  for (const auto& e : events) {
    openai::read_stats_from_event(openai::Api::responses, e, stats);
  }
  EXPECT_EQ(stats.prompt_tokens, 40u);
  EXPECT_EQ(stats.cached_tokens, 8u);
  EXPECT_EQ(stats.completion_tokens, 2u);
}

TEST(SimResponses, ACutResponseIsIncomplete) {
  const auto meta = meta_for(Endpoint::responses);
  const auto events = events_of(whole_stream(meta, {"a"}, Usage{4, 0, 1}, "length"));
  EXPECT_EQ(events.back().event, "response.incomplete");
  const json body = json::parse(answer_body(meta, "a", "length", Usage{4, 0, 1}, Timings{}));
  EXPECT_EQ(body["status"], "incomplete");
  EXPECT_EQ(body["incomplete_details"]["reason"], "max_output_tokens");
}

TEST(SimResponses, MessagesStreamInAnthropicsOrder) {
  const auto meta = meta_for(Endpoint::messages);
  EXPECT_EQ(meta.id.rfind("msg_", 0), 0u);
  const Usage usage{30, 10, 2};
  const auto events = events_of(whole_stream(meta, {"x", "y"}, usage));
  std::vector<std::string> types;
  for (const auto& e : events) {
    EXPECT_EQ(e.event, json::parse(e.data)["type"]);
    types.push_back(e.event);
  }
  EXPECT_EQ(types,
            (std::vector<std::string>{"message_start", "content_block_start", "ping",
                                      "content_block_delta", "content_block_delta",
                                      "content_block_stop", "message_delta", "message_stop"}));
  const json start = json::parse(events[0].data)["message"]["usage"];
  EXPECT_EQ(start["input_tokens"], 20);  // Anthropic counts the cached part apart
  EXPECT_EQ(start["cache_read_input_tokens"], 10);
  openai::AnswerStats stats;
  for (const auto& e : events) {
    openai::read_stats_from_event(openai::Api::anthropic, e, stats);
  }
  EXPECT_EQ(stats.prompt_tokens, 30u);
  EXPECT_EQ(stats.completion_tokens, 2u);
  const json body = json::parse(answer_body(meta, "xy", "length", usage, Timings{}));
  EXPECT_EQ(body["type"], "message");
  EXPECT_EQ(body["content"][0]["text"], "xy");
  EXPECT_EQ(body["stop_reason"], "max_tokens");
}

TEST(SimResponses, CountsAndRerank) {
  EXPECT_EQ(json::parse(token_count_body(Endpoint::count_tokens, 12)),
            json::parse(R"({"input_tokens":12})"));
  EXPECT_EQ(json::parse(token_count_body(Endpoint::input_tokens, 12))["object"],
            "response.input_tokens");
  const auto scores = rerank_scores("Card fraud", {"nothing here", "card, FRAUD!", "a card"}, 2);
  ASSERT_EQ(scores.size(), 2u);
  EXPECT_EQ(scores[0], (std::pair<std::size_t, double>{1, 1.0}));
  EXPECT_EQ(scores[1], (std::pair<std::size_t, double>{2, 0.5}));
  const json body = json::parse(rerank_body(meta_for(Endpoint::rerank), scores, Usage{9, 0, 0}));
  EXPECT_EQ(body["results"][0]["index"], 1);
  EXPECT_EQ(body["usage"]["prompt_tokens"], 9);
}

}  // namespace
}  // namespace fg::agent
