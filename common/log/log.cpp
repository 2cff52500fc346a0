#include "common/log/log.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <string>

namespace fg::log {

namespace {

std::atomic<Level> g_level{Level::info};

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

}  // namespace

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
    nlohmann::ordered_json line = {{"ts", timestamp()}, {"level", level_name(level)}, {"msg", msg}};
    for (const auto& [key, value] : fields) {
      // emplace does not overwrite: a field named "ts" or "msg" cannot forge the header.
      line.emplace(std::string(key), value);
    }
    std::string text = line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    text += '\n';
    // One fwrite per line: stdio locks the stream for the call, so threads never interleave.
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
  } catch (...) {
    static constexpr char kFallback[] = "{\"level\":\"error\",\"msg\":\"log line dropped\"}\n";
    std::fwrite(kFallback, 1, sizeof(kFallback) - 1, stderr);
  }
}

}  // namespace fg::log
