#include "orchestrator/cli/batch_report.hpp"

#include <gtest/gtest.h>

namespace fg::cli {
namespace {

using std::chrono::milliseconds;

std::optional<BatchArgs> parse(std::vector<std::string> args, const char* url = nullptr,
                               const char* key = nullptr, std::string* error = nullptr) {
  std::string e;
  auto r = parse_batch_args(args, url, key, error ? error : &e);
  return r;
}

std::string parse_error(std::vector<std::string> args) {
  std::string e;
  EXPECT_FALSE(parse_batch_args(args, nullptr, nullptr, &e)) << "accepted";
  return e;
}

TEST(BatchArgs, SubmitWithFlagsAnywhere) {
  auto a = parse({"--url", "http://gw:8080", "submit", "in.jsonl", "--endpoint", "/v1/embeddings",
                  "--wait", "--metadata", "run=nightly", "--api-key", "k1"});
  ASSERT_TRUE(a);
  EXPECT_EQ(a->verb, BatchVerb::submit);
  EXPECT_EQ(a->target, "in.jsonl");
  EXPECT_EQ(a->url, "http://gw:8080");
  EXPECT_EQ(a->api_key, "k1");
  EXPECT_EQ(a->endpoint, "/v1/embeddings");
  EXPECT_TRUE(a->wait);
  ASSERT_EQ(a->metadata.size(), 1u);
  EXPECT_EQ(a->metadata[0].first, "run");
  EXPECT_EQ(a->metadata[0].second, "nightly");
  EXPECT_EQ(a->window, "24h");
}

TEST(BatchArgs, EnvironmentGivesDefaultsAndFlagsWin) {
  auto a = parse({"list"}, "http://env:1", "env-key");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->url, "http://env:1");
  EXPECT_EQ(a->api_key, "env-key");
  a = parse({"list", "--url", "http://flag:2", "--api-key", "flag-key"}, "http://env:1", "env-key");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->url, "http://flag:2");
  EXPECT_EQ(a->api_key, "flag-key");
  a = parse({"list"});
  ASSERT_TRUE(a);
  EXPECT_EQ(a->url, kDefaultGatewayUrl);
  EXPECT_EQ(a->api_key, "");
}

TEST(BatchArgs, EachCommandAndItsOwnFlags) {
  auto a = parse({"download", "batch_1", "--out", "o.jsonl", "--errors"});
  ASSERT_TRUE(a);
  EXPECT_EQ(a->verb, BatchVerb::download);
  EXPECT_EQ(a->out, "o.jsonl");
  EXPECT_TRUE(a->errors);
  a = parse({"list", "--limit", "5", "--after", "batch_9", "--json"});
  ASSERT_TRUE(a);
  EXPECT_EQ(a->limit, 5);
  EXPECT_EQ(a->after, "batch_9");
  EXPECT_TRUE(a->json);
  a = parse({"wait", "batch_1", "--poll-interval", "200ms"});
  ASSERT_TRUE(a);
  EXPECT_EQ(a->verb, BatchVerb::wait);
  EXPECT_EQ(a->poll_interval, milliseconds(200));
  EXPECT_EQ(parse({"cancel", "b"})->verb, BatchVerb::cancel);
  EXPECT_EQ(parse({"status", "b"})->verb, BatchVerb::status);
  EXPECT_TRUE(parse({"--help"})->help);
}

TEST(BatchArgs, ClearErrors) {
  EXPECT_EQ(parse_error({}), "missing command (submit, status, list, cancel, wait or download)");
  EXPECT_EQ(parse_error({"frobnicate"}),
            "unknown command 'frobnicate' (submit, status, list, cancel, wait or download)");
  EXPECT_EQ(parse_error({"submit"}), "submit takes one JSONL file");
  EXPECT_EQ(parse_error({"status"}), "status takes one batch id");
  EXPECT_EQ(parse_error({"status", "a", "b"}), "status takes one batch id");
  EXPECT_EQ(parse_error({"list", "x"}), "list takes no other argument, got 'x'");
  EXPECT_EQ(parse_error({"list", "--url"}), "--url needs a value");
  EXPECT_EQ(parse_error({"list", "--bogus"}), "unknown argument '--bogus'");
  EXPECT_EQ(parse_error({"list", "--limit", "0"}),
            "--limit must be a whole number from 1 to 100, not '0'");
  EXPECT_EQ(parse_error({"list", "--limit", "1x"}),
            "--limit must be a whole number from 1 to 100, not '1x'");
  EXPECT_EQ(parse_error({"submit", "f", "--endpoint", "chat"}),
            "--endpoint must be a /v1/ path such as /v1/chat/completions, not 'chat'");
  EXPECT_EQ(parse_error({"submit", "f", "--metadata", "novalue"}),
            "--metadata takes key=value, not 'novalue'");
  EXPECT_EQ(parse_error({"status", "b", "--wait"}),
            "--wait is for submit (use `fleetgate batch wait ID` for an existing batch)");
  EXPECT_EQ(parse_error({"status", "b", "--out", "x"}), "--out and --errors are for download");
  EXPECT_EQ(parse_error({"status", "b", "--limit", "3"}), "--limit and --after are for list");
  EXPECT_EQ(parse_error({"cancel", "b", "--json"}), "--json is for status and list");
  EXPECT_EQ(parse_error({"wait", "b", "--poll-interval", "1"}),
            "--poll-interval must be a duration of at least 10ms such as 500ms or 2s, not '1'");
}

TEST(BatchRate, SlidingWindowFollowsTheCurrentSpeed) {
  RateMeter m(std::chrono::seconds(10));
  EXPECT_EQ(m.per_second(), std::nullopt);
  m.add(milliseconds(0), 0);
  EXPECT_EQ(m.per_second(), std::nullopt);
  m.add(milliseconds(1000), 10);
  EXPECT_DOUBLE_EQ(*m.per_second(), 10.0);
  // Fast for 10 s...
  for (int s = 2; s <= 10; ++s) {
    m.add(milliseconds(s * 1000), s * 10);
  }
  EXPECT_DOUBLE_EQ(*m.per_second(), 10.0);
  // ...then 1 line a second: after a whole window, the rate is the new speed only.
  for (int s = 11; s <= 30; ++s) {
    m.add(milliseconds(s * 1000), 100 + (s - 10));
  }
  EXPECT_NEAR(*m.per_second(), 1.0, 1e-9);
}

TEST(BatchProgress, BarCountsRateEtaStatus) {
  Progress p{"in_progress", 500, 0, 2000, 50.0};
  EXPECT_EQ(render_progress(p, 20),
            "[#####               ]  500/2000  25.0%  50.0 lines/s  ETA 0:30  in_progress");
  p.failed = 3;
  p.rate.reset();
  EXPECT_EQ(render_progress(p, 4),
            "[#   ]  500/2000  25.0%  -- lines/s  ETA --  in_progress  3 failed");
  Progress done{"completed", 2000, 0, 2000, 0.0};
  EXPECT_EQ(render_progress(done, 4),
            "[####]  2000/2000  100.0%  0.0 lines/s  ETA 0:00  completed");
  Progress empty{"validating", 0, 0, 0, std::nullopt};
  EXPECT_EQ(render_progress(empty, 2), "[  ]  0/0  0.0%  -- lines/s  ETA --  validating");
}

TEST(BatchProgress, EtaFormats) {
  EXPECT_EQ(format_eta(std::nullopt), "--");
  EXPECT_EQ(format_eta(0.2), "0:01");
  EXPECT_EQ(format_eta(65), "1:05");
  EXPECT_EQ(format_eta(3600 * 3 + 4 * 60 + 59), "3:04:59");
  EXPECT_EQ(format_eta(-1), "--");
  EXPECT_EQ(format_eta(1e300), "--");
}

nlohmann::json batch_json() {
  return {{"id", "batch_abc"},
          {"object", "batch"},
          {"endpoint", "/v1/chat/completions"},
          {"input_file_id", "file-in"},
          {"status", "failed"},
          {"output_file_id", nullptr},
          {"error_file_id", "file-err"},
          {"created_at", 1796320800},
          {"expires_at", 1796407200},
          {"failed_at", 1796320801},
          {"request_counts", {{"total", 3}, {"completed", 1}, {"failed", 1}}},
          {"errors",
           {{"object", "list"},
            {"data",
             {{{"code", "duplicate_custom_id"},
               {"message", "custom_id 'a' appears\ntwice"},
               {"line", 2}}}}}}};
}

TEST(BatchReport, StatusFieldsAndErrorsNamingTheirLines) {
  const auto p = progress_of(batch_json());
  EXPECT_EQ(p.done, 2);
  EXPECT_EQ(p.failed, 1);
  EXPECT_EQ(p.total, 3);
  EXPECT_EQ(render_batch(batch_json()),
            "id:            batch_abc\n"
            "status:        failed\n"
            "endpoint:      /v1/chat/completions\n"
            "input file:    file-in\n"
            "requests:      2/3 done, 1 failed\n"
            "output file:   -\n"
            "error file:    file-err\n"
            "created:       2026-12-03 18:00:00 UTC\n"
            "expires:       2026-12-04 18:00:00 UTC\n"
            "failed:        2026-12-03 18:00:01 UTC\n"
            "errors:\n"
            "  line 2: duplicate_custom_id: custom_id 'a' appears twice\n");
}

TEST(BatchReport, ListTable) {
  nlohmann::json b2 = batch_json();
  b2["id"] = "batch_2";
  b2["status"] = "in_progress";
  b2["request_counts"] = {{"total", 2000}, {"completed", 150}, {"failed", 0}};
  const nlohmann::json list = {
      {"object", "list"}, {"data", {batch_json(), b2}}, {"has_more", true}, {"last_id", "batch_2"}};
  EXPECT_EQ(
      render_batch_list(list),
      "ID         STATUS           DONE  FAILED  CREATED                  ENDPOINT\n"
      "batch_abc  failed            2/3       1  2026-12-03 18:00:00 UTC  /v1/chat/completions\n"
      "batch_2    in_progress  150/2000       0  2026-12-03 18:00:00 UTC  "
      "/v1/chat/completions\n"
      "(more: --after batch_2)\n");
}

TEST(BatchReport, ErrorMessages) {
  EXPECT_EQ(
      error_message(R"({"error":{"message":"No batch found","type":"invalid_request_error"}})"),
      "No batch found");
  EXPECT_EQ(error_message("<html>\nbad gateway</html>"), "<html> bad gateway</html>");
  EXPECT_TRUE(batch_is_terminal("cancelled"));
  EXPECT_FALSE(batch_is_terminal("cancelling"));
  EXPECT_EQ(format_unix_time(nullptr), "-");
}

}  // namespace
}  // namespace fg::cli
