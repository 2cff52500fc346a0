#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

namespace fg::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3 };

// Structured logging, one line per event on stderr. Format json (the default; for machines):
// {"ts":"2026-12-02T14:35:00.123Z","level":"info","msg":"...", ...fields}. Format text (for
// people): 2026-12-02T14:35:00.123Z INFO  ... key=value key="two words" (one line whatever the
// values hold). Privacy: callers never pass prompt or answer text, API keys or client IPs as
// fields.
using Field = std::pair<std::string_view, nlohmann::json>;

enum class Format { json, text };
// "json", "text" or "auto"; auto is text when stderr is a terminal, else json.
bool parse_format(std::string_view text, Format* out, bool stderr_is_terminal);
std::string_view to_string(Format format);
// One line (with its newline) in the given format. Pure: the caller passes the timestamp.
std::string format_line(Format format, std::string_view ts, Level level, std::string_view msg,
                        std::initializer_list<Field> fields);

void set_format(Format format);
Format format();
void set_level(Level level);
bool parse_level(std::string_view text, Level* out);
bool enabled(Level level);
void write(Level level, std::string_view msg, std::initializer_list<Field> fields = {});
// Written whatever the threshold: start-up facts an operator or a script needs even at
// log.level warn (the addresses a listener bound, which matter when the port was 0).
void write_always(Level level, std::string_view msg, std::initializer_list<Field> fields = {});

inline void debug(std::string_view m, std::initializer_list<Field> f = {}) {
  write(Level::debug, m, f);
}
inline void info(std::string_view m, std::initializer_list<Field> f = {}) {
  write(Level::info, m, f);
}
inline void warn(std::string_view m, std::initializer_list<Field> f = {}) {
  write(Level::warn, m, f);
}
inline void error(std::string_view m, std::initializer_list<Field> f = {}) {
  write(Level::error, m, f);
}

}  // namespace fg::log
