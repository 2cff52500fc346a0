#include "common/openai/inspect.hpp"

#include <string>

#include <gtest/gtest.h>

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
