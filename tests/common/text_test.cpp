#include "common/util/text.hpp"

#include <gtest/gtest.h>

namespace fg {
namespace {

TEST(TextEditDistance, CountsEdits) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("slots", "slots"), 0u);
  EXPECT_EQ(edit_distance("solts", "slots"), 2u);
  EXPECT_EQ(edit_distance("endpoint", "endpoints"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
}

TEST(TextClosestWord, WithinTwoEditsOnly) {
  const std::vector<std::string> known = {"listen", "slots", "endpoints"};
  EXPECT_EQ(closest_word("endpoint", known), "endpoints");
  EXPECT_EQ(closest_word("slot", known), "slots");
  EXPECT_EQ(closest_word("completely-else", known), "");
}

TEST(TextEnvName, Rules) {
  EXPECT_TRUE(is_env_name("FLEETGATE_API_KEYS"));
  EXPECT_TRUE(is_env_name("_x1"));
  EXPECT_FALSE(is_env_name(""));
  EXPECT_FALSE(is_env_name("1ABC"));
  EXPECT_FALSE(is_env_name("A-B"));
}

}  // namespace
}  // namespace fg

namespace fg {
namespace {

TEST(TextBearer, ExactTokenOnly) {
  EXPECT_TRUE(bearer_matches("Bearer sk-1", "sk-1"));
  EXPECT_FALSE(bearer_matches("Bearer sk-2", "sk-1"));
  EXPECT_FALSE(bearer_matches("Bearer sk-1x", "sk-1"));
  EXPECT_FALSE(bearer_matches("bearer sk-1", "sk-1"));
  EXPECT_FALSE(bearer_matches("Basic sk-1", "sk-1"));
  EXPECT_FALSE(bearer_matches("Bearer ", ""));
  EXPECT_FALSE(bearer_matches("", "sk-1"));
}

}  // namespace
}  // namespace fg
