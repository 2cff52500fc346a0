#include "common/config/yaml_reader.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace fg::yaml {
namespace {

Document parse(const std::string& text) {
  return Document::parse(text, "f.yaml");
}

std::string error_of(const std::function<void()>& run) {
  try {
    run();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string parse_error(const std::string& text) {
  return error_of([&] { parse(text); });
}

const std::vector<std::string> kTop = {"server", "models", "log"};
const std::vector<std::string> kServer = {"listen", "tls", "retries"};

TEST(ConfigYamlMap, LinesAndFullKeyPaths) {
  const Document doc = parse("server:\n  listen: 127.0.0.1:1\n  tls:\n    retries: 3\nlog:\n");
  const Map top = doc.root().map(kTop);
  ASSERT_EQ(top.entries().size(), 2u);
  EXPECT_EQ(top.entries()[0].key, "server");
  EXPECT_EQ(top.entries()[0].key_line, 1);
  const Map server = top.find("server")->map(kServer);
  EXPECT_EQ(server.path(), "server");
  EXPECT_EQ(server.line_of("listen"), 2);
  EXPECT_EQ(server.find("listen")->where(), "f.yaml:2: server.listen");
  const Map tls = server.find("tls")->map(kServer);
  EXPECT_EQ(tls.find("retries")->where(), "f.yaml:4: server.tls.retries");
  // A key written with no value: an empty map, blamed on the key's own line.
  const Map log = top.find("log")->map({"level"});
  EXPECT_TRUE(log.empty());
  EXPECT_EQ(log.line(), 5);
  EXPECT_EQ(error_of([&] { log.fail("level", "missing"); }), "f.yaml:5: log.level: missing");
  // An absent key is blamed on its map's line.
  EXPECT_EQ(server.line_of("retries"), 2);
}

TEST(ConfigYamlMap, UnknownDuplicateAndNonScalarKeys) {
  EXPECT_EQ(error_of([] { parse("servr: {}\n").root().map(kTop); }),
            "f.yaml:1: servr: unknown key; did you mean 'server'?");
  EXPECT_EQ(error_of([] { parse("log: {}\nzzz: 1\n").root().map(kTop); }),
            "f.yaml:2: zzz: unknown key");
  EXPECT_EQ(error_of([] { parse("log: {}\nlog: {}\n").root().map(kTop); }),
            "f.yaml:2: log: duplicate key");
  EXPECT_EQ(error_of([] { parse("? [a]\n: 1\n").root().map(kTop); }),
            "f.yaml:1: (root): keys must be plain names, got a list");
  EXPECT_EQ(error_of([] { parse("server: 5\n").root().map(kTop).find("server")->map(kServer); }),
            "f.yaml:1: server: expected a map, got \"5\"");
}

TEST(ConfigYamlList, ItemsKnowTheirIndexAndLine) {
  const Document doc = parse("models:\n  - a\n  - {x: 1}\n  -\n");
  const Map top = doc.root().map(kTop);
  const auto items = top.find("models")->list("a list of models");
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].where(), "f.yaml:2: models[0]");
  EXPECT_EQ(items[1].where(), "f.yaml:3: models[1]");
  EXPECT_TRUE(items[2].is_null());
  // No value is an empty list; a scalar or a map is not a list.
  EXPECT_TRUE(parse("models:\n").root().map(kTop).find("models")->list("a list").empty());
  EXPECT_EQ(error_of([] { parse("models: m\n").root().map(kTop).find("models")->list("a list"); }),
            "f.yaml:1: models: expected a list, got \"m\"");
}

TEST(ConfigYamlMap, TypedReaders) {
  const Map m = parse("listen: 0.0.0.0:1\ntls: true\nretries: 4\n").root().map(kServer);
  net::HostPort hp;
  EXPECT_TRUE(m.read_host_port("listen", hp, "127.0.0.1:8080"));
  EXPECT_EQ(hp.port, 1);
  bool b = false;
  EXPECT_TRUE(m.read_bool("tls", b));
  EXPECT_TRUE(b);
  std::uint32_t n = 0;
  EXPECT_TRUE(m.read_whole("retries", n, 1, 9));
  EXPECT_EQ(n, 4u);
  EXPECT_FALSE(m.read_whole("absent", n));
  EXPECT_EQ(n, 4u);
  EXPECT_EQ(error_of([&] { m.read_whole("retries", n, 5, 9); }),
            "f.yaml:3: retries: must be between 5 and 9, got 4");
}

TEST(ConfigYamlDocument, EmptyFilesAndComments) {
  EXPECT_TRUE(parse("").empty());
  EXPECT_TRUE(parse("# only a comment\n\n").empty());
  EXPECT_EQ(parse("").root().where(), "f.yaml:1: (root)");
}

TEST(ConfigYamlDocument, SyntaxAndSecondDocument) {
  EXPECT_EQ(parse_error("a: [1, 2\n").rfind("f.yaml:2: (syntax): ", 0), 0u) << parse_error("a: [1");
  EXPECT_EQ(parse_error("a: 1\n---\nb: 2\n"),
            "f.yaml:3: (root): only one YAML document is allowed (found a second '---')");
  // A bad second document is a syntax error even when the first is fine.
  EXPECT_EQ(parse_error("a: 1\n---\nb: [\n").rfind("f.yaml:", 0), 0u);
}

// yaml-cpp 0.7 loops forever on a ',' where a document should start (it reports an empty
// document without consuming the token, again and again): found by ./fleet fuzz
// (tests/fuzz/regressions/gateway_config/lone_comma). Each of these hung before the fix.
TEST(ConfigYamlDocument, ACommaWhereAValueShouldStartIsASyntaxErrorNotAHang) {
  EXPECT_EQ(parse_error(","), "f.yaml:1: (syntax): unexpected ',' where a value should start");
  EXPECT_EQ(parse_error(",,"), "f.yaml:1: (syntax): unexpected ',' where a value should start");
  EXPECT_EQ(parse_error(" ,"), "f.yaml:1: (syntax): unexpected ',' where a value should start");
  EXPECT_EQ(parse_error(",\na: 1\n"),
            "f.yaml:1: (syntax): unexpected ',' where a value should start");
  EXPECT_EQ(parse_error("- 1\n,"), "f.yaml:2: (syntax): unexpected ',' where a value should start");
  EXPECT_EQ(parse_error("[a]\n,"), "f.yaml:2: (syntax): unexpected ',' where a value should start");
  EXPECT_EQ(parse_error("...\n,"), "f.yaml:2: (syntax): unexpected ',' where a value should start");
  EXPECT_EQ(parse_error("%YAML 1.2\n---\n,"),
            "f.yaml:3: (syntax): unexpected ',' where a value should start");
  // Real documents, one after another, are still the "one document" error.
  EXPECT_EQ(parse_error("---\n---\n"),
            "f.yaml:3: (root): only one YAML document is allowed (found a second '---')");
}

// ---- Hostile input: nesting, loops, garbage ----

std::string nested_flow(int depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

TEST(ConfigYamlDepth, NestingUpToTheLimitIsRead) {
  EXPECT_EQ(parse_error(nested_flow(kMaxDepth)), "");
  std::string maps;
  for (int i = 0; i < kMaxDepth; ++i) {
    maps += std::string(2 * i, ' ') + "a:\n";
  }
  EXPECT_EQ(parse_error(maps + std::string(2 * kMaxDepth, ' ') + "x\n"), "");
}

TEST(ConfigYamlDepth, DeeperIsRefusedWithAClearMessage) {
  const std::string expected =
      "f.yaml:1: (root): maps and lists nested deeper than 32 levels; a configuration needs a "
      "handful";
  EXPECT_EQ(parse_error(nested_flow(kMaxDepth + 1)), expected);
  // Far beyond what yaml-cpp's recursive parser could take on a small stack.
  EXPECT_EQ(parse_error(nested_flow(100'000)), expected);
  EXPECT_EQ(parse_error(std::string(100'000, '[')), expected);
  std::string flow_maps;
  for (int i = 0; i < 100'000; ++i) {
    flow_maps += "{a: ";
  }
  EXPECT_EQ(parse_error(flow_maps), expected);
  std::string dashes;
  for (int i = 0; i < 50'000; ++i) {
    dashes += "- ";
  }
  EXPECT_EQ(parse_error(dashes + "x\n"), expected);
  std::string keys;
  for (int i = 0; i < 50'000; ++i) {
    keys += "? ";
  }
  EXPECT_EQ(parse_error(keys + "x\n"), expected);
}

TEST(ConfigYamlDepth, TheLineIsWhereTheLimitIsCrossed) {
  std::string maps = "top: 1\n";
  for (int i = 0; i < 40; ++i) {
    maps += std::string(i, ' ') + "a:\n";
  }
  // The root map (depth 1) opens on line 1 and the value of line k's "a:" on line k + 1, so depth
  // 33, the first one too deep, opens on line 34.
  EXPECT_EQ(parse_error(maps + std::string(40, ' ') + "x\n").rfind("f.yaml:34: (root): maps", 0),
            0u)
      << parse_error(maps);
}

TEST(ConfigYamlAlias, SharedNodesAreFineLoopsAreRefused) {
  const Document doc = parse("a: &h {interval: 5s}\nb: *h\n");
  EXPECT_TRUE(doc.root().map({"a", "b"}).find("b")->is_map());
  EXPECT_EQ(parse_error("a: &x [*x]\n"),
            "f.yaml:1: (root): an alias inside the node it refers to (a loop)");
  EXPECT_EQ(parse_error("a: &x {b: {c: *x}}\n"),
            "f.yaml:1: (root): an alias inside the node it refers to (a loop)");
  EXPECT_EQ(parse_error("a: *nowhere\n").rfind("f.yaml:1: (syntax): ", 0), 0u);
}

TEST(ConfigYamlGarbage, NeverCrashes) {
  // A small corpus of malformed input: each either parses or fails with a message.
  const std::vector<std::string> inputs = {
      std::string("\0\0\0", 3),
      "{",
      "[",
      "]",
      "}",
      ":",
      "- - - -",
      "? ? ?",
      "&a *a",
      "!!binary x",
      "!<tag:yaml.org,2002:map> 5",
      "%YAML 1.2\n---\na: 1\n...\n",
      "%TAG ! tag:x,2000:\n--- !a b\n",
      "a: |\n  text\n b: c\n",
      "a: >-\n\n\n",
      "\t- a\n",
      "a:\tb\n",
      "\"unterminated",
      "'unterminated",
      "a: \"\\xZZ\"\n",
      "a: \"\\U0010FFFF\\uD800\"\n",
      "\xEF\xBB\xBF"
      "a: 1\n",
      "\xFF\xFE\x00a",
      "[a, b]: c\n",
      "{? a, ? b}\n",
      "- &a [1, *a]\n",
      std::string(10'000, '-'),
      std::string(10'000, '#'),
      std::string(10'000, '\n'),
  };
  for (const std::string& input : inputs) {
    std::string error = parse_error(input);
    if (!error.empty()) {
      EXPECT_EQ(error.rfind("f.yaml:", 0), 0u) << error;
    }
  }
}

}  // namespace
}  // namespace fg::yaml
