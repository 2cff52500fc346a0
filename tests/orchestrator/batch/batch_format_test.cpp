#include "orchestrator/batch/batch_format.hpp"

#include <algorithm>

#include <gtest/gtest.h>

namespace fg::batch {
namespace {

TEST(Multipart, FindsTheFileAndPurposeParts) {
  std::string body =
      "--XyZ\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
      "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n"
      "Content-Type: application/jsonl\r\n\r\n{\"a\":1}\r\n{\"b\":2}\n\r\n--XyZ--\r\n";
  auto parsed = parse_multipart("multipart/form-data; boundary=XyZ", body);
  ASSERT_TRUE(std::holds_alternative<std::vector<MultipartPart>>(parsed));
  const auto& parts = std::get<std::vector<MultipartPart>>(parsed);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].name, "purpose");
  EXPECT_EQ(parts[0].data, "batch");
  EXPECT_EQ(parts[1].name, "file");
  EXPECT_EQ(parts[1].filename, "in.jsonl");
  EXPECT_EQ(parts[1].data, "{\"a\":1}\r\n{\"b\":2}\n");
}

TEST(Multipart, RefusesWhatIsNotMultipartOrIsCutShort) {
  EXPECT_TRUE(std::holds_alternative<std::string>(parse_multipart("application/json", "{}")));
  EXPECT_TRUE(std::holds_alternative<std::string>(parse_multipart("multipart/form-data", "x")));
  EXPECT_TRUE(std::holds_alternative<std::string>(
      parse_multipart("multipart/form-data; boundary=\"b\"",
                      "--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nno end")));
}

struct StreamedPart {
  std::string name, filename, data;
  bool ended = false;
};

// Feeds `body` to a MultipartStream in the given pieces; the parts, or the first error.
std::variant<std::vector<StreamedPart>, std::string> stream_parts(
    const std::string& boundary, const std::vector<std::string_view>& pieces) {
  std::vector<StreamedPart> parts;
  MultipartStream stream(boundary, {[&](const std::string& n, const std::string& f) {
                                      parts.push_back({n, f, "", false});
                                    },
                                    [&](std::string_view d) { parts.back().data.append(d); },
                                    [&] { parts.back().ended = true; }});
  for (auto piece : pieces) {
    if (auto problem = stream.feed(piece)) {
      return *problem;
    }
  }
  if (auto problem = stream.finish()) {
    return *problem;
  }
  return parts;
}

// A preamble, two parts and an epilogue; the file's data holds every proper prefix of the
// delimiter "\r\n--XyZ", which must pass through as data.
const std::string kStreamBody =
    "preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
    "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n"
    "Content-Type: application/jsonl\r\n\r\n{\"a\":1}\r\n-\r\n--\r\n--X\r\n--Xy{\"b\":2}\n"
    "\r\n--XyZ--\r\nepilogue";

void expect_stream_parts(const std::variant<std::vector<StreamedPart>, std::string>& got,
                         const std::string& where) {
  ASSERT_TRUE(std::holds_alternative<std::vector<StreamedPart>>(got))
      << where << ": " << std::get<std::string>(got);
  const auto& parts = std::get<std::vector<StreamedPart>>(got);
  ASSERT_EQ(parts.size(), 2u) << where;
  EXPECT_EQ(parts[0].name, "purpose") << where;
  EXPECT_EQ(parts[0].data, "batch") << where;
  EXPECT_TRUE(parts[0].ended) << where;
  EXPECT_EQ(parts[1].name, "file") << where;
  EXPECT_EQ(parts[1].filename, "in.jsonl") << where;
  EXPECT_EQ(parts[1].data, "{\"a\":1}\r\n-\r\n--\r\n--X\r\n--Xy{\"b\":2}\n") << where;
  EXPECT_TRUE(parts[1].ended) << where;
}

TEST(MultipartStream, GivesTheSamePartsWhereverTheBodyIsCut) {
  const std::string_view body(kStreamBody);
  expect_stream_parts(stream_parts("XyZ", {body}), "whole");
  for (std::size_t i = 0; i <= body.size(); ++i) {
    expect_stream_parts(stream_parts("XyZ", {body.substr(0, i), body.substr(i)}),
                        "cut at " + std::to_string(i));
    if (HasFailure()) {
      return;
    }
  }
  std::vector<std::string_view> bytes;
  for (std::size_t i = 0; i < body.size(); ++i) {
    bytes.push_back(body.substr(i, 1));
  }
  expect_stream_parts(stream_parts("XyZ", bytes), "byte by byte");
}

TEST(MultipartStream, AgreesWithTheWholeBodyParser) {
  std::string body =
      "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x.jsonl\"\r\n\r\n" +
      std::string(5000, 'q') + "\r\n--b--\r\n";
  auto whole = parse_multipart("multipart/form-data; boundary=b", body);
  ASSERT_TRUE(std::holds_alternative<std::vector<MultipartPart>>(whole));
  auto streamed = stream_parts(
      "b", {std::string_view(body).substr(0, 2500), std::string_view(body).substr(2500)});
  ASSERT_TRUE(std::holds_alternative<std::vector<StreamedPart>>(streamed));
  ASSERT_EQ(std::get<std::vector<StreamedPart>>(streamed).size(), 1u);
  EXPECT_EQ(std::get<std::vector<StreamedPart>>(streamed)[0].data,
            std::get<std::vector<MultipartPart>>(whole)[0].data);
}

TEST(MultipartStream, HoldsOnlyADelimitersWorthOfData) {
  std::size_t largest_piece = 0, total = 0;
  MultipartStream stream("b", {nullptr,
                               [&](std::string_view d) {
                                 largest_piece = std::max(largest_piece, d.size());
                                 total += d.size();
                               },
                               nullptr});
  ASSERT_FALSE(stream.feed("--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\n"));
  const std::string megabyte(1 << 20, 'z');
  for (int i = 0; i < 8; ++i) {
    ASSERT_FALSE(stream.feed(megabyte));
    // All but the last few bytes (that could start "\r\n--b") were handed on already.
    EXPECT_GE(total + 4, static_cast<std::size_t>(i + 1) << 20);
  }
  EXPECT_LE(largest_piece, (1u << 20) + 4);
  ASSERT_FALSE(stream.feed("\r\n--b--"));
  EXPECT_FALSE(stream.finish());
  EXPECT_EQ(total, 8u << 20);
}

// An upload body (file part `data`, purpose part `purpose`) as the openai client sends it.
std::string upload_body(const std::string& data, const std::string& purpose = "batch") {
  return "--Bd\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n"
         "Content-Type: application/octet-stream\r\n\r\n" +
         data + "\r\n--Bd\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n" + purpose +
         "\r\n--Bd--\r\n";
}

struct Uploaded {
  std::vector<std::string> chunks;
  std::optional<UploadReader::Error> error;
  std::uint64_t bytes = 0, lines = 0;
  std::string filename;
};

// Feeds `body` in pieces of `step` bytes, then finishes (unless an error came first).
Uploaded upload(const std::string& body, std::size_t step, UploadReader::Limits limits) {
  Uploaded out;
  UploadReader reader("Bd", limits, [&](std::string chunk) { out.chunks.push_back(chunk); });
  for (std::size_t pos = 0; pos < body.size() && !out.error; pos += step) {
    out.error = reader.feed(std::string_view(body).substr(pos, step));
  }
  if (!out.error) {
    out.error = reader.finish();
  }
  out.bytes = reader.bytes();
  out.lines = reader.lines();
  out.filename = reader.filename();
  return out;
}

TEST(UploadReader, CutsTheFileIntoChunksWhereverTheBodyIsCut) {
  std::string data;
  for (int i = 0; i < 500; ++i) {
    data += "{\"custom_id\":\"r" + std::to_string(i) + "\"}\n";
  }
  const std::string body = upload_body(data);
  for (std::size_t step : {1u, 3u, 64u, 1000u, 100000u}) {
    const Uploaded u = upload(body, step, {1 << 20, 1000, 256});
    ASSERT_FALSE(u.error) << step << ": " << u.error->message;
    std::string joined;
    for (std::size_t i = 0; i < u.chunks.size(); ++i) {
      EXPECT_LE(u.chunks[i].size(), 256u);
      if (i + 1 < u.chunks.size()) {
        EXPECT_EQ(u.chunks[i].size(), 256u);  // full chunks, the last one the rest
      }
      joined += u.chunks[i];
    }
    EXPECT_EQ(joined, data) << step;
    EXPECT_EQ(u.bytes, data.size());
    EXPECT_EQ(u.lines, 500u);
    EXPECT_EQ(u.filename, "in.jsonl");
  }
}

TEST(UploadReader, CountsALastLineWithoutNewline) {
  EXPECT_EQ(upload(upload_body("a\nb\nc"), 2, {100, 100, 4}).lines, 3u);
  EXPECT_EQ(upload(upload_body("a\nb\nc\n"), 2, {100, 100, 4}).lines, 3u);
  EXPECT_EQ(upload(upload_body(""), 2, {100, 100, 4}).lines, 0u);
}

TEST(UploadReader, RefusesAFileOverTheSizeLimitWithoutHoldingIt) {
  const std::string data(10000, 'x');
  std::size_t stored = 0;
  UploadReader reader("Bd", {1000, 100, 100}, [&](std::string c) { stored += c.size(); });
  std::optional<UploadReader::Error> error;
  const std::string body = upload_body(data);
  for (std::size_t pos = 0; pos < body.size() && !error; pos += 10) {
    error = reader.feed(std::string_view(body).substr(pos, 10));
  }
  ASSERT_TRUE(error);
  EXPECT_EQ(error->status, 413u);
  EXPECT_EQ(error->code, "file_too_large");
  EXPECT_EQ(error->param, "file");
  EXPECT_NE(error->message.find("batch.max_file_bytes (1000 bytes)"), std::string::npos);
  EXPECT_LE(stored, 1000u);
  EXPECT_LE(reader.bytes(), 1010u);  // refused as soon as it went over
}

TEST(UploadReader, RefusesAFileOverTheLineLimit) {
  const Uploaded at = upload(upload_body("1\n2\n3\n"), 1, {100, 3, 10});
  EXPECT_FALSE(at.error);
  const Uploaded over = upload(upload_body("1\n2\n3\n4\n"), 1, {100, 3, 10});
  ASSERT_TRUE(over.error);
  EXPECT_EQ(over.error->status, 413u);
  EXPECT_NE(over.error->message.find("batch.max_file_lines (3)"), std::string::npos);
  // The fourth line without its newline is only known at the end.
  const Uploaded last = upload(upload_body("1\n2\n3\n4"), 100, {100, 3, 10});
  ASSERT_TRUE(last.error);
  EXPECT_EQ(last.error->status, 413u);
}

TEST(UploadReader, RefusesAWrongPurposeAMissingFileAndABrokenBody) {
  const Uploaded purpose = upload(upload_body("x\n", "fine-tune"), 7, {100, 100, 10});
  ASSERT_TRUE(purpose.error);
  EXPECT_EQ(purpose.error->status, 400u);
  EXPECT_EQ(purpose.error->param, "purpose");
  const Uploaded none =
      upload("--Bd\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--Bd--\r\n",
             5, {100, 100, 10});
  ASSERT_TRUE(none.error);
  EXPECT_EQ(none.error->param, "file");
  const std::string body = upload_body("x\n");
  const Uploaded cut = upload(body.substr(0, body.size() - 8), 5, {100, 100, 10});
  ASSERT_TRUE(cut.error);
  EXPECT_EQ(cut.error->status, 400u);
  const Uploaded two = upload(upload_body("x\n") + "", 5, {100, 100, 10});
  EXPECT_FALSE(two.error);
  const std::string twice =
      "--Bd\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\na\r\n"
      "--Bd\r\nContent-Disposition: form-data; name=\"file\"; filename=\"b\"\r\n\r\nb\r\n"
      "--Bd\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--Bd--\r\n";
  const Uploaded both = upload(twice, 4, {100, 100, 10});
  ASSERT_TRUE(both.error);
  EXPECT_EQ(both.error->status, 400u);
}

TEST(MultipartStream, RefusesMalformedOrCutShortBodies) {
  auto error = [](const std::string& body) {
    auto got = stream_parts("b", {body});
    return std::holds_alternative<std::string>(got);
  };
  EXPECT_TRUE(error(""));
  EXPECT_TRUE(error("no delimiter at all"));
  EXPECT_TRUE(error("--b--"));  // no part
  EXPECT_TRUE(error("--bX\r\n"));
  EXPECT_TRUE(error("--b\r\nContent-Type: text/plain\r\n\r\nx\r\n--b--"));  // no disposition
  EXPECT_TRUE(error("--b\r\nContent-Disposition: form-data; name=\"f\"\r\n"));
  EXPECT_TRUE(error("--b\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nno end"));
  EXPECT_TRUE(error("--b\r\n" + std::string(MultipartStream::kMaxHeaderBytes + 10, 'h')));
  EXPECT_FALSE(error("--b\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nx\r\n--b--"));
  EXPECT_FALSE(multipart_boundary("application/json").boundary);
  EXPECT_FALSE(multipart_boundary("multipart/form-data").boundary);
  EXPECT_FALSE(multipart_boundary("multipart/form-data").error.empty());
  EXPECT_EQ(multipart_boundary("multipart/form-data; boundary=\"q r\"").boundary, "q r");
}

TEST(LineSplitter, JoinsPiecesAndDropsCarriageReturns) {
  LineSplitter s;
  EXPECT_TRUE(s.feed("ab").empty());
  auto lines = s.feed("c\r\nde\nf");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "abc");
  EXPECT_EQ(lines[1], "de");
  EXPECT_EQ(s.finish(), "f");
  EXPECT_FALSE(s.finish());
}

std::string line(const std::string& custom_id, const std::string& url = "/v1/chat/completions",
                 const std::string& model = "m") {
  return R"({"custom_id":")" + custom_id + R"(","method":"POST","url":")" + url +
         R"(","body":{"model":")" + model + R"(","messages":[]}})";
}

TEST(LineValidator, AcceptsGoodLinesInOrderAndNamesEachProblemsLine) {
  LineValidator v("/v1/chat/completions", [](const std::string& m) { return m == "m"; });
  auto first = v.check(line("a"), 1);
  ASSERT_TRUE(std::holds_alternative<storage::LineInput>(first));
  EXPECT_EQ(std::get<storage::LineInput>(first).line_no, 0);
  EXPECT_EQ(std::get<storage::LineInput>(first).custom_id, "a");
  EXPECT_EQ(std::get<storage::LineInput>(first).model, "m");
  EXPECT_TRUE(std::holds_alternative<std::monostate>(v.check("  ", 2)));

  auto code = [&](const std::string& text, std::int64_t n) {
    auto r = v.check(text, n);
    if (auto* e = std::get_if<LineError>(&r)) {
      EXPECT_EQ(e->line, n);
      return e->code;
    }
    return std::string("accepted");
  };
  EXPECT_EQ(code("{not json", 3), "invalid_json_line");
  EXPECT_EQ(code("[1]", 4), "invalid_json_line");
  EXPECT_EQ(code(R"({"method":"POST","url":"/v1/chat/completions","body":{"model":"m"}})", 5),
            "missing_required_parameter");
  EXPECT_EQ(code(line("a"), 6), "duplicate_custom_id");
  EXPECT_EQ(code(line("b", "/v1/embeddings"), 7), "invalid_url");
  EXPECT_EQ(code(line("c", "/v1/chat/completions", "gpt-4o"), 8), "model_not_found");
  EXPECT_EQ(code(R"({"custom_id":"d","method":"GET","url":"/v1/chat/completions","body":{}})", 9),
            "invalid_method");
  auto second = v.check(line("e"), 10);
  ASSERT_TRUE(std::holds_alternative<storage::LineInput>(second));
  EXPECT_EQ(std::get<storage::LineInput>(second).line_no, 1);
  EXPECT_EQ(v.accepted(), 2);
}

TEST(BatchJson, HasOpenAIsFieldsAndCounts) {
  storage::BatchRecord b;
  b.id = "batch_1";
  b.endpoint = "/v1/chat/completions";
  b.completion_window = "24h";
  b.metadata_json = R"({"k":"v"})";
  b.created_at = 5'000;
  b.expires_at = 9'000;
  storage::LineCounts counts;
  counts.pending = 1;
  counts.succeeded = 2;
  counts.failed = 3;
  auto j = batch_json(b, counts);
  EXPECT_EQ(j["object"], "batch");
  EXPECT_EQ(j["status"], "validating");
  EXPECT_EQ(j["created_at"], 5);
  EXPECT_EQ(j["expires_at"], 9);
  EXPECT_TRUE(j["in_progress_at"].is_null());
  EXPECT_TRUE(j["output_file_id"].is_null());
  EXPECT_EQ(j["metadata"]["k"], "v");
  EXPECT_EQ(j["request_counts"]["total"], 6);
  EXPECT_EQ(j["request_counts"]["completed"], 2);
  EXPECT_EQ(j["request_counts"]["failed"], 3);
}

TEST(ResultLines, FollowOpenAIsLineFormat) {
  auto out = nlohmann::json::parse(output_line("r1", "c1", 200, "req-1", R"({"x":1})"));
  EXPECT_EQ(out["custom_id"], "c1");
  EXPECT_EQ(out["response"]["status_code"], 200);
  EXPECT_EQ(out["response"]["request_id"], "req-1");
  EXPECT_EQ(out["response"]["body"]["x"], 1);
  EXPECT_TRUE(out["error"].is_null());
  auto err = nlohmann::json::parse(error_line("r2", "c2", "batch_expired", "late"));
  EXPECT_TRUE(err["response"].is_null());
  EXPECT_EQ(err["error"]["code"], "batch_expired");
  EXPECT_EQ(parse_completion_window("24h"), 86'400'000);
  EXPECT_FALSE(parse_completion_window("soon"));
  EXPECT_FALSE(parse_completion_window("0s"));
}

}  // namespace
}  // namespace fg::batch
