#include "common/log/log.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace fg::log {
namespace {

constexpr std::string_view kTs = "2026-12-02T14:35:00.123Z";

TEST(LogFormat, AutoIsTextOnATerminalAndJsonOtherwise) {
  Format f = Format::json;
  ASSERT_TRUE(parse_format("auto", &f, true));
  EXPECT_EQ(f, Format::text);
  ASSERT_TRUE(parse_format("auto", &f, false));
  EXPECT_EQ(f, Format::json);
  ASSERT_TRUE(parse_format("text", &f, false));
  EXPECT_EQ(f, Format::text);
  ASSERT_TRUE(parse_format("json", &f, true));
  EXPECT_EQ(f, Format::json);
  EXPECT_FALSE(parse_format("JSON", &f, true));
  EXPECT_FALSE(parse_format("", &f, true));
  EXPECT_EQ(to_string(Format::text), "text");
}

TEST(LogFormat, JsonIsOneObjectPerLineWithTheHeaderFirst) {
  const std::string line = format_line(Format::json, kTs, Level::warn, "replica state changed",
                                       {{"replica", "r1"}, {"slots", 4}, {"msg", "forged"}});
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["ts"], kTs);
  EXPECT_EQ(j["level"], "warn");
  EXPECT_EQ(j["msg"], "replica state changed");  // a field cannot overwrite the header
  EXPECT_EQ(j["replica"], "r1");
  EXPECT_EQ(j["slots"], 4);
  EXPECT_EQ(line.rfind(R"({"ts":)", 0), 0u);
}

TEST(LogFormat, TextIsOneReadableLine) {
  const std::string line =
      format_line(Format::text, kTs, Level::info, "listening",
                  {{"listener", "public"}, {"address", "127.0.0.1:8080"}, {"tls", false}});
  EXPECT_EQ(line,
            "2026-12-02T14:35:00.123Z INFO  listening listener=public address=127.0.0.1:8080 "
            "tls=false\n");
}

TEST(LogFormat, TextQuotesValuesThatAreNotOneWordAndNeverBreaksTheLine) {
  const std::string line = format_line(Format::text, kTs, Level::error, "cannot\nstart",
                                       {{"error", "bind: address in use"},
                                        {"evil", "x\nfake=1 \"quoted\""},
                                        {"empty", ""},
                                        {"list", nlohmann::json::array({1, 2})},
                                        {"null", nullptr},
                                        {"ratio", 0.5},
                                        {"bad key=", "v"}});
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  EXPECT_EQ(line,
            "2026-12-02T14:35:00.123Z ERROR cannot start error=\"bind: address in use\" "
            "evil=\"x\\nfake=1 \\\"quoted\\\"\" empty=\"\" list=[1,2] null=null ratio=0.5 "
            "bad_key_=v\n");
}

TEST(LogFormat, TextKeepsEveryLevelTheSameWidth) {
  for (Level level : {Level::debug, Level::info, Level::warn, Level::error}) {
    const std::string line = format_line(Format::text, kTs, level, "m", {});
    EXPECT_EQ(line.substr(kTs.size() + 6), " m\n") << line;
  }
}

TEST(LogFormat, InvalidUtf8IsReplacedNotThrown) {
  const std::string bad = "\xff\xfe";
  EXPECT_NO_THROW(format_line(Format::json, kTs, Level::info, "m", {{"v", bad}}));
  EXPECT_NO_THROW(format_line(Format::text, kTs, Level::info, "m", {{"v", bad}}));
}

}  // namespace
}  // namespace fg::log
