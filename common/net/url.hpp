#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fg::net {

// An upstream base URL such as "https://a1b2c3.acu.run" or "http://127.0.0.1:7001/prefix".
struct Url {
  std::string scheme;       // "http" or "https"
  std::string host;         // without brackets for IPv6 literals
  std::uint16_t port = 0;   // explicit or the scheme's default
  std::string path_prefix;  // "" or "/prefix" (never a trailing slash)
  bool tls() const { return scheme == "https"; }
  // Value for the Host header: the host, plus ":port" when it is not the scheme's default.
  std::string host_header() const;
  // scheme://host[:port]prefix, normalised.
  std::string to_string() const;
};

// Parses an http(s) URL. On failure returns nullopt and, when error is given, says why
// ("scheme must be http or https", "missing host", "port out of range", "query or fragment not
// allowed", ...).
std::optional<Url> parse_url(std::string_view text, std::string* error = nullptr);

// A listen address "host:port" ("127.0.0.1:8080", "0.0.0.0:0", "[::1]:9090"). Port 0 means "any
// free port".
struct HostPort {
  std::string host;
  std::uint16_t port = 0;
  std::string to_string() const;
};
std::optional<HostPort> parse_host_port(std::string_view text, std::string* error = nullptr);

}  // namespace fg::net
