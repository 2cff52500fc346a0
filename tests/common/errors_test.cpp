#include "common/openai/errors.hpp"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

namespace fg::openai {
namespace {

using nlohmann::json;

TEST(ErrorsBody, FullShape) {
  const json body = json::parse(
      error_body("model not found", "invalid_request_error", "model_not_found", "model"));
  ASSERT_TRUE(body.is_object());
  ASSERT_EQ(body.size(), 1u);
  const json& error = body.at("error");
  ASSERT_EQ(error.size(), 4u);
  EXPECT_EQ(error.at("message"), "model not found");
  EXPECT_EQ(error.at("type"), "invalid_request_error");
  EXPECT_EQ(error.at("code"), "model_not_found");
  EXPECT_EQ(error.at("param"), "model");
}

TEST(ErrorsBody, EmptyCodeAndParamAreNull) {
  const json error = json::parse(error_body("boom", "server_error")).at("error");
  ASSERT_TRUE(error.contains("code"));
  ASSERT_TRUE(error.contains("param"));
  EXPECT_TRUE(error.at("code").is_null());
  EXPECT_TRUE(error.at("param").is_null());
  EXPECT_EQ(error.at("message"), "boom");
}

TEST(ErrorsBody, FieldOrderMatchesOpenAI) {
  EXPECT_EQ(error_body("m", "t", "c", "p"),
            R"({"error":{"message":"m","type":"t","param":"p","code":"c"}})");
  EXPECT_EQ(error_body("m", "t"),
            R"({"error":{"message":"m","type":"t","param":null,"code":null}})");
}

TEST(ErrorsBody, EscapesSpecialCharacters) {
  const std::string message = "quote \" backslash \\ newline \n tab \t ctrl \x01 </script>";
  const std::string text = error_body(message, "invalid_request_error");
  EXPECT_EQ(text.find('\n'), std::string::npos);  // one line: safe inside an SSE data field
  EXPECT_EQ(json::parse(text).at("error").at("message"), message);
}

TEST(ErrorsBody, InvalidUtf8DoesNotThrow) {
  std::string text;
  ASSERT_NO_THROW(text = error_body("bad \xff\xfe model", "invalid_request_error"));
  const json error = json::parse(text).at("error");  // still valid JSON
  EXPECT_EQ(error.at("message"), "bad \xEF\xBF\xBD\xEF\xBF\xBD model");
}

TEST(ErrorsBody, Utf8Preserved) {
  const std::string message = "mod\xc3\xa8le \xe2\x9c\x93";
  EXPECT_EQ(json::parse(error_body(message, "t")).at("error").at("message"), message);
}

TEST(ErrorsType, ForStatus) {
  EXPECT_EQ(error_type_for_status(400), "invalid_request_error");
  EXPECT_EQ(error_type_for_status(401), "authentication_error");
  EXPECT_EQ(error_type_for_status(404), "invalid_request_error");
  EXPECT_EQ(error_type_for_status(413), "invalid_request_error");
  EXPECT_EQ(error_type_for_status(415), "invalid_request_error");
  EXPECT_EQ(error_type_for_status(429), "rate_limit_error");
  EXPECT_EQ(error_type_for_status(500), "server_error");
  EXPECT_EQ(error_type_for_status(502), "server_error");
  EXPECT_EQ(error_type_for_status(503), "server_error");
  EXPECT_EQ(error_type_for_status(504), "server_error");
  EXPECT_EQ(error_type_for_status(599), "server_error");
}

TEST(ErrorsType, NonErrorStatusIsServerError) {
  // A gateway bug that reports an error with status 200 must not blame the client.
  EXPECT_EQ(error_type_for_status(0), "server_error");
  EXPECT_EQ(error_type_for_status(200), "server_error");
  EXPECT_EQ(error_type_for_status(302), "server_error");
}

TEST(ApiErrors, AnthropicShapeAndTypes) {
  const json body =
      json::parse(api_error_body(Api::anthropic, 404, "no such model", "model_not_found"));
  EXPECT_EQ(
      body,
      json::parse(
          R"({"type":"error","error":{"type":"not_found_error","message":"no such model"}})"));
  EXPECT_EQ(anthropic_error_type(400), "invalid_request_error");
  EXPECT_EQ(anthropic_error_type(401), "authentication_error");
  EXPECT_EQ(anthropic_error_type(405), "invalid_request_error");
  EXPECT_EQ(anthropic_error_type(413), "request_too_large");
  EXPECT_EQ(anthropic_error_type(429), "rate_limit_error");
  EXPECT_EQ(anthropic_error_type(500), "api_error");
  EXPECT_EQ(anthropic_error_type(502), "api_error");
  EXPECT_EQ(anthropic_error_type(503), "overloaded_error");
  EXPECT_EQ(anthropic_error_type(504), "timeout_error");
}

TEST(ApiErrors, OpenAiAndResponsesKeepOpenAiShape) {
  for (Api api : {Api::openai, Api::responses}) {
    EXPECT_EQ(api_error_body(api, 429, "full", "queue_full"),
              error_body("full", "rate_limit_error", "queue_full"));
  }
}

TEST(ApiErrors, ReplicaErrorsAreReshapedForAnthropicOnly) {
  const std::string openai_error = error_body("'max_tokens' is required", "invalid_request_error");
  EXPECT_FALSE(reshaped_error(Api::openai, 400, openai_error));
  EXPECT_FALSE(reshaped_error(Api::responses, 400, openai_error));
  auto reshaped = reshaped_error(Api::anthropic, 400, openai_error);
  ASSERT_TRUE(reshaped);
  EXPECT_EQ(
      json::parse(*reshaped),
      json::parse(
          R"({"type":"error","error":{"type":"invalid_request_error","message":"'max_tokens' is required"}})"));
  // Already Anthropic's: unchanged.
  EXPECT_FALSE(reshaped_error(Api::anthropic, 400, *reshaped));
  // Unreadable: the status says it.
  auto plain = reshaped_error(Api::anthropic, 422, "Unprocessable");
  ASSERT_TRUE(plain);
  EXPECT_EQ(json::parse(*plain)["error"]["message"], "the replica answered HTTP 422");
}

}  // namespace
}  // namespace fg::openai
