#include "replica-agent/model/download.hpp"

#include <charconv>

namespace fg::agent::model {

namespace {

std::optional<std::uint64_t> parse_number(std::string_view text) {
  if (text.empty() || text.size() > 19) {
    return std::nullopt;
  }
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

}  // namespace

const char* to_string(State state) {
  switch (state) {
    case State::downloading:
      return "downloading";
    case State::verifying:
      return "verifying";
    case State::done:
      return "done";
    case State::failed:
      return "failed";
  }
  return "failed";
}

nlohmann::ordered_json progress_json(const Progress& progress) {
  nlohmann::ordered_json out{{"bytes_done", progress.bytes_done},
                             {"bytes_total", progress.bytes_total},
                             {"state", to_string(progress.state)}};
  if (!progress.error.empty()) {
    out["error"] = progress.error;
  }
  return out;
}

std::string range_header(std::uint64_t offset) {
  return "bytes=" + std::to_string(offset) + "-";
}

std::optional<ContentRange> parse_content_range(std::string_view value) {
  value = trim(value);
  constexpr std::string_view kUnit = "bytes ";
  if (value.substr(0, kUnit.size()) != kUnit) {
    return std::nullopt;
  }
  value.remove_prefix(kUnit.size());
  const auto slash = value.find('/');
  if (slash == std::string_view::npos) {
    return std::nullopt;
  }
  const std::string_view range = value.substr(0, slash);
  const std::string_view total = value.substr(slash + 1);
  ContentRange out;
  if (total != "*") {
    out.total = parse_number(total);
    if (!out.total) {
      return std::nullopt;
    }
  }
  if (range == "*") {
    if (!out.total) {
      return std::nullopt;  // "bytes */*" says nothing
    }
    return out;
  }
  const auto dash = range.find('-');
  if (dash == std::string_view::npos) {
    return std::nullopt;
  }
  out.first = parse_number(range.substr(0, dash));
  out.last = parse_number(range.substr(dash + 1));
  if (!out.first || !out.last || *out.last < *out.first || (out.total && *out.last >= *out.total)) {
    return std::nullopt;
  }
  return out;
}

Decision decide(std::uint64_t offset, unsigned status, std::string_view content_range,
                std::optional<std::uint64_t> content_length, bool has_location) {
  Decision d;
  const std::string http = "HTTP " + std::to_string(status);
  if (status == 200) {
    d.step = Step::restart;
    d.total = content_length;
    return d;
  }
  if (status == 206) {
    auto range = parse_content_range(content_range);
    if (!range || !range->first) {
      d.step = Step::fail;
      d.error = "HTTP 206 with a missing or malformed Content-Range";
      return d;
    }
    d.total = range->total;
    if (*range->first != offset) {
      d.step = Step::refetch;
      d.error = "the server sent bytes from " + std::to_string(*range->first) + ", not " +
                std::to_string(offset);
      return d;
    }
    d.step = Step::append;
    return d;
  }
  if (status == 416) {
    auto range = parse_content_range(content_range);
    if (range && range->total && *range->total == offset && offset > 0) {
      d.step = Step::complete;
      d.total = range->total;
      return d;
    }
    d.step = Step::refetch;
    d.error = "the partial file (" + std::to_string(offset) +
              " bytes) does not fit the server's file (HTTP 416)";
    return d;
  }
  if (status == 301 || status == 302 || status == 303 || status == 307 || status == 308) {
    if (has_location) {
      d.step = Step::redirect;
      return d;
    }
    d.step = Step::fail;
    d.error = http + " without a Location";
    return d;
  }
  if (status >= 500 || status == 408 || status == 429) {
    d.step = Step::retry;
    d.error = http;
    return d;
  }
  d.step = Step::fail;
  d.error = http + " from the model URL";
  return d;
}

std::string checksum_error(std::string_view expected, std::string_view got) {
  std::string out = "sha256 mismatch: expected ";
  out += expected;
  out += ", got ";
  out += got;
  return out;
}

std::string part_path(const std::string& path) {
  return path + ".part";
}

}  // namespace fg::agent::model
