#pragma once

// The YAML reading layer both binaries share: a file becomes a Document whose values know their
// line and full key path, maps check their keys (unknown ones get "did you mean", repeated ones
// are refused), and typed values are read through the rules of common/config/scalar.hpp. Each
// binary keeps only its schema (keys, defaults, checks across keys) on top. Every problem throws
// yaml::Error "file:line: key.path: what is wrong". Pure: yaml-cpp, no I/O (docs/configuration.md,
// "General rules").

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// impl.h defines the inline members node.h only declares (Node::Type(), which IsMap() and the
// others below call): without it a file using this header links only while some other object
// happens to carry an out-of-line copy, which at -O2 none did.
#include <yaml-cpp/node/impl.h>
#include <yaml-cpp/node/node.h>

#include "common/config/scalar.hpp"

namespace fg::yaml {

// Maps and lists inside each other at most this deep. Configurations need five or six levels;
// the limit keeps yaml-cpp's recursive parser far from the end of the stack on hostile input.
inline constexpr int kMaxDepth = 32;

class Map;

// One value of the document with where it is.
class Value {
 public:
  Value(YAML::Node node, std::string path, int line, std::shared_ptr<const std::string> source);

  const std::string& path() const { return path_; }  // "" for the root
  int line() const { return line_; }                 // 1-based
  const std::string& source() const { return *source_; }
  bool is_null() const { return node_.IsNull(); }
  bool is_map() const { return node_.IsMap(); }
  bool is_list() const { return node_.IsSequence(); }
  bool is_scalar() const { return node_.IsScalar(); }
  // For messages: "a map", "a list", "nothing" or the quoted text.
  std::string describe() const;
  // "file:line: path" ("(root)" for the root).
  std::string where() const;
  [[noreturn]] void fail(const std::string& what) const;
  // Fails at another place of the same file.
  [[noreturn]] void fail_at(int line, const std::string& path, const std::string& what) const;

  // The value for the rules of scalar.hpp (a map or a list is refused there).
  Scalar scalar() const;
  // A map with only known keys, each at most once. No value ("server:") is an empty map.
  Map map(const std::vector<std::string>& known) const;
  // The items of a list. No value is an empty list; anything else fails with
  // "expected <expected>, got ..." (expected such as "a list of endpoints").
  std::vector<Value> list(std::string_view expected) const;

 private:
  YAML::Node node_;
  std::string path_;
  int line_;
  std::shared_ptr<const std::string> source_;
};

// A checked map: its keys in file order, each with the line it is on.
class Map {
 public:
  struct Entry {
    std::string key;
    int key_line;
    Value value;
  };

  const std::string& path() const { return path_; }
  int line() const { return line_; }
  const std::vector<Entry>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }
  // nullptr when the key is absent.
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  // The line to blame for key: its value's (the key's own when the value is empty), or the map's
  // when the key is absent.
  int line_of(std::string_view key) const;
  std::string path_of(std::string_view key) const;
  // Fails at line_of(key) naming path_of(key); also for a key that is absent ("missing; ...").
  [[noreturn]] void fail(std::string_view key, const std::string& what) const;
  // Fails at another place of the same file.
  [[noreturn]] void fail_at(int line, std::string_view path, const std::string& what) const;

  // Readers: each reads key into out when present and returns whether it was.
  bool read_string(std::string_view key, std::string& out) const;
  bool read_whole(std::string_view key, std::uint32_t& out, std::uint32_t min = 0,
                  std::uint32_t max = std::numeric_limits<std::uint32_t>::max()) const;
  bool read_whole(std::string_view key, std::uint64_t& out, std::uint64_t min = 0,
                  std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) const;
  bool read_bool(std::string_view key, bool& out) const;
  // The message's example is out's value, the key's default.
  bool read_duration(std::string_view key, std::chrono::milliseconds& out, bool allow_zero) const;
  bool read_env_name(std::string_view key, std::string& out) const;
  bool read_host_port(std::string_view key, net::HostPort& out, std::string_view example) const;
  bool read_one_of(std::string_view key, std::string& out,
                   const std::vector<std::string>& choices) const;

 private:
  friend class Value;
  Map(std::string path, int line, std::shared_ptr<const std::string> source)
      : path_(std::move(path)), line_(line), source_(std::move(source)) {}

  std::string path_;
  int line_;
  std::shared_ptr<const std::string> source_;
  std::vector<Entry> entries_;
};

class Document {
 public:
  // Parses one YAML document. Refuses a syntax error ("(syntax)"), a second document, maps and
  // lists nested deeper than kMaxDepth, and an alias inside the node it names ("(root)"). The
  // nesting is counted on yaml-cpp's events before any node is built, so a hostile file never
  // recurses deeper than kMaxDepth.
  static Document parse(const std::string& text, const std::string& source);

  // The root; null when the file holds no document (empty, or only comments).
  const Value& root() const { return root_; }
  bool empty() const { return root_.is_null(); }

 private:
  explicit Document(Value root) : root_(std::move(root)) {}
  Value root_;
};

// "a.b" from "a" and "b"; "b" from "" and "b".
std::string join_path(std::string_view path, std::string_view key);
// "a[3]".
std::string index_path(std::string_view path, std::size_t i);

}  // namespace fg::yaml
