#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

// `fleetgate status`: the pure part (arguments, the tables, the exit code). The HTTP request is in
// status_command.cpp.
namespace fg::cli {

// Exit codes of `fleetgate status` (docs/operations.md).
inline constexpr int kStatusOk = 0;             // every model has its desired healthy replicas
inline constexpr int kStatusDegraded = 1;       // some model has fewer
inline constexpr int kStatusUsage = 2;          // bad arguments
inline constexpr int kStatusCannotConnect = 3;  // no answer, or not the status JSON
inline constexpr int kStatusUnauthorized = 4;   // 401/403: a missing or wrong admin token

inline constexpr std::string_view kDefaultAdminUrl = "http://127.0.0.1:9090";
inline constexpr std::string_view kAdminTokenEnv = "FLEETGATE_ADMIN_TOKEN";

struct StatusArgs {
  std::string admin_url = std::string(kDefaultAdminUrl);
  std::string token;  // "" = none
  bool watch = false;
  bool help = false;
};

// Parses the arguments after "status". env_token is $FLEETGATE_ADMIN_TOKEN (nullptr when unset);
// --token wins over it. On error returns nullopt and sets *error.
std::optional<StatusArgs> parse_status_args(const std::vector<std::string>& args,
                                            const char* env_token, std::string* error);
std::string status_usage();

// The tables, per model then per phone, from a GET /admin/v1/status answer. Throws
// nlohmann::json::exception when the answer does not have the expected shape.
std::string render_status(const nlohmann::json& status);

// kStatusOk when every model has at least its desired healthy replicas, else kStatusDegraded.
int status_exit_code(const nlohmann::json& status);

}  // namespace fg::cli
