#pragma once

// The pure decisions of the model download (model_file): what Range to ask for when resuming,
// what a response means for the partial file, the progress shown in /health. The I/O is in
// fetcher.hpp. No sockets, no files.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace fg::agent::model {

enum class State { downloading, verifying, done, failed };
const char* to_string(State state);

// What /health shows under "model_download".
struct Progress {
  std::uint64_t bytes_done = 0;
  std::uint64_t bytes_total = 0;  // 0 until the server said
  State state = State::downloading;
  std::string error;  // why it failed, or the last transient error while retrying
};
// {"bytes_done","bytes_total","state","error"} ("error" only when there is one).
nlohmann::ordered_json progress_json(const Progress& progress);

// The Range header value that resumes a partial file of `offset` bytes: "bytes=<offset>-".
std::string range_header(std::uint64_t offset);

// A Content-Range value: "bytes 100-199/1000" (total known), "bytes 100-199/*" (unknown), or
// "bytes */1000" (the answer to an unsatisfiable range: only the total).
struct ContentRange {
  std::optional<std::uint64_t> first;  // unset for "bytes */N"
  std::optional<std::uint64_t> last;
  std::optional<std::uint64_t> total;
};
std::optional<ContentRange> parse_content_range(std::string_view value);

// What to do with the response to a GET that asked for the bytes from `offset` on (no Range
// header when offset is 0).
enum class Step {
  append,    // the body continues the partial file at offset: write it there
  restart,   // the body is the whole file (200, the Range ignored): truncate, write from 0
  complete,  // nothing left to fetch (416 with the total equal to offset): verify the file
  refetch,   // the partial file does not fit the server's file: truncate, ask again from 0
  retry,     // a transient failure (5xx, 408, 429): ask again later from the same offset
  redirect,  // 301, 302, 303, 307, 308 with a Location: ask there
  fail,      // a definite failure (another 4xx, a malformed answer): stop
};
struct Decision {
  Step step = Step::fail;
  std::optional<std::uint64_t> total;  // the whole file's size, when the answer says
  std::string error;                   // for retry, refetch and fail
};
Decision decide(std::uint64_t offset, unsigned status, std::string_view content_range,
                std::optional<std::uint64_t> content_length, bool has_location);

// "sha256 mismatch: expected <want>, got <got>".
std::string checksum_error(std::string_view expected, std::string_view got);

// Where the partial file lives: path + ".part".
std::string part_path(const std::string& path);

}  // namespace fg::agent::model
