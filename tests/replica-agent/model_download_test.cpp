// The model download's pure decisions (model/download.hpp): resume offsets, Range and
// Content-Range, what each answer does to the partial file, the /health progress.
#include "replica-agent/model/download.hpp"

#include <gtest/gtest.h>

namespace fg::agent::model {
namespace {

TEST(ModelDownload, RangeResumesFromTheOffset) {
  EXPECT_EQ(range_header(0), "bytes=0-");
  EXPECT_EQ(range_header(5'700'000'000ull), "bytes=5700000000-");
}

TEST(ModelDownload, ParsesContentRange) {
  auto r = parse_content_range("bytes 100-199/1000");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->first, 100u);
  EXPECT_EQ(r->last, 199u);
  EXPECT_EQ(r->total, 1000u);
  r = parse_content_range(" bytes 0-0/* ");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->first, 0u);
  EXPECT_FALSE(r->total);
  r = parse_content_range("bytes */1000");
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->first);
  EXPECT_EQ(r->total, 1000u);
}

TEST(ModelDownload, RefusesMalformedContentRange) {
  for (const char* bad :
       {"", "bytes", "bytes 1-2", "items 0-1/2", "bytes 5-4/10", "bytes 0-10/10", "bytes */*",
        "bytes -1-2/3", "bytes a-b/c", "bytes 1-2/3x", "bytes 99999999999999999999-1/2"}) {
    EXPECT_FALSE(parse_content_range(bad)) << bad;
  }
}

TEST(ModelDownload, PartialContentAtTheOffsetIsAppended) {
  auto d = decide(400, 206, "bytes 400-999/1000", 600, false);
  EXPECT_EQ(d.step, Step::append);
  EXPECT_EQ(d.total, 1000u);
}

TEST(ModelDownload, PartialContentElsewhereStartsOver) {
  auto d = decide(400, 206, "bytes 0-999/1000", 1000, false);
  EXPECT_EQ(d.step, Step::refetch);
  EXPECT_NE(d.error.find("from 0, not 400"), std::string::npos);
  EXPECT_EQ(decide(400, 206, "", 600, false).step, Step::fail);
}

TEST(ModelDownload, AServerIgnoringRangeSendsTheWholeFile) {
  auto d = decide(400, 200, "", 1000, false);
  EXPECT_EQ(d.step, Step::restart);
  EXPECT_EQ(d.total, 1000u);
  EXPECT_EQ(decide(0, 200, "", std::nullopt, false).total, std::nullopt);
}

TEST(ModelDownload, UnsatisfiableRangeAtTheEndMeansComplete) {
  auto d = decide(1000, 416, "bytes */1000", std::nullopt, false);
  EXPECT_EQ(d.step, Step::complete);
  EXPECT_EQ(d.total, 1000u);
  // A part longer than the file (the file changed): start over.
  EXPECT_EQ(decide(1200, 416, "bytes */1000", std::nullopt, false).step, Step::refetch);
  EXPECT_EQ(decide(1200, 416, "", std::nullopt, false).step, Step::refetch);
}

TEST(ModelDownload, TransientFailuresAreRetriedAndOthersFail) {
  for (unsigned status : {500u, 502u, 503u, 504u, 408u, 429u}) {
    EXPECT_EQ(decide(10, status, "", std::nullopt, false).step, Step::retry) << status;
  }
  for (unsigned status : {400u, 401u, 403u, 404u, 410u}) {
    auto d = decide(10, status, "", std::nullopt, false);
    EXPECT_EQ(d.step, Step::fail) << status;
    EXPECT_NE(d.error.find("HTTP " + std::to_string(status)), std::string::npos);
  }
}

TEST(ModelDownload, RedirectsNeedALocation) {
  for (unsigned status : {301u, 302u, 303u, 307u, 308u}) {
    EXPECT_EQ(decide(0, status, "", std::nullopt, true).step, Step::redirect) << status;
    EXPECT_EQ(decide(0, status, "", std::nullopt, false).step, Step::fail) << status;
  }
}

TEST(ModelDownload, ProgressJson) {
  Progress p;
  p.bytes_done = 5;
  p.bytes_total = 10;
  EXPECT_EQ(progress_json(p).dump(), R"({"bytes_done":5,"bytes_total":10,"state":"downloading"})");
  p.state = State::failed;
  p.error = checksum_error("aa", "bb");
  EXPECT_EQ(progress_json(p).dump(), R"({"bytes_done":5,"bytes_total":10,"state":"failed",)"
                                     R"("error":"sha256 mismatch: expected aa, got bb"})");
  EXPECT_STREQ(to_string(State::verifying), "verifying");
  EXPECT_STREQ(to_string(State::done), "done");
  EXPECT_EQ(part_path("/m/q.gguf"), "/m/q.gguf.part");
}

}  // namespace
}  // namespace fg::agent::model
