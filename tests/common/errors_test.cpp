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

}  // namespace
}  // namespace fg::openai
