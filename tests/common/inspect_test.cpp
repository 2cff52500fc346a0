#include "common/openai/inspect.hpp"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/util/json.hpp"

namespace fg::openai {
namespace {

constexpr std::string_view kJson = "application/json";

RequestInfo must_accept(std::string_view body, std::string_view content_type = kJson) {
  auto result = inspect_request(content_type, body);
  if (const auto* error = std::get_if<InspectError>(&result)) {
    ADD_FAILURE() << "rejected: " << error->status << " " << error->code << ": " << error->message;
    return {};
  }
  return std::get<RequestInfo>(result);
}

InspectError must_reject(std::string_view body, std::string_view content_type = kJson) {
  auto result = inspect_request(content_type, body);
  if (const auto* info = std::get_if<RequestInfo>(&result)) {
    ADD_FAILURE() << "accepted, model " << info->model;
    return {};
  }
  const InspectError error = std::get<InspectError>(result);
  EXPECT_FALSE(error.message.empty());
  return error;
}

TEST(InspectRequest, ValidChatBody) {
  const RequestInfo info = must_accept(
      R"({"model":"llama-3-8b","messages":[{"role":"user","content":"hi"}],"temperature":0.2})");
  EXPECT_EQ(info.model, "llama-3-8b");
  EXPECT_FALSE(info.stream);
  EXPECT_FALSE(info.include_usage);
}

TEST(InspectRequest, EmbeddingsBody) {
  const RequestInfo info = must_accept(R"({"input":["a","b"],"model":"e5"})");
  EXPECT_EQ(info.model, "e5");
  EXPECT_FALSE(info.stream);
}

TEST(InspectRequest, StreamTrueAndFalse) {
  EXPECT_TRUE(must_accept(R"({"model":"m","stream":true})").stream);
  EXPECT_FALSE(must_accept(R"({"model":"m","stream":false})").stream);
  EXPECT_FALSE(must_accept(R"({"model":"m","stream":null})").stream);
}

TEST(InspectRequest, IncludeUsage) {
  RequestInfo info =
      must_accept(R"({"model":"m","stream":true,"stream_options":{"include_usage":true}})");
  EXPECT_TRUE(info.stream);
  EXPECT_TRUE(info.include_usage);

  info = must_accept(R"({"model":"m","stream":true,"stream_options":{"include_usage":false}})");
  EXPECT_FALSE(info.include_usage);
  info = must_accept(R"({"model":"m","stream":true,"stream_options":{}})");
  EXPECT_FALSE(info.include_usage);
  info = must_accept(R"({"model":"m","stream":true,"stream_options":null})");
  EXPECT_FALSE(info.include_usage);
  // Nested elsewhere does not count.
  info = must_accept(R"({"model":"m","stream":true,"metadata":{"include_usage":true}})");
  EXPECT_FALSE(info.include_usage);
}

TEST(InspectRequest, StreamOptionsMustBeObject) {
  for (const char* body :
       {R"({"model":"m","stream_options":true})", R"({"model":"m","stream_options":[]})",
        R"({"model":"m","stream_options":"include_usage"})"}) {
    const InspectError error = must_reject(body);
    EXPECT_EQ(error.status, 400) << body;
    EXPECT_EQ(error.param, "stream_options") << body;
    EXPECT_EQ(error.code, "invalid_type") << body;
  }
  const InspectError error = must_reject(R"({"model":"m","stream_options":{"include_usage":1}})");
  EXPECT_EQ(error.status, 400);
  EXPECT_EQ(error.param, "stream_options.include_usage");
  EXPECT_EQ(error.code, "invalid_type");
}

TEST(InspectRequest, ContentTypeVariantsAccepted) {
  const std::string_view body = R"({"model":"m"})";
  for (const char* type : {"application/json", "application/json; charset=utf-8",
                           "Application/JSON", "APPLICATION/JSON;charset=UTF-8",
                           " application/json ", "application/json\t; charset=utf-8"}) {
    EXPECT_EQ(must_accept(body, type).model, "m") << type;
  }
}

TEST(InspectRequest, OtherContentTypesRejected) {
  const std::string_view body = R"({"model":"m"})";
  for (const char* type : {"", "text/plain", "application/jsonl", "application/json-seq",
                           "application/x-www-form-urlencoded", "multipart/form-data",
                           "application/vnd.api+json", "json", "application/ json", "text/json"}) {
    const InspectError error = must_reject(body, type);
    EXPECT_EQ(error.status, 415) << type;
    EXPECT_EQ(error.code, "unsupported_media_type") << type;
  }
}

TEST(InspectRequest, ContentTypeCheckedBeforeBody) {
  const InspectError error = must_reject("not json", "text/plain");
  EXPECT_EQ(error.status, 415);
}

TEST(InspectRequest, EmptyBody) {
  const InspectError error = must_reject("");
  EXPECT_EQ(error.status, 400);
  EXPECT_EQ(error.code, "invalid_json");
  EXPECT_EQ(error.param, "");
}

TEST(InspectRequest, InvalidJson) {
  for (const char* body :
       {"{", "{\"model\":\"m\"", "{\"model\":\"m\",}", "{model:\"m\"}", "   ",
        "{\"model\":\"m\"} trailing", "{\"model\":'m'}", "nul", "{\"model\":\"m\xff\"}"}) {
    const InspectError error = must_reject(body);
    EXPECT_EQ(error.status, 400) << body;
    EXPECT_EQ(error.code, "invalid_json") << body;
  }
}

TEST(InspectRequest, NotAnObject) {
  for (const char* body : {"[]", R"(["model","m"])", "\"model\"", "42", "null", "true"}) {
    const InspectError error = must_reject(body);
    EXPECT_EQ(error.status, 400) << body;
    EXPECT_EQ(error.code, "invalid_request") << body;
  }
}

TEST(InspectRequest, MissingModel) {
  for (const char* body :
       {"{}", R"({"messages":[]})", R"({"model":null})", R"({"model":""})", R"({"Model":"m"})"}) {
    const InspectError error = must_reject(body);
    EXPECT_EQ(error.status, 400) << body;
    EXPECT_EQ(error.param, "model") << body;
    EXPECT_EQ(error.code, "missing_model") << body;
  }
}

TEST(InspectRequest, ModelNotAString) {
  for (const char* body :
       {R"({"model":1})", R"({"model":true})", R"({"model":["m"]})", R"({"model":{"name":"m"}})"}) {
    const InspectError error = must_reject(body);
    EXPECT_EQ(error.status, 400) << body;
    EXPECT_EQ(error.param, "model") << body;
    EXPECT_EQ(error.code, "invalid_model") << body;
  }
}

TEST(InspectRequest, StreamNotBoolean) {
  for (const char* body : {R"({"model":"m","stream":"true"})", R"({"model":"m","stream":1})",
                           R"({"model":"m","stream":{}})"}) {
    const InspectError error = must_reject(body);
    EXPECT_EQ(error.status, 400) << body;
    EXPECT_EQ(error.param, "stream") << body;
    EXPECT_EQ(error.code, "invalid_type") << body;
  }
}

TEST(InspectRequest, ModelWithEscapesAndUnicode) {
  EXPECT_EQ(must_accept(R"({"model":"org\/name:q4 \u00e9"})").model, "org/name:q4 \xc3\xa9");
}

TEST(InspectRequest, NestingWithinLimitAccepted) {
  // 100 levels inside the top-level object: deeper than any real request, within the cap.
  std::string body = R"({"model":"m","x":)";
  body += std::string(100, '[') + std::string(100, ']') + "}";
  EXPECT_EQ(must_accept(body).model, "m");
}

TEST(InspectRequest, BracketsInsideStringsDoNotCount) {
  std::string body = R"({"model":"m","messages":[{"role":"user","content":")";
  body += std::string(10000, '[') + "\\\"" + std::string(10000, '{');
  body += R"("}]})";
  EXPECT_EQ(must_accept(body).model, "m");
}

TEST(InspectRequest, DeepNestingRejectedWithoutCrash) {
  const std::string arrays(100000, '[');
  InspectError error = must_reject(arrays);
  EXPECT_EQ(error.status, 400);
  EXPECT_EQ(error.code, "invalid_json");

  // Balanced and otherwise valid, so only the depth cap can reject it.
  std::string balanced = R"({"model":"m","x":)";
  balanced += std::string(100000, '[') + std::string(100000, ']') + "}";
  error = must_reject(balanced);
  EXPECT_EQ(error.status, 400);
  EXPECT_EQ(error.code, "invalid_json");

  std::string objects;
  for (int i = 0; i < 50000; ++i) {
    objects += R"({"a":)";
  }
  objects += "1" + std::string(50000, '}');
  error = must_reject(objects);
  EXPECT_EQ(error.code, "invalid_json");
}

TEST(InspectRequest, JustOverLimitRejected) {
  std::string body = R"({"model":"m","x":)";
  body += std::string(128, '[') + std::string(128, ']') + "}";  // 129 levels with the outer object
  EXPECT_EQ(must_reject(body).code, "invalid_json");
  body = R"({"model":"m","x":)";
  body += std::string(127, '[') + std::string(127, ']') + "}";  // exactly 128
  EXPECT_EQ(must_accept(body).model, "m");
}

TEST(InspectRequest, MessagesNeverEchoBody) {
  const std::string secret = "SECRET_PROMPT_TEXT";
  const std::string bodies[] = {
      "{\"model\":\"m\",\"messages\":\"" + secret + "\"",         // truncated
      "{\"model\":\"m\",\"messages\":[" + secret + "]}",          // bare word
      "[\"" + secret + "\"]",                                     // not an object
      "{\"messages\":\"" + secret + "\"}",                        // no model
      "{\"model\":[\"" + secret + "\"]}",                         // model not a string
      "{\"model\":\"m\",\"stream\":\"" + secret + "\"}",          // stream not a boolean
      "{\"model\":\"m\",\"stream_options\":\"" + secret + "\"}",  // options not an object
      secret,                                                     // not JSON at all
      std::string(200, '[') + "\"" + secret + "\"",               // too deep
  };
  for (const std::string& body : bodies) {
    const InspectError error = must_reject(body);
    EXPECT_EQ(error.message.find("SECRET"), std::string::npos) << error.message;
    EXPECT_EQ(error.message.find("PROMPT"), std::string::npos) << error.message;
  }
  const InspectError error = must_reject(secret, "text/" + secret);
  EXPECT_EQ(error.message.find("SECRET"), std::string::npos) << error.message;
}

TEST(InspectRequest, InvalidJsonMessageGivesOffset) {
  const InspectError error = must_reject(R"({"model": x})");
  EXPECT_NE(error.message.find("byte 11"), std::string::npos) << error.message;
}

}  // namespace
}  // namespace fg::openai

namespace fg::openai {
namespace {

TEST(InspectStreamUsage, SetsIncludeUsageAndKeepsTheRest) {
  auto out = with_stream_usage(
      R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]})");
  ASSERT_TRUE(out.has_value());
  auto info = std::get<RequestInfo>(inspect_request("application/json", *out));
  EXPECT_TRUE(info.include_usage);
  EXPECT_EQ(info.model, "m");
  EXPECT_NE(out->find(R"("messages":[{"role":"user","content":"hi"}])"), std::string::npos);
  // Member order is kept: "model" still comes first.
  EXPECT_EQ(out->find(R"({"model":"m")"), 0u);
}

TEST(InspectStreamUsage, OverridesAFalseIncludeUsageAndRefusesNonObjects) {
  auto out = with_stream_usage(R"({"model":"m","stream_options":{"include_usage":false,"x":1}})");
  ASSERT_TRUE(out.has_value());
  EXPECT_NE(out->find(R"("stream_options":{"include_usage":true,"x":1})"), std::string::npos);
  EXPECT_FALSE(with_stream_usage("[1,2]").has_value());
  EXPECT_FALSE(with_stream_usage("{oops").has_value());
}

InspectError must_reject_responses(std::string_view body) {
  auto result = inspect_request(Api::responses, kJson, body);
  if (std::holds_alternative<RequestInfo>(result)) {
    ADD_FAILURE() << "accepted: " << body;
    return {};
  }
  return std::get<InspectError>(result);
}

TEST(InspectResponses, StatelessRequestsPass) {
  for (
      std::string_view body :
      {R"({"model":"m","input":"hi"})", R"({"model":"m","input":"hi","store":false})",
       R"({"model":"m","input":"hi","previous_response_id":null,"store":null})",
       R"({"model":"m","input":[{"role":"user","content":"hi"},{"type":"message","role":"assistant","content":"yo"}],"stream":true})"}) {
    auto result = inspect_request(Api::responses, kJson, body);
    ASSERT_TRUE(std::holds_alternative<RequestInfo>(result)) << body;
  }
  // The same rules do not apply to other APIs (a chat body may carry "store").
  EXPECT_TRUE(std::holds_alternative<RequestInfo>(
      inspect_request(Api::openai, kJson, R"({"model":"m","messages":[],"store":true})")));
}

TEST(InspectResponses, StatefulRequestsAreRefusedNamingTheField) {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {R"({"model":"m","input":"hi","previous_response_id":"resp_1"})", "previous_response_id"},
      {R"({"model":"m","input":"hi","store":true})", "store"},
      {R"({"model":"m","input":"hi","conversation":"conv_1"})", "conversation"},
      {R"({"model":"m","input":"hi","background":true})", "background"},
      {R"({"model":"m","input":[{"type":"item_reference","id":"msg_1"}]})", "input"},
  };
  for (const auto& [body, param] : cases) {
    const InspectError e = must_reject_responses(body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.code, "unsupported_stateful_request") << body;
    EXPECT_EQ(e.param, param) << body;
    EXPECT_NE(e.message.find("no replica"), std::string::npos) << e.message;
  }
  // Model checks come first.
  EXPECT_EQ(must_reject_responses(R"({"input":"hi","store":true})").code, "missing_model");
}

}  // namespace
}  // namespace fg::openai

namespace fg::openai {
namespace {

// The one-pass scan must answer exactly as the DOM does: every case here goes through both and
// the answers are compared field by field (and the case says which answer it expects).
void expect_same(std::string_view body, Api api = Api::openai) {
  const auto fast = inspect_request(api, kJson, body);
  const auto dom = inspect_request_dom(api, kJson, body);
  ASSERT_EQ(fast.index(), dom.index()) << body;
  if (const auto* a = std::get_if<RequestInfo>(&fast)) {
    const auto& b = std::get<RequestInfo>(dom);
    EXPECT_EQ(a->model, b.model) << body;
    EXPECT_EQ(a->stream, b.stream) << body;
    EXPECT_EQ(a->include_usage, b.include_usage) << body;
    EXPECT_EQ(a->max_tokens, b.max_tokens) << body;
  } else {
    const auto& a_error = std::get<InspectError>(fast);
    const auto& b_error = std::get<InspectError>(dom);
    EXPECT_EQ(a_error.status, b_error.status) << body;
    EXPECT_EQ(a_error.code, b_error.code) << body;
    EXPECT_EQ(a_error.param, b_error.param) << body;
    EXPECT_EQ(a_error.message, b_error.message) << body;
  }
}

TEST(InspectScan, AcceptsWhatTheDomAcceptsWithTheSameFields) {
  for (
      std::string_view body : {
          R"({"model":"m"})",
          "\xEF\xBB\xBF{\"model\":\"m\"}",  // a leading BOM is skipped
          " \t\r\n{ \"model\" : \"m\" , \"stream\" : true } \n",
          R"({"stream":false,"model":"m","stream_options":null})",
          R"({"model":"m","stream":null,"stream_options":{"include_usage":null,"x":[1,{"y":2}]}})",
          R"({"model":"m","stream":true,"stream_options":{"include_usage":true}})",
          R"({"model":"m","messages":[{"role":"user","content":"caf\u00e9 \ud83d\ude00 \"q\" \\ \/ \b\f\n\r\t"}]})",
          "{\"model\":\"m\",\"t\":\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xED\x9F\xBF "
          "\xF4\x8F\xBF\xBF\"}",
          R"({"model":"m","n":[0,-0,1.5,-2e-3,1E+2,12345678901234567890123,1e-400,true,false,null]})",
          R"({"model":"m","model_x":"dup keys of other names are fine","x":1,"x":2})",
      }) {
    expect_same(body);
    EXPECT_TRUE(std::holds_alternative<RequestInfo>(inspect_request(kJson, body))) << body;
  }
}

// The answer's token limit (expected_finish's expected answer length) comes from the same pass:
// the first of max_completion_tokens, max_tokens, max_output_tokens that is an unsigned integer,
// as the DOM reads it.
TEST(InspectScan, ReadsTheAnswersTokenLimitAsTheDomDoes) {
  const std::pair<std::string_view, std::optional<std::uint32_t>> cases[] = {
      {R"({"model":"m"})", std::nullopt},
      {R"({"model":"m","max_tokens":8})", 8},
      {R"({"model":"m","max_tokens":0})", 0},
      {R"({"model":"m","max_output_tokens":300})", 300},
      {R"({"model":"m","max_tokens":8,"max_completion_tokens":16})", 16},
      {R"({"max_output_tokens":3,"model":"m","max_tokens":7})", 7},
      {R"({"model":"m","max_completion_tokens":"16","max_tokens":9})", 9},
      {R"({"model":"m","max_tokens":-1})", std::nullopt},
      {R"({"model":"m","max_tokens":5.0})", std::nullopt},
      {R"({"model":"m","max_tokens":1e3})", std::nullopt},
      {R"({"model":"m","max_tokens":null})", std::nullopt},
      {R"({"model":"m","max_tokens":-0})", std::nullopt},
      {R"({"model":"m","max_tokens":99999999999})", UINT32_MAX},
      {R"({"model":"m","max_tokens":18446744073709551615})", UINT32_MAX},
      {R"({"model":"m","max_tokens":18446744073709551616})", std::nullopt},  // a double to nlohmann
      {R"({"model":"m","opts":{"max_tokens":4}})", std::nullopt},  // only at the top level
  };
  for (const auto& [body, expected] : cases) {
    expect_same(body);
    const auto info = inspect_request(kJson, body);
    ASSERT_TRUE(std::holds_alternative<RequestInfo>(info)) << body;
    EXPECT_EQ(std::get<RequestInfo>(info).max_tokens, expected) << body;
  }
  // A repeated limit goes to the DOM, which keeps the last.
  const auto twice = inspect_request(kJson, R"({"model":"m","max_tokens":4,"max_tokens":6})");
  EXPECT_EQ(std::get<RequestInfo>(twice).max_tokens, 6u);
}

TEST(InspectScan, RefusesWhatTheDomRefusesWithTheDomsAnswer) {
  for (std::string_view body : {
           R"({"model":"m",})",
           R"({"model":"m"} x)",
           R"({"model":"m"}{})",
           R"([{"model":"m"}])",
           R"({"model":"m","x":01})",
           R"({"model":"m","x":1.})",
           R"({"model":"m","x":-})",
           R"({"model":"m","x":1e})",
           R"({"model":"m","x":1e400})",
           R"({"model":"m","x":-1E+999})",
           R"({"model":"m","x":"\ud83d"})",        // a high surrogate alone
           R"({"model":"m","x":"\ude00"})",        // a low surrogate alone
           R"({"model":"m","x":"\ud83d\u0041"})",  // high + not low
           R"({"model":"m","x":"\x"})",
           R"({"model":"m","x":"\u12G4"})",
           "{\"model\":\"m\",\"x\":\"a\tb\"}",              // a raw control character
           "{\"model\":\"m\",\"x\":\"\xC0\xAF\"}",          // overlong
           "{\"model\":\"m\",\"x\":\"\xED\xA0\x80\"}",      // an encoded surrogate
           "{\"model\":\"m\",\"x\":\"\xF4\x90\x80\x80\"}",  // past U+10FFFF
           "{\"model\":\"m\",\"x\":\"\xE2\x82\"}",          // cut short
           "\xEF\xBB{\"model\":\"m\"}",                     // half a BOM
           R"({"model":""})",
           R"({"model":null})",
           R"({"model":7})",
           R"({"stream":true})",
           R"({"model":"m","stream":"yes"})",
           R"({"model":"m","stream_options":[]})",
           R"({"model":"m","stream_options":{"include_usage":1}})",
           R"({"model":"m","x":tru})",
       }) {
    expect_same(body);
    EXPECT_TRUE(std::holds_alternative<InspectError>(inspect_request(kJson, body))) << body;
  }
}

// The scan reads string text eight bytes at a time: whatever ends a plain run (a quote, an
// escape, a control or a non-ASCII byte, valid or not) at every offset in and across a word
// gives the DOM's answer.
TEST(InspectScan, StringBytesAtEveryOffsetAsTheDom) {
  const std::string_view pieces[] = {
      "",     R"(\")", R"(\\)", R"(\u00e9)", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80",
      "\x7F", "\t",    "\x1F",  "\xC0\xAF",  "\xFF",     "\xE2\x82",     R"(\x)",
      "\x80",
  };
  for (std::size_t before = 0; before <= 17; ++before) {
    for (std::string_view piece : pieces) {
      const std::string text =
          std::string(before, 'x') + std::string(piece) + std::string(before % 9, 'y');
      expect_same(R"({"model":"m","messages":[{"role":"user","content":")" + text + R"("}]})");
      expect_same(R"({"model":")" + text + R"("})");
    }
  }
}

TEST(InspectScan, RepeatedOrEscapedKeysGoToTheDomWhichKeepsTheLast) {
  // nlohmann keeps the last of repeated keys; the scan leaves those bodies to it.
  expect_same(R"({"model":"a","model":"b"})");
  EXPECT_EQ(std::get<RequestInfo>(inspect_request(kJson, R"({"model":"a","model":"b"})")).model,
            "b");
  expect_same(R"({"model":"m","stream":true,"stream":false})");
  expect_same(R"({"model":"m","stream_options":{"include_usage":true,"include_usage":false}})");
  expect_same(R"({"mod\u0065l":"m"})");
  expect_same(R"({"model":"caf\u00e9"})");
  EXPECT_EQ(std::get<RequestInfo>(inspect_request(kJson, R"({"model":"caf\u00e9"})")).model,
            "caf\xC3\xA9");
}

TEST(InspectScan, NestingLimitAsTheDom) {
  std::string deep = R"({"model":"m","x":)";
  std::string within = deep;
  for (int i = 0; i < kMaxJsonDepth - 1; ++i) {
    within += '[';
  }
  within += std::string(kMaxJsonDepth - 1, ']') + "}";
  expect_same(within);
  EXPECT_TRUE(std::holds_alternative<RequestInfo>(inspect_request(kJson, within)));
  for (int i = 0; i < kMaxJsonDepth; ++i) {
    deep += '[';
  }
  deep += std::string(kMaxJsonDepth, ']') + "}";
  expect_same(deep);
  EXPECT_EQ(must_reject(deep).code, "invalid_json");
}

TEST(InspectScan, ResponsesApiGoesThroughTheDom) {
  expect_same(R"({"model":"m","input":"hi","store":true})", Api::responses);
  expect_same(R"({"model":"m","input":"hi"})", Api::responses);
}

// The splice gives the same document as the DOM rewrite, with every other byte unchanged.
void expect_splice(std::string_view body, std::string_view want) {
  const auto info = std::get<RequestInfo>(inspect_request(kJson, body));
  ASSERT_TRUE(info.usage_splice.has_value()) << body;
  const auto spliced = with_stream_usage(body, info);
  ASSERT_TRUE(spliced.has_value());
  EXPECT_EQ(*spliced, want);
  const auto dom = with_stream_usage(body);
  ASSERT_TRUE(dom.has_value());
  EXPECT_EQ(nlohmann::json::parse(*spliced), nlohmann::json::parse(*dom)) << body;
  EXPECT_TRUE(std::get<RequestInfo>(inspect_request(kJson, *spliced)).include_usage);
}

TEST(InspectScan, SplicesIncludeUsageByBytes) {
  expect_splice(R"({"model":"m","stream":true})",
                R"({"model":"m","stream":true,"stream_options":{"include_usage":true}})");
  expect_splice(R"({"model":"m", "stream_options" : null })",
                R"({"model":"m", "stream_options" : {"include_usage":true} })");
  expect_splice(R"({"model":"m","stream_options":{}})",
                R"({"model":"m","stream_options":{"include_usage":true}})");
  expect_splice(R"({"model":"m","stream_options":{"x":1} })",
                R"({"model":"m","stream_options":{"x":1,"include_usage":true} })");
  expect_splice(R"({"model":"m","stream_options":{"include_usage":false,"x":1}})",
                R"({"model":"m","stream_options":{"include_usage":true,"x":1}})");
  expect_splice(R"({"model":"m","stream_options":{"include_usage": null}} )",
                R"({"model":"m","stream_options":{"include_usage": true}} )");
  expect_splice("\xEF\xBB\xBF{\"model\":\"m\"}\n",
                "\xEF\xBB\xBF{\"model\":\"m\",\"stream_options\":{\"include_usage\":true}}\n");
  // Without the scan's findings (a DOM answer), the DOM rewrite.
  RequestInfo dom_info;
  EXPECT_EQ(*with_stream_usage(R"({"model":"m"})", dom_info),
            *with_stream_usage(R"({"model":"m"})"));
}

}  // namespace
}  // namespace fg::openai

namespace fg::openai {
namespace {

// The scan's prompt blocks equal prompt_blocks() of the parsed body (the DOM's rendering).
void expect_same_blocks(std::string_view body) {
  PromptBlocks scanned;
  const auto result = inspect_request(Api::openai, kJson, body, &scanned, 42);
  ASSERT_TRUE(std::holds_alternative<RequestInfo>(result)) << body;
  const PromptBlocks dom = prompt_blocks(nlohmann::json::parse(body), 42);
  EXPECT_EQ(scanned.bytes, dom.bytes) << body;
  EXPECT_EQ(scanned.hashes, dom.hashes) << body;
}

TEST(InspectScan, PromptBlocksAsTheDomRendersThem) {
  const std::string long_text(700, 'x');
  for (
      const std::string& body : {
          std::string(R"({"model":"m","messages":[{"role":"system","content":")") + long_text +
              R"("},{"content":"hi","role":"user"}]})",
          std::string(R"({"messages":[{"role":"user","content":[{"type":"text","text":")") +
              long_text +
              R"("},{"text":"not text","type":"image_url"},{"text":"caf\u00e9 \ud83d\ude00"},)"
              R"({"type":"text"},7,"s",{"type":1,"text":"no"}]},null,5,{"content":null},{"role":7}],"model":"m"})",
          std::string(R"({"model":"m","prompt":")") + long_text + R"(\n\"q\""})",
          std::string(R"({"model":"m","prompt":["a",1,")") + long_text + R"(",null]})",
          // "messages" wins over "prompt" when it is an array, whatever the order.
          std::string(R"({"model":"m","prompt":")") + long_text +
              R"(","messages":[{"role":"user","content":"hi"}]})",
          std::string(R"({"model":"m","messages":"not an array","prompt":")") + long_text + R"("})",
          std::string(R"({"model":"m","messages":[]})"),
          std::string(R"({"model":"m"})"),
      }) {
    expect_same_blocks(body);
  }
}

TEST(InspectScan, PromptBlocksFromTheDomWhenTheScanGivesUp) {
  // A repeated "messages": the DOM keeps the last, and its blocks are the last one's.
  expect_same_blocks(
      R"({"model":"m","messages":[{"role":"user","content":"a"}],"messages":[{"role":"user","content":"b"}]})");
  expect_same_blocks(R"({"model":"m","messages":[{"role":"user","content":"a","content":"b"}]})");
  // A refused request has no blocks.
  PromptBlocks blocks;
  blocks.bytes = 9;
  EXPECT_TRUE(std::holds_alternative<InspectError>(
      inspect_request(Api::openai, kJson, R"({"messages":[]})", &blocks, 1)));
}

}  // namespace
}  // namespace fg::openai
