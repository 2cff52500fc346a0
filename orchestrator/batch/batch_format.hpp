#pragma once

// The pure parts of the Files and Batches API (docs/batch.md): multipart uploads, splitting and
// validating input lines as OpenAI does, and the JSON shapes the API and the result files use.
// No Asio, no clock, no storage.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "orchestrator/storage/storage.hpp"

namespace fg::batch {

// ---- multipart/form-data (POST /v1/files) ----

struct MultipartPart {
  std::string name;
  std::string filename;
  std::string_view data;  // points into the body
};

// The parts of a multipart/form-data body, or an error message (for a 400).
std::variant<std::vector<MultipartPart>, std::string> parse_multipart(std::string_view content_type,
                                                                      std::string_view body);

// The boundary of a multipart/form-data Content-Type; when there is none, `error` says why (for a
// 400).
struct MultipartBoundary {
  std::optional<std::string> boundary;
  std::string error;
};
MultipartBoundary multipart_boundary(std::string_view content_type);

// A multipart/form-data body parsed as it arrives, in pieces cut anywhere, with bounded memory:
// it holds at most one part's headers (up to kMaxHeaderBytes) and the last few bytes of data that
// could be the start of the next delimiter. The data of each part goes to on_data in pieces.
class MultipartStream {
 public:
  static constexpr std::size_t kMaxHeaderBytes = 16 * 1024;
  struct Handler {
    std::function<void(const std::string& name, const std::string& filename)> on_part;
    std::function<void(std::string_view piece)> on_data;  // of the part last begun
    std::function<void()> on_part_end;
  };
  MultipartStream(std::string boundary, Handler handler);
  // Consumes `piece`; an error message when the body is malformed (feed no more then).
  std::optional<std::string> feed(std::string_view piece);
  // At the end of the body: an error message when it ended before its closing delimiter.
  std::optional<std::string> finish() const;
  bool done() const { return state_ == State::done; }

 private:
  enum class State { preamble, after_delimiter, headers, data, done, failed };
  std::optional<std::string> step(bool& progressed);
  std::string delimiter_;  // "\r\n--" + boundary
  Handler handler_;
  State state_ = State::preamble;
  std::string buf_;
  std::size_t parts_ = 0;
};

// The body of POST /v1/files as it arrives, in pieces cut anywhere: its parts (MultipartStream),
// the `file` part's bytes cut into storage chunks of chunk_bytes (each handed to on_chunk as it
// fills, the last one at finish), its size and lines counted against the limits as they come,
// and the `purpose` field. Memory: one chunk and MultipartStream's few bytes, whatever the size.
class UploadReader {
 public:
  struct Limits {
    std::uint64_t max_bytes = 0;  // batch.max_file_bytes
    std::uint64_t max_lines = 0;  // batch.max_file_lines
    std::size_t chunk_bytes = 1024 * 1024;
  };
  // A refusal for the client: 400 (malformed, no file, wrong purpose) or 413 (over a limit).
  struct Error {
    unsigned status = 400;
    std::string code;
    std::string message;
    std::string param;
  };
  UploadReader(std::string boundary, Limits limits,
               std::function<void(std::string chunk)> on_chunk);
  // Consumes the next piece of the body; an error ends the upload (feed no more then).
  std::optional<Error> feed(std::string_view piece);
  // At the end of the body: the last chunk goes out, and the whole is checked (closing
  // delimiter, one file part, purpose "batch", the line limit).
  std::optional<Error> finish();
  std::uint64_t bytes() const { return bytes_; }
  // Lines of the file: its newlines, and one more when it does not end with one.
  std::uint64_t lines() const { return newlines_ + (bytes_ > 0 && !ends_with_newline_ ? 1 : 0); }
  const std::string& filename() const { return filename_; }
  const std::string& purpose() const { return purpose_; }

 private:
  enum class In { none, file, purpose, other };
  std::optional<Error> over_limit() const;
  Limits limits_;
  std::function<void(std::string)> on_chunk_;
  MultipartStream stream_;
  In in_ = In::none;
  bool seen_file_ = false;
  bool two_files_ = false;
  std::string filename_;
  std::string purpose_;
  std::string chunk_;
  std::uint64_t bytes_ = 0;
  std::uint64_t newlines_ = 0;
  bool ends_with_newline_ = false;
};

// ---- input lines ----

// Cuts a byte stream into lines (LF, an optional CR before it dropped), fed in any pieces.
class LineSplitter {
 public:
  // Complete lines in `piece` (with what was left of the previous one).
  std::vector<std::string> feed(std::string_view piece);
  // The last line when the stream did not end with a newline.
  std::optional<std::string> finish();
  // Bytes of an unfinished line held (bounded by the caller: a line over its limit is an error).
  std::size_t pending_bytes() const { return partial_.size(); }

 private:
  std::string partial_;
};

// One problem in the input file, OpenAI's BatchError: {code, message, param, line}.
struct LineError {
  std::string code;
  std::string message;
  std::string param;      // empty: null
  std::int64_t line = 0;  // 1-based; 0: null (the whole file)
};

// Validates input lines of one batch, one at a time, as OpenAI does: JSON object, custom_id a
// unique non-empty string, method POST, url equal to the batch's endpoint, body an object naming
// a configured model. Blank lines are skipped. Holds every custom_id seen (uniqueness).
class LineValidator {
 public:
  LineValidator(std::string endpoint, std::function<bool(const std::string&)> model_exists)
      : endpoint_(std::move(endpoint)), model_exists_(std::move(model_exists)) {}

  // line_no: 1-based line of the file. An empty optional with no error: a blank line.
  std::variant<std::monostate, storage::LineInput, LineError> check(std::string_view text,
                                                                    std::int64_t line_no);
  std::int64_t accepted() const { return accepted_; }

 private:
  std::string endpoint_;
  std::function<bool(const std::string&)> model_exists_;
  std::unordered_set<std::string> seen_;
  std::int64_t accepted_ = 0;
};

// ---- JSON shapes ----

nlohmann::json file_json(const storage::FileRecord& file);
nlohmann::json batch_json(const storage::BatchRecord& batch, const storage::LineCounts& counts);
nlohmann::json errors_json(const std::vector<LineError>& errors);

// One line of the output file: a replica's answer (any status).
std::string output_line(const std::string& id, const std::string& custom_id, unsigned status,
                        const std::string& request_id, std::string_view body);
// One line of the error file without an answer (expired, failed before any replica answered).
std::string error_line(const std::string& id, const std::string& custom_id, const std::string& code,
                       const std::string& message);

// The completion window in milliseconds ("24h", "1h", "30m", "90s"), or nullopt.
std::optional<std::int64_t> parse_completion_window(std::string_view window);

// Endpoints a batch may name: the proxied routes that answer whole.
bool batch_endpoint_supported(std::string_view endpoint);

}  // namespace fg::batch
