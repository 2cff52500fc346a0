#include "common/sim/profiles.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fg::sim {
namespace {

const SimProfile& profile(std::string_view name) {
  const SimProfile* found = find_profile(name);
  EXPECT_NE(found, nullptr) << name;
  return *found;
}

constexpr std::string_view k9b = "qwen3.5-9b/snapdragon-8-elite";
constexpr std::string_view k4b = "qwen3.5-4b/snapdragon-8-elite";
constexpr std::string_view k08b = "qwen3.5-0.8b/snapdragon-8-elite";

TEST(SimProfiles, LookupKnownNames) {
  auto names = profile_names();
  EXPECT_EQ(names, (std::vector<std::string>{std::string(k9b), std::string(k4b), std::string(k08b),
                                             "fast-test"}));
  for (const auto& name : names) {
    const SimProfile* p = find_profile(name);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->name, name);
    EXPECT_EQ(p->parallel_decode_scaling.size(), p->slots);
    EXPECT_DOUBLE_EQ(p->parallel_decode_scaling[0], 1.0);
    EXPECT_FALSE(p->source.empty());
  }
  EXPECT_EQ(profile(k08b).slots, 4u);
  EXPECT_EQ(profile(k9b).slots, 1u);
  EXPECT_DOUBLE_EQ(profile(k9b).decode_tps, 9.3);
}

TEST(SimProfiles, UnknownNameIsNull) {
  EXPECT_EQ(find_profile("qwen3.5-9b"), nullptr);
  EXPECT_EQ(find_profile(""), nullptr);
  EXPECT_EQ(find_profile("FAST-TEST"), nullptr);
}

TEST(SimProfiles, EstimatesAreLabelled) {
  EXPECT_NE(profile(k4b).source.find("estimate"), std::string::npos);
  EXPECT_NE(profile(k08b).source.find("estimate"), std::string::npos);
}

TEST(SimProfiles, ListForMessages) {
  EXPECT_EQ(profile_list(),
            "qwen3.5-9b/snapdragon-8-elite, qwen3.5-4b/snapdragon-8-elite, "
            "qwen3.5-0.8b/snapdragon-8-elite, fast-test");
}

}  // namespace
}  // namespace fg::sim
