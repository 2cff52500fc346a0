#include "common/openai/inspect.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iterator>

#include <nlohmann/json.hpp>

#include "common/util/json.hpp"
#include "common/util/swar.hpp"

namespace fg::openai {

namespace {

constexpr std::string_view kJsonMediaType = "application/json";

InspectError bad_request(std::string code, std::string param, std::string message) {
  return InspectError{400, std::move(code), std::move(param), std::move(message)};
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

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// "application/json", optionally followed by parameters ("; charset=utf-8").
bool is_json_content_type(std::string_view content_type) {
  const std::size_t semicolon = content_type.find(';');
  return iequals(trim(content_type.substr(0, semicolon)), kJsonMediaType);
}

bool present(const nlohmann::json& doc, const char* key) {
  auto it = doc.find(key);
  return it != doc.end() && !it->is_null();
}

bool is_true(const nlohmann::json& doc, const char* key) {
  auto it = doc.find(key);
  return it != doc.end() && it->is_boolean() && it->get<bool>();
}

InspectError stateful(std::string param, std::string what) {
  return bad_request("unsupported_stateful_request", std::move(param),
                     what +
                         " needs a response kept on the server, and no replica of this gateway "
                         "keeps one (any phone may serve the next request); send the whole "
                         "conversation in 'input' instead (and leave 'store' out or false)");
}

// The Responses API's requests that only work against a server that keeps responses.
std::optional<InspectError> stateful_refusal(const nlohmann::json& doc) {
  if (present(doc, "previous_response_id")) {
    return stateful("previous_response_id", "'previous_response_id'");
  }
  if (present(doc, "conversation")) {
    return stateful("conversation", "'conversation'");
  }
  if (is_true(doc, "store")) {
    return stateful("store", "'store': true");
  }
  if (is_true(doc, "background")) {
    return stateful("background", "'background': true");
  }
  auto input = doc.find("input");
  if (input != doc.end() && input->is_array()) {
    for (const auto& item : *input) {
      auto type = item.is_object() ? item.find("type") : item.end();
      if (item.is_object() && type != item.end() && *type == "item_reference") {
        return stateful("input", "an input item of type 'item_reference'");
      }
    }
  }
  return std::nullopt;
}

// The answer's token limit, in the order RequestInfo::max_tokens takes them: the first that is
// an unsigned integer.
constexpr std::string_view kTokenLimitKeys[] = {"max_completion_tokens", "max_tokens",
                                                "max_output_tokens"};

// ---- the one-pass scan ----
//
// A validating recursive-descent scan of the body that builds nothing: it reads "model",
// "stream" and "stream_options" at the top level and notes where include_usage would be spliced.
// It accepts exactly what nlohmann::json::parse accepts (RFC 8259, a leading UTF-8 BOM skipped,
// UTF-8 checked byte by byte as nlohmann's lexer does, \u escapes with paired surrogates, numbers
// that overflow a double refused) and gives up (Outcome::fallback) wherever the DOM must decide:
// any error, a repeated relevant key, escapes where it would have to decode, nesting past
// kMaxJsonDepth. Measured: the DOM parse was ~45k of the gateway's ~97k-141k instructions per
// small chat request (callgrind, docs/benchmarks.md); the scan takes a few instructions a byte.
class Scanner {
 public:
  enum class Outcome { accepted, fallback };

  // With blocks: the prompt's blocks too (prompt_blocks.hpp), as prompt_blocks(DOM, key) gives.
  Scanner(std::string_view text, PromptBlocks* blocks, std::uint64_t key)
      : begin_(text.data()),
        p_(text.data()),
        end_(text.data() + text.size()),
        blocks_(blocks),
        messages_hasher_(key),
        prompt_hasher_(key) {}

  Outcome run(RequestInfo* info) {
    info_ = info;
    if (end_ - p_ >= 3 && static_cast<unsigned char>(p_[0]) == 0xEF &&
        static_cast<unsigned char>(p_[1]) == 0xBB && static_cast<unsigned char>(p_[2]) == 0xBF) {
      p_ += 3;
    }
    skip_ws();
    if (p_ == end_ || *p_ != '{') {
      return Outcome::fallback;  // not an object (or not JSON): the DOM says which
    }
    if (!top_object()) {
      return Outcome::fallback;
    }
    skip_ws();
    if (p_ != end_ || !seen_model_ || info_->model.empty()) {
      return Outcome::fallback;
    }
    set_splice();
    for (const auto& limit : limit_) {
      if (limit) {
        info_->max_tokens = static_cast<std::uint32_t>(std::min<std::uint64_t>(*limit, UINT32_MAX));
        break;
      }
    }
    if (blocks_ != nullptr) {
      // "messages" when it is an array, else "prompt": both were hashed, whichever came first.
      *blocks_ = messages_is_array_ ? messages_hasher_.finish() : prompt_hasher_.finish();
    }
    return Outcome::accepted;
  }

 private:
  static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
  void skip_ws() {
    while (p_ != end_ && is_ws(*p_)) {
      ++p_;
    }
  }
  bool eat(char c) {
    skip_ws();
    if (p_ != end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }
  std::uint32_t offset(const char* at) const { return static_cast<std::uint32_t>(at - begin_); }

  static int hex(char c) {
    if (c >= '0' && c <= '9') {
      return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
      return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
      return c - 'A' + 10;
    }
    return -1;
  }
  // Four hex digits after "\u"; -1 when malformed.
  int code_unit() {
    if (end_ - p_ < 4) {
      return -1;
    }
    int v = 0;
    for (int i = 0; i < 4; ++i) {
      const int d = hex(p_[i]);
      if (d < 0) {
        return -1;
      }
      v = v * 16 + d;
    }
    p_ += 4;
    return v;
  }
  static bool in(unsigned char c, unsigned char lo, unsigned char hi) { return c >= lo && c <= hi; }

  // A string, *p_ at its opening quote. raw: the bytes between the quotes; escaped: whether they
  // hold a backslash (raw is then not the value).
  bool string(std::string_view* raw, bool* escaped) {
    ++p_;
    const char* start = p_;
    *escaped = false;
    for (;;) {
      // Plain ASCII runs first: nearly every byte of a request. Eight bytes at a time while
      // none ends the run (common/util/swar.hpp: ~1.5 instructions a byte against ~5 for the
      // byte loop below, which then stops at the byte that ended it); a 7,000-token prompt is
      // ~28 KB of such runs.
      while (end_ - p_ >= 8) {
        const std::uint64_t word = swar::load(p_);
        const std::uint64_t marks = swar::below(word, 0x20) | swar::high(word) |
                                    swar::equal(word, '"') | swar::equal(word, '\\');
        if (marks != 0) {
          p_ += swar::first_marked(marks);
          break;
        }
        p_ += 8;
      }
      while (p_ != end_) {
        const auto c = static_cast<unsigned char>(*p_);
        if (c < 0x20 || c == '"' || c == '\\' || c >= 0x80) {
          break;
        }
        ++p_;
      }
      if (p_ == end_) {
        return false;
      }
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        *raw = std::string_view(start, static_cast<std::size_t>(p_ - start));
        ++p_;
        return true;
      }
      if (c < 0x20) {
        return false;  // control characters must be escaped
      }
      if (c == '\\') {
        *escaped = true;
        if (++p_ == end_) {
          return false;
        }
        const char e = *p_++;
        if (e == 'u') {
          const int unit = code_unit();
          if (unit < 0 || (unit >= 0xDC00 && unit <= 0xDFFF)) {
            return false;  // malformed, or a low surrogate alone
          }
          if (unit >= 0xD800 && unit <= 0xDBFF) {
            // A high surrogate must be followed by an escaped low one.
            if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') {
              return false;
            }
            p_ += 2;
            const int low = code_unit();
            if (low < 0xDC00 || low > 0xDFFF) {
              return false;
            }
          }
        } else if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' &&
                   e != 'r' && e != 't') {
          return false;
        }
        continue;
      }
      // UTF-8: the ranges of RFC 3629 (nlohmann's lexer checks the same): no overlong forms, no
      // encoded surrogates, nothing past U+10FFFF.
      const std::ptrdiff_t left = end_ - p_;
      const auto b1 = left > 1 ? static_cast<unsigned char>(p_[1]) : 0;
      const auto b2 = left > 2 ? static_cast<unsigned char>(p_[2]) : 0;
      const auto b3 = left > 3 ? static_cast<unsigned char>(p_[3]) : 0;
      if (in(c, 0xC2, 0xDF)) {
        if (!in(b1, 0x80, 0xBF)) {
          return false;
        }
        p_ += 2;
      } else if (in(c, 0xE0, 0xEF)) {
        const unsigned char lo = c == 0xE0 ? 0xA0 : 0x80;
        const unsigned char hi = c == 0xED ? 0x9F : 0xBF;
        if (!in(b1, lo, hi) || !in(b2, 0x80, 0xBF)) {
          return false;
        }
        p_ += 3;
      } else if (in(c, 0xF0, 0xF4)) {
        const unsigned char lo = c == 0xF0 ? 0x90 : 0x80;
        const unsigned char hi = c == 0xF4 ? 0x8F : 0xBF;
        if (!in(b1, lo, hi) || !in(b2, 0x80, 0xBF) || !in(b3, 0x80, 0xBF)) {
          return false;
        }
        p_ += 4;
      } else {
        return false;
      }
    }
  }

  bool skip_string() {
    std::string_view raw;
    bool escaped = false;
    return string(&raw, &escaped);
  }

  // A number as RFC 8259 writes it. One whose value overflows a double (1e400, or 400 digits)
  // is an error to nlohmann, so those few are checked with strtod.
  bool number() {
    const char* start = p_;
    if (*p_ == '-') {
      ++p_;
    }
    if (p_ == end_) {
      return false;
    }
    if (*p_ == '0') {
      ++p_;
    } else if (*p_ >= '1' && *p_ <= '9') {
      while (p_ != end_ && *p_ >= '0' && *p_ <= '9') {
        ++p_;
      }
    } else {
      return false;
    }
    const auto int_digits = p_ - start;
    bool exponent = false;
    if (p_ != end_ && *p_ == '.') {
      ++p_;
      const char* digits = p_;
      while (p_ != end_ && *p_ >= '0' && *p_ <= '9') {
        ++p_;
      }
      if (p_ == digits) {
        return false;
      }
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      exponent = true;
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) {
        ++p_;
      }
      const char* digits = p_;
      while (p_ != end_ && *p_ >= '0' && *p_ <= '9') {
        ++p_;
      }
      if (p_ == digits) {
        return false;
      }
    }
    if (exponent || int_digits > 300) {
      const std::string text(start, p_);
      return std::isfinite(std::strtod(text.c_str(), nullptr));
    }
    return true;
  }

  bool literal(std::string_view word) {
    if (static_cast<std::size_t>(end_ - p_) < word.size() ||
        std::string_view(p_, word.size()) != word) {
      return false;
    }
    p_ += word.size();
    return true;
  }

  // Any value, validated and skipped; *p_ at its first byte (no whitespace before).
  bool value(int depth) {
    if (p_ == end_) {
      return false;
    }
    switch (*p_) {
      case '{':
        return object(depth + 1);
      case '[':
        return array(depth + 1);
      case '"':
        return skip_string();
      case 't':
        return literal("true");
      case 'f':
        return literal("false");
      case 'n':
        return literal("null");
      default:
        return (*p_ == '-' || (*p_ >= '0' && *p_ <= '9')) && number();
    }
  }

  bool array(int depth) {
    if (depth > kMaxJsonDepth) {
      return false;
    }
    ++p_;
    if (eat(']')) {
      return true;
    }
    do {
      skip_ws();
      if (!value(depth)) {
        return false;
      }
    } while (eat(','));
    return eat(']');
  }

  // An object below the top level; members are only validated.
  bool object(int depth) {
    if (depth > kMaxJsonDepth) {
      return false;
    }
    ++p_;
    if (eat('}')) {
      return true;
    }
    do {
      skip_ws();
      if (p_ == end_ || *p_ != '"' || !skip_string() || !eat(':')) {
        return false;
      }
      skip_ws();
      if (!value(depth)) {
        return false;
      }
    } while (eat(','));
    return eat('}');
  }

  // true / false / null (as nullopt) for an optional boolean; false for anything else.
  bool optional_bool(std::optional<bool>* out) {
    if (p_ != end_ && *p_ == 't' && literal("true")) {
      *out = true;
      return true;
    }
    if (p_ != end_ && *p_ == 'f' && literal("false")) {
      *out = false;
      return true;
    }
    if (p_ != end_ && *p_ == 'n' && literal("null")) {
      *out = std::nullopt;
      return true;
    }
    return false;
  }

  // The value of a string the scan validated (raw between its quotes), as nlohmann decodes it.
  static std::string_view decoded(std::string_view raw, bool escaped, std::string* storage) {
    if (!escaped) {
      return raw;
    }
    storage->clear();
    for (std::size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '\\') {
        storage->push_back(raw[i]);
        continue;
      }
      const char e = raw[++i];
      switch (e) {
        case 'b':
          storage->push_back('\b');
          break;
        case 'f':
          storage->push_back('\f');
          break;
        case 'n':
          storage->push_back('\n');
          break;
        case 'r':
          storage->push_back('\r');
          break;
        case 't':
          storage->push_back('\t');
          break;
        case 'u': {
          auto unit = [&](std::size_t at) {
            unsigned v = 0;
            for (std::size_t k = 0; k < 4; ++k) {
              v = v * 16 + static_cast<unsigned>(hex(raw[at + k]));
            }
            return v;
          };
          unsigned cp = unit(i + 1);
          i += 4;
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (unit(i + 3) - 0xDC00);
            i += 6;
          }
          append_utf8(cp, storage);
          break;
        }
        default:  // " \ /
          storage->push_back(e);
          break;
      }
    }
    return *storage;
  }
  static void append_utf8(unsigned cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  // A key of an object whose members the scan reads (*p_ at its quote), then the colon. Escaped
  // keys go to the DOM: their decoded text could repeat a relevant key.
  bool member_key(std::string_view* key) {
    bool escaped = false;
    if (p_ == end_ || *p_ != '"' || !string(key, &escaped) || escaped || !eat(':')) {
      return false;
    }
    skip_ws();
    return true;
  }

  // One content part (depth 5): its "text" counts when "type" is absent or "text". The text is
  // fed when the part ends, since "type" may come after it.
  bool content_part() {
    ++p_;
    bool seen_type = false;
    bool seen_text = false;
    bool text_type = true;
    std::string_view text;
    bool text_escaped = false;
    bool text_is_string = false;
    if (!eat('}')) {
      do {
        skip_ws();
        std::string_view key;
        if (!member_key(&key)) {
          return false;
        }
        if (key == "type" || key == "text") {
          bool& seen = key == "type" ? seen_type : seen_text;
          if (seen) {
            return false;  // repeated: the DOM keeps the last
          }
          seen = true;
          if (p_ != end_ && *p_ == '"') {
            std::string_view raw;
            bool escaped = false;
            if (!string(&raw, &escaped)) {
              return false;
            }
            if (key == "type") {
              std::string storage;
              text_type = decoded(raw, escaped, &storage) == "text";
            } else {
              text = raw;
              text_escaped = escaped;
              text_is_string = true;
            }
          } else {
            if (key == "type") {
              text_type = false;
            }
            if (!value(5)) {
              return false;
            }
          }
        } else if (!value(5)) {
          return false;
        }
      } while (eat(','));
      if (!eat('}')) {
        return false;
      }
    }
    if (text_type && text_is_string) {
      messages_hasher_.add_content(decoded(text, text_escaped, &scratch_));
    }
    return true;
  }

  // One message (depth 3): its content (a string, or an array of parts) is fed as it comes; its
  // role is held (a view into the body) and fed when the message ends, as prompt_blocks renders.
  bool message() {
    ++p_;
    bool seen_content = false;
    bool seen_role = false;
    std::string_view role;
    bool role_escaped = false;
    if (!eat('}')) {
      do {
        skip_ws();
        std::string_view key;
        if (!member_key(&key)) {
          return false;
        }
        if (key == "content") {
          if (seen_content) {
            return false;
          }
          seen_content = true;
          if (p_ != end_ && *p_ == '"') {
            std::string_view raw;
            bool escaped = false;
            if (!string(&raw, &escaped)) {
              return false;
            }
            messages_hasher_.add_content(decoded(raw, escaped, &scratch_));
          } else if (p_ != end_ && *p_ == '[') {
            ++p_;
            if (!eat(']')) {
              do {
                skip_ws();
                if (p_ != end_ && *p_ == '{') {
                  if (!content_part()) {
                    return false;
                  }
                } else if (!value(4)) {
                  return false;
                }
              } while (eat(','));
              if (!eat(']')) {
                return false;
              }
            }
          } else if (!value(3)) {
            return false;
          }
        } else if (key == "role") {
          if (seen_role) {
            return false;
          }
          seen_role = true;
          if (p_ != end_ && *p_ == '"') {
            if (!string(&role, &role_escaped)) {
              return false;
            }
          } else if (!value(3)) {
            return false;
          }
        } else if (!value(3)) {
          return false;
        }
      } while (eat(','));
      if (!eat('}')) {
        return false;
      }
    }
    std::string storage;
    messages_hasher_.end_message(decoded(role, role_escaped, &storage));
    return true;
  }

  // "messages" (depth 2) when the blocks are wanted: each object element is a message.
  bool messages() {
    ++p_;
    messages_is_array_ = true;
    if (eat(']')) {
      return true;
    }
    do {
      skip_ws();
      if (p_ != end_ && *p_ == '{') {
        if (!message()) {
          return false;
        }
      } else if (!value(2)) {
        return false;
      }
    } while (eat(','));
    return eat(']');
  }

  // "prompt" when the blocks are wanted: a string, or the strings of an array.
  bool prompt() {
    std::string_view raw;
    bool escaped = false;
    if (p_ != end_ && *p_ == '"') {
      if (!string(&raw, &escaped)) {
        return false;
      }
      prompt_hasher_.add_prompt(decoded(raw, escaped, &scratch_));
      return true;
    }
    if (p_ == end_ || *p_ != '[') {
      return value(1);
    }
    ++p_;
    if (eat(']')) {
      return true;
    }
    do {
      skip_ws();
      if (p_ != end_ && *p_ == '"') {
        if (!string(&raw, &escaped)) {
          return false;
        }
        prompt_hasher_.add_prompt(decoded(raw, escaped, &scratch_));
      } else if (!value(2)) {
        return false;
      }
    } while (eat(','));
    return eat(']');
  }

  // "stream_options": an object (depth 2) of which include_usage is read.
  bool options_object() {
    ++p_;
    options_has_members_ = false;
    bool seen_usage = false;
    if (!eat('}')) {
      do {
        skip_ws();
        std::string_view key;
        bool escaped = false;
        if (p_ == end_ || *p_ != '"' || !string(&key, &escaped) || escaped || !eat(':')) {
          return false;
        }
        skip_ws();
        options_has_members_ = true;
        if (key == "include_usage") {
          if (seen_usage) {
            return false;  // repeated: the DOM keeps the last, let it decide
          }
          seen_usage = true;
          const char* at = p_;
          std::optional<bool> usage;
          if (!optional_bool(&usage)) {
            return false;  // not a boolean: the DOM's refusal
          }
          info_->include_usage = usage.value_or(false);
          usage_at_ = offset(at);
          usage_len_ = offset(p_) - usage_at_;
        } else if (!value(2)) {
          return false;
        }
      } while (eat(','));
      if (!eat('}')) {
        return false;
      }
    }
    options_close_ = offset(p_ - 1);
    has_usage_member_ = seen_usage;
    return true;
  }

  bool top_object() {
    ++p_;
    top_has_members_ = false;
    if (!eat('}')) {
      do {
        skip_ws();
        std::string_view key;
        bool escaped = false;
        if (p_ == end_ || *p_ != '"' || !string(&key, &escaped) || escaped || !eat(':')) {
          return false;
        }
        skip_ws();
        top_has_members_ = true;
        if (key == "model") {
          if (seen_model_ || p_ == end_ || *p_ != '"' || !string(&key, &escaped) || escaped) {
            return false;  // repeated, not a string (or null), or to be decoded: the DOM's
          }
          seen_model_ = true;
          info_->model.assign(key.data(), key.size());
        } else if (key == "stream") {
          std::optional<bool> stream;
          if (seen_stream_ || !optional_bool(&stream)) {
            return false;
          }
          seen_stream_ = true;
          info_->stream = stream.value_or(false);
        } else if (key == "stream_options") {
          if (seen_options_ || p_ == end_) {
            return false;
          }
          seen_options_ = true;
          options_at_ = offset(p_);
          if (*p_ == 'n' && literal("null")) {
            options_null_ = true;
          } else if (*p_ != '{' || !options_object()) {
            return false;
          }
        } else if (const int limit = token_limit_index(key); limit >= 0) {
          if (seen_limit_[limit]) {
            return false;  // repeated: the DOM keeps the last
          }
          seen_limit_[limit] = true;
          const char* at = p_;
          if (!value(1)) {
            return false;
          }
          limit_[limit] = unsigned_integer(std::string_view(at, static_cast<std::size_t>(p_ - at)));
        } else if (blocks_ != nullptr && (key == "messages" || key == "prompt")) {
          bool& seen = key == "messages" ? seen_messages_ : seen_prompt_;
          if (seen) {
            return false;  // repeated: the DOM keeps the last
          }
          seen = true;
          if (key == "prompt" ? !prompt() : (p_ != end_ && *p_ == '[' ? !messages() : !value(1))) {
            return false;
          }
        } else if (!value(1)) {
          return false;
        }
      } while (eat(','));
      if (!eat('}')) {
        return false;
      }
    }
    top_close_ = offset(p_ - 1);
    return true;
  }

  // The index of key in kTokenLimitKeys; -1 for any other key.
  static int token_limit_index(std::string_view key) {
    for (std::size_t i = 0; i < std::size(kTokenLimitKeys); ++i) {
      if (key == kTokenLimitKeys[i]) {
        return static_cast<int>(i);
      }
    }
    return -1;
  }
  // A number the scan validated, as an unsigned integer when nlohmann would store it as one
  // (digits only and within 64 bits; "-1", "5.0", "1e3" or a larger number are not).
  static std::optional<std::uint64_t> unsigned_integer(std::string_view text) {
    if (text.empty() || text.size() > 20) {
      return std::nullopt;
    }
    std::uint64_t v = 0;
    for (const char c : text) {
      if (c < '0' || c > '9') {
        return std::nullopt;
      }
      const auto d = static_cast<std::uint64_t>(c - '0');
      if (v > (UINT64_MAX - d) / 10) {
        return std::nullopt;
      }
      v = v * 10 + d;
    }
    return v;
  }

  void set_splice() {
    using Kind = RequestInfo::UsageSplice::Kind;
    RequestInfo::UsageSplice s;
    if (!seen_options_) {
      s = {Kind::add_options, top_has_members_, top_close_, 0};
    } else if (options_null_) {
      s = {Kind::set_options, false, options_at_, 4};
    } else if (!has_usage_member_) {
      s = {Kind::add_member, options_has_members_, options_close_, 0};
    } else {
      s = {Kind::set_value, false, usage_at_, usage_len_};
    }
    info_->usage_splice = s;
  }

  const char* begin_;
  const char* p_;
  const char* end_;
  PromptBlocks* blocks_;
  PromptHasher messages_hasher_;
  PromptHasher prompt_hasher_;
  std::string scratch_;  // decoded escaped text, reused
  bool seen_messages_ = false;
  bool seen_prompt_ = false;
  bool messages_is_array_ = false;
  RequestInfo* info_ = nullptr;
  bool seen_model_ = false;
  bool seen_stream_ = false;
  bool seen_options_ = false;
  bool options_null_ = false;
  bool has_usage_member_ = false;
  bool top_has_members_ = false;
  bool seen_limit_[std::size(kTokenLimitKeys)] = {};
  std::optional<std::uint64_t> limit_[std::size(kTokenLimitKeys)];
  bool options_has_members_ = false;
  std::uint32_t top_close_ = 0;
  std::uint32_t options_at_ = 0;
  std::uint32_t options_close_ = 0;
  std::uint32_t usage_at_ = 0;
  std::uint32_t usage_len_ = 0;
};

}  // namespace

std::variant<RequestInfo, InspectError> inspect_request(Api api, std::string_view content_type,
                                                        std::string_view body) {
  return inspect_request(api, content_type, body, nullptr, 0);
}

std::variant<RequestInfo, InspectError> inspect_request(Api api, std::string_view content_type,
                                                        std::string_view body, PromptBlocks* blocks,
                                                        std::uint64_t key) {
  // The Responses API's stateful checks read more of the body: the DOM does them. Offsets are
  // 32-bit: a body of 4 GiB or more (far past server.max_body_bytes) goes through the DOM.
  if (api == Api::openai || api == Api::anthropic) {
    if (is_json_content_type(content_type) && body.size() < 0xFFFFFFFFu) {
      RequestInfo info;
      PromptBlocks scanned;
      if (Scanner(body, blocks != nullptr ? &scanned : nullptr, key).run(&info) ==
          Scanner::Outcome::accepted) {
        if (blocks != nullptr) {
          *blocks = std::move(scanned);
        }
        return info;
      }
    }
  }
  return inspect_request_dom(api, content_type, body, blocks, key);
}

std::variant<RequestInfo, InspectError> inspect_request(std::string_view content_type,
                                                        std::string_view body) {
  return inspect_request(Api::openai, content_type, body);
}

std::variant<RequestInfo, InspectError> inspect_request_dom(Api api, std::string_view content_type,
                                                            std::string_view body,
                                                            PromptBlocks* blocks,
                                                            std::uint64_t key) {
  if (!is_json_content_type(content_type)) {
    return InspectError{415, "unsupported_media_type", "", "Content-Type must be application/json"};
  }
  if (body.empty()) {
    return bad_request("invalid_json", "", "request body is empty; expected a JSON object");
  }
  if (!json_depth_within(body)) {
    return bad_request(
        "invalid_json", "",
        "request body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(body);
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() quotes the text around the error, so only the byte offset is reported.
    return bad_request(
        "invalid_json", "",
        "request body is not valid JSON (error at byte " + std::to_string(e.byte) + ")");
  } catch (const nlohmann::json::exception&) {
    return bad_request("invalid_json", "", "request body is not valid JSON");
  }
  if (!doc.is_object()) {
    return bad_request("invalid_request", "", "request body must be a JSON object");
  }

  RequestInfo info;
  const auto model = doc.find("model");
  if (model == doc.end() || model->is_null()) {
    return bad_request("missing_model", "model", "you must provide a model parameter");
  }
  if (!model->is_string()) {
    return bad_request("invalid_model", "model", "'model' must be a string");
  }
  info.model = model->get<std::string>();
  if (info.model.empty()) {
    return bad_request("missing_model", "model", "you must provide a model parameter");
  }

  // null is accepted wherever an optional field is: OpenAI and its SDKs treat it as "not given".
  const auto stream = doc.find("stream");
  if (stream != doc.end() && !stream->is_null()) {
    if (!stream->is_boolean()) {
      return bad_request("invalid_type", "stream", "'stream' must be a boolean");
    }
    info.stream = stream->get<bool>();
  }

  const auto options = doc.find("stream_options");
  if (options != doc.end() && !options->is_null()) {
    if (!options->is_object()) {
      return bad_request("invalid_type", "stream_options", "'stream_options' must be an object");
    }
    const auto usage = options->find("include_usage");
    if (usage != options->end() && !usage->is_null()) {
      if (!usage->is_boolean()) {
        return bad_request("invalid_type", "stream_options.include_usage",
                           "'stream_options.include_usage' must be a boolean");
      }
      info.include_usage = usage->get<bool>();
    }
  }
  for (std::string_view key : kTokenLimitKeys) {
    const auto it = doc.find(key);
    if (it != doc.end() && it->is_number_unsigned()) {
      info.max_tokens =
          static_cast<std::uint32_t>(std::min<std::uint64_t>(it->get<std::uint64_t>(), UINT32_MAX));
      break;
    }
  }
  if (api == Api::responses) {
    if (auto refusal = stateful_refusal(doc)) {
      return *std::move(refusal);
    }
  }
  if (blocks != nullptr) {
    *blocks = prompt_blocks(doc, key);
  }
  return info;
}

}  // namespace fg::openai

namespace fg::openai {

std::optional<std::string> with_stream_usage(std::string_view body, const RequestInfo& info) {
  if (!info.usage_splice) {
    return with_stream_usage(body);
  }
  using Kind = RequestInfo::UsageSplice::Kind;
  const auto& s = *info.usage_splice;
  std::string_view insert;
  switch (s.kind) {
    case Kind::add_options:
      insert = s.comma ? R"(,"stream_options":{"include_usage":true})"
                       : R"("stream_options":{"include_usage":true})";
      break;
    case Kind::set_options:
      insert = R"({"include_usage":true})";
      break;
    case Kind::add_member:
      insert = s.comma ? R"(,"include_usage":true)" : R"("include_usage":true)";
      break;
    case Kind::set_value:
      insert = "true";
      break;
  }
  if (s.at > body.size() || s.erase > body.size() - s.at) {
    return with_stream_usage(body);  // not this body's splice
  }
  std::string out;
  out.reserve(body.size() + insert.size());
  out.append(body.substr(0, s.at));
  out.append(insert);
  out.append(body.substr(s.at + s.erase));
  return out;
}

std::optional<std::string> with_stream_usage(std::string_view body) {
  auto doc = nlohmann::ordered_json::parse(body, nullptr, false);
  if (!doc.is_object()) {
    return std::nullopt;
  }
  auto& options = doc["stream_options"];
  if (!options.is_object()) {
    options = nlohmann::ordered_json::object();
  }
  options["include_usage"] = true;
  return doc.dump();
}

}  // namespace fg::openai
