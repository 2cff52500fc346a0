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
  EXPECT_FALSE(bearer_matches("Bearer sk-", "sk-1"));
  EXPECT_FALSE(bearer_matches("Basic sk-1", "sk-1"));
  EXPECT_FALSE(bearer_matches("Bearer ", ""));
  EXPECT_FALSE(bearer_matches("Bearer", "Bearer"));
  EXPECT_FALSE(bearer_matches("", "sk-1"));
  EXPECT_FALSE(bearer_matches("sk-1", "sk-1"));
}

// RFC 9110 section 11.1: the scheme is case-insensitive; one or more spaces follow it.
TEST(TextBearer, SchemeIsCaseInsensitive) {
  EXPECT_TRUE(bearer_matches("bearer sk-1", "sk-1"));
  EXPECT_TRUE(bearer_matches("BEARER sk-1", "sk-1"));
  EXPECT_TRUE(bearer_matches("bEaReR   sk-1", "sk-1"));
  EXPECT_FALSE(bearer_matches("Bearersk-1", "sk-1"));
  EXPECT_FALSE(bearer_matches("Bearer\tsk-1", "sk-1"));
  EXPECT_FALSE(bearer_matches("Bearer SK-1", "sk-1"));  // the credentials are not
  EXPECT_EQ(bearer_credentials("bearer  abc"), std::optional<std::string_view>("abc"));
  EXPECT_EQ(bearer_credentials("Bearer    "), std::nullopt);
  EXPECT_EQ(bearer_credentials("Token abc"), std::nullopt);
}

TEST(TextBearer, KeySetMatchesAnyKeyAndIgnoresEmptyOnes) {
  const BearerKeys none;
  EXPECT_TRUE(none.empty());
  EXPECT_FALSE(none.matches("Bearer x"));
  const BearerKeys keys({"sk-alpha", "", "sk-beta-longer-key"});
  EXPECT_EQ(keys.size(), 2u);
  EXPECT_TRUE(keys.matches("Bearer sk-alpha"));
  EXPECT_TRUE(keys.matches("bearer sk-beta-longer-key"));
  EXPECT_FALSE(keys.matches("Bearer sk-alph"));
  EXPECT_FALSE(keys.matches("Bearer "));
  EXPECT_FALSE(keys.matches(""));
  EXPECT_FALSE(keys.matches("sk-alpha"));
}

TEST(TextControlCharacters, CrLfTabNulAndDel) {
  EXPECT_FALSE(has_control_character("sk-abc_DEF.123 with space"));
  EXPECT_FALSE(has_control_character("caf\xc3\xa9"));
  EXPECT_TRUE(has_control_character("sk\r\nX-Injected: 1"));
  EXPECT_TRUE(has_control_character("sk\n"));
  EXPECT_TRUE(has_control_character("a\tb"));
  EXPECT_TRUE(has_control_character(std::string_view("a\0b", 3)));
  EXPECT_TRUE(has_control_character("a\x7f"));
}

}  // namespace
}  // namespace fg
