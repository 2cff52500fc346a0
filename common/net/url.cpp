#include "common/net/url.hpp"

#include <algorithm>
#include <cctype>

namespace fg::net {

namespace {

constexpr std::string_view kSchemeSep = "://";

void set_error(std::string* error, std::string_view why) {
  if (error != nullptr) {
    *error = why;
  }
}

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

// Rejects spaces, control bytes and non-ASCII: they would corrupt a request line or Host header.
bool is_visible_ascii(std::string_view s) {
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) {
      return false;
    }
  }
  return true;
}

bool is_hex(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) != 0;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Dotted-quad IPv4, used for the tail of an IPv6 literal such as ::ffff:1.2.3.4.
bool is_ipv4(std::string_view s) {
  int parts = 0;
  while (true) {
    std::size_t n = 0;
    int value = 0;
    while (n < s.size() && is_digit(s[n])) {
      value = value * 10 + (s[n] - '0');
      if (++n > 3) {
        return false;
      }
    }
    if (n == 0 || value > 255) {
      return false;
    }
    ++parts;
    s.remove_prefix(n);
    if (s.empty()) {
      return parts == 4;
    }
    if (s.front() != '.' || parts == 4) {
      return false;
    }
    s.remove_prefix(1);
  }
}

// RFC 4291 text form: eight 16-bit hex groups, one "::" may stand for a run of zero groups, and
// the last 32 bits may be written as IPv4. Zone ids ("%eth0") are not accepted.
bool is_ipv6(std::string_view s) {
  const std::size_t gap = s.find("::");
  if (gap != std::string_view::npos && s.find("::", gap + 1) != std::string_view::npos) {
    return false;
  }
  // Counts groups in a colon-separated run with no "::"; an empty run has zero groups.
  auto count_groups = [](std::string_view run, bool allow_ipv4_tail, int* groups) {
    *groups = 0;
    if (run.empty()) {
      return true;
    }
    while (true) {
      const std::size_t colon = run.find(':');
      const std::string_view group = run.substr(0, colon);
      if (colon == std::string_view::npos && allow_ipv4_tail &&
          group.find('.') != std::string_view::npos) {
        if (!is_ipv4(group)) {
          return false;
        }
        *groups += 2;
        return true;
      }
      if (group.empty() || group.size() > 4) {
        return false;
      }
      for (char c : group) {
        if (!is_hex(c)) {
          return false;
        }
      }
      ++*groups;
      if (colon == std::string_view::npos) {
        return true;
      }
      run.remove_prefix(colon + 1);
    }
  };
  int head = 0;
  int tail = 0;
  if (gap == std::string_view::npos) {
    return count_groups(s, true, &head) && head == 8;
  }
  if (!count_groups(s.substr(0, gap), false, &head) ||
      !count_groups(s.substr(gap + 2), true, &tail)) {
    return false;
  }
  return head + tail <= 7;
}

// Registered names and IPv4 addresses: letters, digits, '-', '.', '_'. No percent-encoding: an
// upstream host in a config file never needs it.
bool is_reg_name(std::string_view s) {
  if (s.empty()) {
    return false;
  }
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_')) {
      return false;
    }
  }
  return true;
}

// Parses a decimal port. Returns nullopt for a non-digit; values above 65535 saturate at 65536 so
// that callers can say "out of range" rather than "invalid".
std::optional<std::uint32_t> parse_port_number(std::string_view s) {
  if (s.empty()) {
    return std::nullopt;
  }
  std::uint32_t value = 0;
  for (char c : s) {
    if (!is_digit(c)) {
      return std::nullopt;
    }
    value = std::min<std::uint32_t>(value * 10 + static_cast<std::uint32_t>(c - '0'), 65536);
  }
  return value;
}

// Checks a port for a URL or listen address; port 0 is only meaningful for listening.
bool read_port(std::string_view text, bool allow_zero, std::uint16_t* port, std::string* error) {
  const auto value = parse_port_number(text);
  if (!value) {
    set_error(error, text.empty() ? "missing port" : "invalid port");
    return false;
  }
  if (*value > 65535 || (*value == 0 && !allow_zero)) {
    set_error(error, "port out of range");
    return false;
  }
  *port = static_cast<std::uint16_t>(*value);
  return true;
}

// Splits "host[:port]" or "[v6][:port]" and validates the host. port_text is empty when absent.
bool split_authority(std::string_view authority, std::string* host, std::string_view* port_text,
                     bool* has_port, std::string* error) {
  std::string_view host_text;
  std::string_view rest;
  if (!authority.empty() && authority.front() == '[') {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      set_error(error, "unterminated IPv6 literal");
      return false;
    }
    host_text = authority.substr(1, close - 1);
    rest = authority.substr(close + 1);
    if (host_text.empty()) {
      set_error(error, "missing host");
      return false;
    }
    if (!is_ipv6(host_text)) {
      set_error(error, "invalid IPv6 address");
      return false;
    }
    if (!rest.empty() && rest.front() != ':') {
      set_error(error, "unexpected characters after IPv6 literal");
      return false;
    }
  } else {
    const std::size_t colon = authority.find(':');
    host_text = authority.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view{} : authority.substr(colon);
    if (host_text.empty()) {
      set_error(error, "missing host");
      return false;
    }
    if (rest.find(':', 1) != std::string_view::npos) {
      set_error(error, "IPv6 addresses must be in brackets");
      return false;
    }
    if (!is_reg_name(host_text)) {
      set_error(error, "invalid host");
      return false;
    }
  }
  *has_port = !rest.empty();
  *port_text = *has_port ? rest.substr(1) : std::string_view{};
  // Host names and IPv6 hex digits are case-insensitive; one spelling keeps Host headers and
  // pool keys consistent.
  *host = to_lower(host_text);
  return true;
}

std::uint16_t default_port(std::string_view scheme) {
  return scheme == "https" ? 443 : 80;
}

std::string bracket(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

}  // namespace

std::string Url::host_header() const {
  std::string out = bracket(host);
  if (port != default_port(scheme)) {
    out += ':';
    out += std::to_string(port);
  }
  return out;
}

std::string Url::to_string() const {
  return scheme + "://" + host_header() + path_prefix;
}

std::optional<Url> parse_url(std::string_view text, std::string* error) {
  if (!is_visible_ascii(text)) {
    set_error(error, "URL must be printable ASCII without spaces");
    return std::nullopt;
  }
  const std::size_t sep = text.find(kSchemeSep);
  if (sep == std::string_view::npos) {
    set_error(error, "scheme must be http or https");
    return std::nullopt;
  }
  Url url;
  url.scheme = to_lower(text.substr(0, sep));
  if (url.scheme != "http" && url.scheme != "https") {
    set_error(error, "scheme must be http or https");
    return std::nullopt;
  }
  std::string_view rest = text.substr(sep + kSchemeSep.size());
  if (rest.find_first_of("?#") != std::string_view::npos) {
    set_error(error, "query or fragment not allowed");
    return std::nullopt;
  }
  const std::size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos) {
    set_error(error, "userinfo not allowed");
    return std::nullopt;
  }
  std::string_view port_text;
  bool has_port = false;
  if (!split_authority(authority, &url.host, &port_text, &has_port, error)) {
    return std::nullopt;
  }
  if (has_port) {
    if (!read_port(port_text, false, &url.port, error)) {
      return std::nullopt;
    }
  } else {
    url.port = default_port(url.scheme);
  }
  // Requests append "/v1/...", so "/prefix/" and "/prefix" must mean the same thing.
  while (!path.empty() && path.back() == '/') {
    path.remove_suffix(1);
  }
  url.path_prefix = path;
  return url;
}

std::string HostPort::to_string() const {
  return bracket(host) + ":" + std::to_string(port);
}

std::optional<HostPort> parse_host_port(std::string_view text, std::string* error) {
  if (!is_visible_ascii(text)) {
    set_error(error, "address must be printable ASCII without spaces");
    return std::nullopt;
  }
  HostPort out;
  std::string_view port_text;
  bool has_port = false;
  if (!split_authority(text, &out.host, &port_text, &has_port, error)) {
    return std::nullopt;
  }
  if (!has_port) {
    set_error(error, "missing port");
    return std::nullopt;
  }
  if (!read_port(port_text, true, &out.port, error)) {
    return std::nullopt;
  }
  return out;
}

}  // namespace fg::net
