#include "common/log/log.hpp"

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <string>

namespace fg::log {

namespace {

std::atomic<Level> g_level{Level::info};
std::atomic<Format> g_format{Format::json};

std::string_view level_name(Level level) {
  switch (level) {
    case Level::debug:
      return "debug";
    case Level::info:
      return "info";
    case Level::warn:
      return "warn";
    case Level::error:
      return "error";
  }
  return "info";
}

// "2026-12-02T14:35:00.123Z": UTC so lines from different hosts sort together.
std::string timestamp() {
  const auto now = std::chrono::system_clock::now();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch());
  const std::time_t secs =
      static_cast<std::time_t>(std::chrono::floor<std::chrono::seconds>(ms).count());
  const int millis = static_cast<int>(ms.count() - static_cast<std::int64_t>(secs) * 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  const std::size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof(buf) - n, ".%03dZ", millis);
  return buf;
}

std::string_view level_label(Level level) {
  switch (level) {
    case Level::debug:
      return "DEBUG";
    case Level::info:
      return "INFO ";
    case Level::warn:
      return "WARN ";
    case Level::error:
      return "ERROR";
  }
  return "INFO ";
}

// A bare word when it is one (letters, digits and a few marks people read as part of a value),
// else a JSON string: quoted, with control characters, quotes and backslashes escaped, so a value
// can neither break the line nor fake another field.
void append_text_value(std::string& out, const nlohmann::json& value) {
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    const bool bare = !text.empty() && text.find_first_not_of(
                                           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                           "0123456789._:/-+@%,()[]") == std::string::npos;
    if (bare) {
      out += text;
      return;
    }
  }
  out += value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string json_line(std::string_view ts, Level level, std::string_view msg,
                      std::initializer_list<Field> fields) {
  nlohmann::ordered_json line = {{"ts", ts}, {"level", level_name(level)}, {"msg", msg}};
  for (const auto& [key, value] : fields) {
    // emplace does not overwrite: a field named "ts" or "msg" cannot forge the header.
    line.emplace(std::string(key), value);
  }
  return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string text_line(std::string_view ts, Level level, std::string_view msg,
                      std::initializer_list<Field> fields) {
  std::string out(ts);
  out += ' ';
  out += level_label(level);
  out += ' ';
  // The message is the gateway's own text, but keep the line whole whatever it holds.
  for (char c : msg) {
    out += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? ' ' : c;
  }
  for (const auto& [key, value] : fields) {
    out += ' ';
    for (char c : key) {
      out += std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.' ? c : '_';
    }
    out += '=';
    append_text_value(out, value);
  }
  return out;
}

}  // namespace

bool parse_format(std::string_view text, Format* out, bool stderr_is_terminal) {
  Format format;
  if (text == "json") {
    format = Format::json;
  } else if (text == "text") {
    format = Format::text;
  } else if (text == "auto") {
    format = stderr_is_terminal ? Format::text : Format::json;
  } else {
    return false;
  }
  if (out != nullptr) {
    *out = format;
  }
  return true;
}

std::string_view to_string(Format format) {
  return format == Format::text ? "text" : "json";
}

std::string format_line(Format format, std::string_view ts, Level level, std::string_view msg,
                        std::initializer_list<Field> fields) {
  std::string line = format == Format::text ? text_line(ts, level, msg, fields)
                                            : json_line(ts, level, msg, fields);
  line += '\n';
  return line;
}

void set_format(Format format) {
  g_format.store(format, std::memory_order_relaxed);
}

Format format() {
  return g_format.load(std::memory_order_relaxed);
}

void set_level(Level level) {
  g_level.store(level, std::memory_order_relaxed);
}

bool parse_level(std::string_view text, Level* out) {
  Level level;
  if (text == "debug") {
    level = Level::debug;
  } else if (text == "info") {
    level = Level::info;
  } else if (text == "warn" || text == "warning") {
    level = Level::warn;
  } else if (text == "error") {
    level = Level::error;
  } else {
    return false;
  }
  if (out != nullptr) {
    *out = level;
  }
  return true;
}

bool enabled(Level level) {
  return static_cast<int>(level) >= static_cast<int>(g_level.load(std::memory_order_relaxed));
}

void write(Level level, std::string_view msg, std::initializer_list<Field> fields) {
  if (!enabled(level)) {
    return;
  }
  write_always(level, msg, fields);
}

void write_always(Level level, std::string_view msg, std::initializer_list<Field> fields) {
  // Logging must never take the process down, whatever the fields hold.
  try {
    const std::string text = format_line(format(), timestamp(), level, msg, fields);
    // One fwrite per line: stdio locks the stream for the call, so threads never interleave.
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
  } catch (...) {
    static constexpr char kFallback[] = "{\"level\":\"error\",\"msg\":\"log line dropped\"}\n";
    std::fwrite(kFallback, 1, sizeof(kFallback) - 1, stderr);
  }
}

}  // namespace fg::log
