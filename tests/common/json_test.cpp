#include "common/util/json.hpp"

#include <gtest/gtest.h>

#include <string>

namespace fg {
namespace {

std::string nested_arrays(int levels) {
  return std::string(static_cast<std::size_t>(levels), '[') +
         std::string(static_cast<std::size_t>(levels), ']');
}

TEST(JsonDepth, CountsArraysAndObjects) {
  EXPECT_TRUE(json_depth_within(nested_arrays(kMaxJsonDepth)));
  EXPECT_FALSE(json_depth_within(nested_arrays(kMaxJsonDepth + 1)));
  EXPECT_TRUE(json_depth_within(R"({"a":{"b":[1]}})", 3));
  EXPECT_FALSE(json_depth_within(R"({"a":{"b":[1]}})", 2));
}

TEST(JsonDepth, BracketsInsideStringsDoNotCount) {
  EXPECT_TRUE(json_depth_within(R"({"a":"[[[[[[{{{{\"[[["})", 1));
}

TEST(JsonDepth, ClosingBeyondZeroDoesNotGoNegative) {
  EXPECT_FALSE(json_depth_within("]]]]" + nested_arrays(3), 2));
}

TEST(ParseNetworkJson, RefusesDeepDocumentsWithoutRecursing) {
  // 100,000 levels: parsing, copying or dumping this would overflow the stack.
  JsonError error = JsonError::none;
  auto doc = parse_network_json(R"({"device":{"a":)" + nested_arrays(100000) + "}}", &error);
  EXPECT_TRUE(doc.is_discarded());
  EXPECT_EQ(error, JsonError::too_deep);
}

TEST(ParseNetworkJson, InvalidAndValid) {
  JsonError error = JsonError::none;
  EXPECT_TRUE(parse_network_json("{\"a\":", &error).is_discarded());
  EXPECT_EQ(error, JsonError::invalid);
  auto doc = parse_network_json(R"({"a":[1,2]})", &error);
  EXPECT_EQ(error, JsonError::none);
  EXPECT_EQ(doc["a"][1], 2);
}

}  // namespace
}  // namespace fg
