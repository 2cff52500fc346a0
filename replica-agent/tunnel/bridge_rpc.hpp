#pragma once

// The Acurast bridge's JSON-RPC 2.0 (../shared/acurast.md): one request line, one response
// line per connection. Building the calls and reading the answers. Pure: JSON only.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace fg::agent::bridge {

// {"jsonrpc":"2.0","id":id,"method":method,"params":params} and a newline (no params when null).
std::string request_line(std::uint64_t id, std::string_view method, const nlohmann::json& params);

// The result of a response line for request id, or the error ("bridge error -32000: relay
// unreachable", "malformed bridge answer", "answer to another request").
struct Answer {
  std::optional<nlohmann::json> result;
  std::string error;
};
Answer parse_answer(std::string_view line, std::uint64_t id);

// tunnel_start's params.
struct TunnelParams {
  std::vector<std::string> relays;  // serverAddrs
  std::string domain_suffix;
  std::string local_addr;  // 127.0.0.1:PORT
  std::string key;         // base64 PKCS#8 P-256
};
nlohmann::json tunnel_start_params(const TunnelParams& params);

// tunnel_start's result {"url": ...}: the URL, or nullopt.
std::optional<std::string> tunnel_url(const nlohmann::json& result);

// tunnel_status's result: {"state": N} or a bare N, 0 stopped, 1 connecting, 2 connected,
// 3 failed; nullopt when it is neither.
std::optional<int> tunnel_state(const nlohmann::json& result);
inline constexpr int kTunnelConnecting = 1;
inline constexpr int kTunnelConnected = 2;
// Whether the tunnel must be opened again: stopped or failed (connecting is left to finish).
bool tunnel_down(int state);

// deployment_id's result: a string, or a number written in decimal; nullopt otherwise.
std::optional<std::string> deployment_id(const nlohmann::json& result);

}  // namespace fg::agent::bridge
