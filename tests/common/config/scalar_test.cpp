#include "common/config/scalar.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace fg::yaml {
namespace {

using std::chrono::milliseconds;

Scalar flag(const std::string& text) {
  return Scalar("--x", text);
}

Scalar yaml_value(const std::string& text) {
  return Scalar("f.yaml:3: a.b", text, "");
}

Scalar no_value() {
  return Scalar("f.yaml:3: a.b", std::nullopt, "nothing");
}

Scalar a_map() {
  return Scalar("f.yaml:3: a.b", std::nullopt, "a map");
}

// The message a read throws, or "" when it succeeds.
std::string error_of(const std::function<void()>& read) {
  try {
    read();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigScalarWhole, DigitsOnly) {
  EXPECT_EQ(flag("8").whole(), 8u);
  EXPECT_EQ(flag("007").whole(), 7u);
  EXPECT_EQ(flag("18446744073709551615").whole(), 18446744073709551615u);
  for (const char* bad : {"1.5", "1e3", "+5", "0x10", "1_000", " 8", "", "eight", "--1"}) {
    EXPECT_EQ(error_of([&] { flag(bad).whole(); }),
              "--x: expected a whole number, got \"" + std::string(bad) + "\"")
        << bad;
  }
  EXPECT_EQ(error_of([] { flag("-1").whole(); }), "--x: must not be negative, got -1");
}

TEST(ConfigScalarWhole, BoundsAndTheirMessages) {
  EXPECT_EQ(error_of([] { flag("0").whole(1, 1024); }), "--x: must be between 1 and 1024, got 0");
  EXPECT_EQ(error_of([] { flag("1025").whole(1, 1024); }),
            "--x: must be between 1 and 1024, got 1025");
  EXPECT_EQ(error_of([] { flag("99999999999999999999").whole(1, 1024); }),
            "--x: must be between 1 and 1024, got 99999999999999999999");
  // No upper bound of its own: the type's.
  EXPECT_EQ(error_of([] { flag("4294967296").whole32(); }),
            "--x: must be at most 4294967295, got 4294967296");
  EXPECT_EQ(error_of([] { flag("99999999999999999999").whole(); }),
            "--x: must be at most 18446744073709551615, got 99999999999999999999");
  EXPECT_EQ(error_of([] { flag("0").whole32(1); }), "--x: must be greater than 0");
  EXPECT_EQ(error_of([] { flag("1").whole32(2); }), "--x: must be at least 2, got 1");
  EXPECT_EQ(flag("4294967295").whole32(), 4294967295u);
  // An upper bound below 9: the overflow check does not wrap.
  EXPECT_EQ(error_of([] { flag("9").whole(0, 4); }), "--x: must be between 0 and 4, got 9");
  EXPECT_EQ(flag("4").whole(0, 4), 4u);
  EXPECT_EQ(flag("0").whole(0, 0), 0u);
}

TEST(ConfigScalarWhole, NoValueOrNotAScalar) {
  EXPECT_EQ(error_of([] { no_value().whole(); }),
            "f.yaml:3: a.b: expected a whole number, got nothing");
  EXPECT_EQ(error_of([] { a_map().whole(); }), "f.yaml:3: a.b: expected a whole number, got a map");
}

TEST(ConfigScalarNumber, DecimalsAndExponents) {
  EXPECT_DOUBLE_EQ(flag("0.05").number(), 0.05);
  EXPECT_DOUBLE_EQ(flag("10").number(), 10);
  EXPECT_DOUBLE_EQ(flag("-2.5").number(), -2.5);
  EXPECT_DOUBLE_EQ(flag("1e3").number(), 1000);
  EXPECT_DOUBLE_EQ(flag(".5").number(), 0.5);
  for (const char* bad : {"+1", "inf", ".inf", "nan", "0x1p3", "1,5", "", "1.5x", " 1", "1e999"}) {
    EXPECT_EQ(error_of([&] { flag(bad).number(); }),
              "--x: expected a number, got \"" + std::string(bad) + "\"")
        << bad;
  }
  EXPECT_EQ(error_of([] { flag("fast").number("a number greater than 0"); }),
            "--x: expected a number greater than 0, got \"fast\"");
  EXPECT_EQ(error_of([] { no_value().number(); }), "f.yaml:3: a.b: expected a number, got nothing");
}

TEST(ConfigScalarNumber, Ranges) {
  EXPECT_DOUBLE_EQ(flag("0.95").number_in(0, 0.95), 0.95);
  EXPECT_DOUBLE_EQ(flag("0").number_in(0, 1), 0);
  EXPECT_EQ(error_of([] { flag("2").number_in(0, 0.95); }),
            "--x: must be between 0 and 0.95, got 2");
  EXPECT_EQ(error_of([] { flag("-1").number_in(0, 1); }), "--x: must be between 0 and 1, got -1");
}

TEST(ConfigScalarBool, TrueAndFalseOnly) {
  for (const char* t : {"true", "True", "TRUE"}) {
    EXPECT_TRUE(yaml_value(t).boolean()) << t;
  }
  for (const char* f : {"false", "False", "FALSE"}) {
    EXPECT_FALSE(yaml_value(f).boolean()) << f;
  }
  // YAML 1.1 reads these as booleans and YAML 1.2 as strings: ambiguous, so refused.
  for (const char* bad : {"yes", "no", "on", "off", "y", "n", "1", "0", "maybe", ""}) {
    EXPECT_EQ(error_of([&] { yaml_value(bad).boolean(); }),
              "f.yaml:3: a.b: expected true or false, got \"" + std::string(bad) + "\"")
        << bad;
  }
  EXPECT_EQ(error_of([] { no_value().boolean(); }),
            "f.yaml:3: a.b: expected true or false, got nothing");
}

TEST(ConfigScalarDuration, UnitsAndExamples) {
  EXPECT_EQ(flag("250ms").duration(milliseconds(30'000), false), milliseconds(250));
  EXPECT_EQ(flag("30s").duration(milliseconds(30'000), false), milliseconds(30'000));
  EXPECT_EQ(flag("5m").duration(milliseconds(30'000), false), milliseconds(300'000));
  EXPECT_EQ(flag("1h").duration(milliseconds(30'000), false), milliseconds(3'600'000));
  EXPECT_EQ(flag("0s").duration(milliseconds(30'000), true), milliseconds(0));
  // The example is the key's default, in seconds when it is whole seconds.
  EXPECT_EQ(error_of([] { flag("ten").duration(milliseconds(600'000), false); }),
            "--x: expected a duration such as 600s, got \"ten\"");
  EXPECT_EQ(error_of([] { flag("ten").duration(milliseconds(1'500), false); }),
            "--x: expected a duration such as 1500ms, got \"ten\"");
  EXPECT_EQ(error_of([] { flag("-5s").duration(milliseconds(30'000), false); }),
            "--x: expected a duration such as 30s, got \"-5s\"");
  EXPECT_EQ(error_of([] { flag("0ms").duration(milliseconds(30'000), false); }),
            "--x: must be greater than 0");
  EXPECT_EQ(error_of([] { no_value().duration(milliseconds(30'000), false); }),
            "f.yaml:3: a.b: expected a duration such as 30s, got nothing");
}

TEST(ConfigScalarDuration, HintsForBareAndFractionalNumbers) {
  EXPECT_EQ(error_of([] { flag("30").duration(milliseconds(30'000), false); }),
            "--x: expected a duration such as 30s, got \"30\" (add a unit: ms, s, m or h)");
  EXPECT_EQ(error_of([] { flag("1.5").duration(milliseconds(30'000), false); }),
            "--x: expected a duration such as 30s, got \"1.5\" (add a unit: ms, s, m or h)");
  EXPECT_EQ(error_of([] { flag("1.5s").duration(milliseconds(30'000), false); }),
            "--x: expected a duration such as 30s, got \"1.5s\" (whole numbers only: write "
            "1500ms)");
  EXPECT_EQ(error_of([] { flag("0.5m").duration(milliseconds(30'000), false); }),
            "--x: expected a duration such as 30s, got \"0.5m\" (whole numbers only: write 30s)");
  // Not a whole number of milliseconds: no suggestion.
  EXPECT_EQ(error_of([] { flag("0.5ms").duration(milliseconds(30'000), false); }),
            "--x: expected a duration such as 30s, got \"0.5ms\"");
  EXPECT_EQ(error_of([] { flag("10 s").duration(milliseconds(30'000), false); }),
            "--x: expected a duration such as 30s, got \"10 s\"");
}

TEST(ConfigScalarString, AnyTextNoValueIsEmpty) {
  EXPECT_EQ(yaml_value("a b").string(), "a b");
  EXPECT_EQ(no_value().string(), "");
  EXPECT_EQ(error_of([] { a_map().string(); }), "f.yaml:3: a.b: expected a string, got a map");
  EXPECT_EQ(error_of([] { no_value().text("a URL pattern"); }),
            "f.yaml:3: a.b: expected a URL pattern, got nothing");
}

TEST(ConfigScalarEnvName, EmptyOrAName) {
  EXPECT_EQ(yaml_value("FLEETGATE_API_KEYS").env_name(), "FLEETGATE_API_KEYS");
  EXPECT_EQ(yaml_value("_k9").env_name(), "_k9");
  EXPECT_EQ(no_value().env_name(), "");
  EXPECT_EQ(yaml_value("").env_name(), "");
  EXPECT_EQ(error_of([] { yaml_value("MY-KEYS").env_name(); }),
            "f.yaml:3: a.b: expected an environment variable name (letters, digits, '_'; not "
            "starting with a digit), got \"MY-KEYS\"");
}

TEST(ConfigScalarAddress, HostPortAndUrl) {
  EXPECT_EQ(yaml_value("[::1]:9090").host_port("127.0.0.1:8080").to_string(), "[::1]:9090");
  EXPECT_EQ(error_of([] { yaml_value("localhost").host_port("127.0.0.1:8080"); }),
            "f.yaml:3: a.b: expected host:port such as 127.0.0.1:8080, got \"localhost\" (missing "
            "port)");
  EXPECT_EQ(error_of([] { a_map().host_port("127.0.0.1:8080"); }),
            "f.yaml:3: a.b: expected host:port such as 127.0.0.1:8080, got a map");
  EXPECT_EQ(yaml_value("https://X.acu.run:443/").url("https://a").to_string(), "https://x.acu.run");
  EXPECT_EQ(error_of([] { yaml_value("ftp://x").url("https://a1b2c3.acu.run"); }),
            "f.yaml:3: a.b: invalid URL \"ftp://x\": scheme must be http or https (expected an "
            "http(s) URL such as https://a1b2c3.acu.run)");
  EXPECT_EQ(error_of([] { no_value().url("https://a1b2c3.acu.run"); }),
            "f.yaml:3: a.b: expected an http(s) URL such as https://a1b2c3.acu.run, got nothing");
}

TEST(ConfigScalarOneOf, ExactChoices) {
  const std::vector<std::string> levels = {"debug", "info", "warn", "error"};
  EXPECT_EQ(yaml_value("warn").one_of(levels), "warn");
  EXPECT_EQ(error_of([&] { yaml_value("INFO").one_of(levels); }),
            "f.yaml:3: a.b: expected one of debug, info, warn, error, got \"INFO\"");
}

TEST(ConfigScalarQuoted, EscapesAndShortens) {
  EXPECT_EQ(quote("ten"), "\"ten\"");
  EXPECT_EQ(quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(quote("a\nb\tc\x01"), "\"a\\nb\\tc\\x01\"");
  const std::string long_text(1000, 'x');
  EXPECT_EQ(quote(long_text), "\"" + std::string(100, 'x') + "\" (1000 characters)");
}

TEST(ConfigScalarDuration, ExampleSpelling) {
  EXPECT_EQ(duration_example(milliseconds(600'000)), "600s");
  EXPECT_EQ(duration_example(milliseconds(1'500)), "1500ms");
  EXPECT_EQ(duration_example(milliseconds(0)), "0s");
}

}  // namespace
}  // namespace fg::yaml
