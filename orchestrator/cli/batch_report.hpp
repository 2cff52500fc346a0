#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

// `fleetgate batch`: the pure part (arguments, progress bar, rate and ETA, tables). The HTTP
// requests are in batch_command.cpp. docs/batch.md ("The CLI") describes the commands.
namespace fg::cli {

// Exit codes of `fleetgate batch` (docs/batch.md).
inline constexpr int kBatchOk = 0;             // done; with --wait: the batch completed
inline constexpr int kBatchNotCompleted = 1;   // --wait: it ended failed, expired or cancelled
inline constexpr int kBatchUsage = 2;          // bad arguments
inline constexpr int kBatchCannotConnect = 3;  // no answer, or not an OpenAI-style answer
inline constexpr int kBatchUnauthorized = 4;   // 401/403: a missing or wrong API key
inline constexpr int kBatchApiError = 5;       // the gateway refused (404, 400, ...) or no file yet
inline constexpr int kBatchLocalFile = 6;      // the input file cannot be read, the output written

inline constexpr std::string_view kDefaultGatewayUrl = "http://127.0.0.1:8080";
inline constexpr std::string_view kGatewayUrlEnv = "FLEETGATE_URL";
inline constexpr std::string_view kApiKeyEnv = "FLEETGATE_API_KEY";

enum class BatchVerb { submit, status, list, cancel, wait, download };

struct BatchArgs {
  BatchVerb verb = BatchVerb::list;
  std::string url = std::string(kDefaultGatewayUrl);
  std::string api_key;  // "" = none
  std::string target;   // submit: the JSONL file; status/cancel/wait/download: the batch id
  std::string endpoint = "/v1/chat/completions";
  std::string window = "24h";
  std::vector<std::pair<std::string, std::string>> metadata;  // --metadata key=value
  bool wait = false;                                          // submit --wait
  bool json = false;                                          // status/list: raw JSON
  bool errors = false;                                        // download: the error file
  std::string out;                                            // download: "" = stdout
  int limit = 20;                                             // list
  std::string after;                                          // list
  std::chrono::milliseconds poll_interval{1000};
  bool help = false;
};

// Parses the arguments after "batch". env_url and env_key are $FLEETGATE_URL and
// $FLEETGATE_API_KEY (nullptr when unset); flags win over them. On error returns nullopt and sets
// *error.
std::optional<BatchArgs> parse_batch_args(const std::vector<std::string>& args, const char* env_url,
                                          const char* env_key, std::string* error);
std::string batch_usage();

// Lines per second over the last `window` of samples (a sliding window, so the rate follows the
// fleet's current speed, not the average since the start). Times are passed in.
class RateMeter {
 public:
  explicit RateMeter(std::chrono::milliseconds window = std::chrono::seconds(30))
      : window_(window) {}
  void add(std::chrono::milliseconds now, std::int64_t done);
  // nullopt until two samples at least 1 ms apart are in the window.
  std::optional<double> per_second() const;

 private:
  std::chrono::milliseconds window_;
  std::deque<std::pair<std::chrono::milliseconds, std::int64_t>> samples_;
};

struct Progress {
  std::string status;  // "in_progress", ...
  std::int64_t done = 0;
  std::int64_t failed = 0;
  std::int64_t total = 0;
  std::optional<double> rate;  // lines per second
};

// One line: "[##########          ]  1234/2000  61.7%  41.2 lines/s  ETA 0:18  in_progress"
// (plus "  12 failed" when some failed). `bar_width` characters inside the brackets.
std::string render_progress(const Progress& p, int bar_width = 30);
// "0:18", "12:05", "3:04:59"; "--" when unknown.
std::string format_eta(std::optional<double> seconds);
// Progress from a batch object (OpenAI's shape: request_counts {total, completed, failed}).
Progress progress_of(const nlohmann::json& batch);
// completed, failed, expired, cancelled.
bool batch_is_terminal(std::string_view status);

// `status`: one "key: value" line per field, and the errors (errors.data[]) naming their lines.
std::string render_batch(const nlohmann::json& batch);
// `list`: a table of a GET /v1/batches answer's data[].
std::string render_batch_list(const nlohmann::json& list);
// The message of an OpenAI error body ({"error":{"message":...}}), else the body's start.
std::string error_message(std::string_view body);
// "2026-12-03 18:20:00 UTC" from Unix seconds; "-" for 0 or null.
std::string format_unix_time(const nlohmann::json& seconds);

}  // namespace fg::cli
