#include "common/config/yaml_reader.hpp"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <sstream>
#include <utility>

#include "common/util/text.hpp"

namespace fg::yaml {

namespace {

int line_of(const YAML::Node& node, int fallback) {
  const YAML::Mark mark = node.Mark();
  return mark.is_null() ? fallback : mark.line + 1;
}

std::string shape_of(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return quote(node.Scalar());
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

[[noreturn]] void fail_in(const std::string& source, int line, std::string_view path,
                          const std::string& what) {
  throw Error(source + ":" + std::to_string(line) + ": " +
              (path.empty() ? std::string("(root)") : std::string(path)) + ": " + what);
}

// Thrown from inside yaml-cpp's parser by ShapeCheck; caught in Document::parse.
struct ShapeProblem {
  int line;
  std::string what;
  const char* path = "(root)";
};

// More documents than this in one file: the event pass stops (a configuration has one).
constexpr int kMaxDocuments = 16;

// Watches the parser's events before any node is built: counts how deeply maps and lists nest
// and refuses an alias to a map or list that is still open (a node containing itself), which
// would make every walk over it endless. yaml-cpp's parser recurses once per level, so stopping
// here at kMaxDepth bounds its stack too.
//
// It also stops yaml-cpp 0.7 looping forever: on a token that cannot start a value where a
// document is expected (a lone ',', as in a file holding only ","), its parser reports an empty
// document without consuming the token, again and again (jbeder/yaml-cpp#1040). A document that
// starts where the one before it started is that loop, and is refused as a syntax error.
class ShapeCheck : public YAML::EventHandler {
 public:
  explicit ShapeCheck(std::string_view text) : text_(text) {}
  void OnDocumentStart(const YAML::Mark& mark) override {
    open_.clear();
    if (documents_ > 0 && mark.pos == last_start_) {
      throw ShapeProblem{mark.line + 1, "unexpected " + describe_byte(mark.pos), "(syntax)"};
    }
    ++documents_;
    last_start_ = mark.pos;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    if (std::find(open_.begin(), open_.end(), anchor) != open_.end()) {
      throw ShapeProblem{mark.line + 1, "an alias inside the node it refers to (a loop)"};
    }
  }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    enter(mark, anchor);
  }
  void OnSequenceEnd() override { open_.pop_back(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    enter(mark, anchor);
  }
  void OnMapEnd() override { open_.pop_back(); }

 private:
  void enter(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (open_.size() >= static_cast<std::size_t>(kMaxDepth)) {
      throw ShapeProblem{mark.line + 1, "maps and lists nested deeper than " +
                                            std::to_string(kMaxDepth) +
                                            " levels; a configuration needs a handful"};
    }
    open_.push_back(anchor);
  }

  std::string describe_byte(int pos) const {
    if (pos < 0 || static_cast<std::size_t>(pos) >= text_.size()) {
      return "end of file";
    }
    const auto c = static_cast<unsigned char>(text_[static_cast<std::size_t>(pos)]);
    if (c >= 0x21 && c < 0x7f) {
      return std::string("'") + static_cast<char>(c) + "' where a value should start";
    }
    static constexpr char kHex[] = "0123456789abcdef";
    return std::string("byte 0x") + kHex[c >> 4] + kHex[c & 15] + " where a value should start";
  }

  std::string_view text_;
  std::vector<YAML::anchor_t> open_;  // the anchor of each open map or list (0: none)
  int documents_ = 0;
  int last_start_ = -1;  // where the last document started (YAML::Mark::pos)
};

}  // namespace

std::string join_path(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : std::string(path) + "." + std::string(key);
}

std::string index_path(std::string_view path, std::size_t i) {
  return std::string(path) + "[" + std::to_string(i) + "]";
}

// ---- Value ----

Value::Value(YAML::Node node, std::string path, int line, std::shared_ptr<const std::string> source)
    : node_(std::move(node)), path_(std::move(path)), line_(line), source_(std::move(source)) {}

std::string Value::describe() const {
  return shape_of(node_);
}

std::string Value::where() const {
  return source() + ":" + std::to_string(line_) + ": " + (path_.empty() ? "(root)" : path_);
}

void Value::fail(const std::string& what) const {
  fail_in(source(), line_, path_, what);
}

void Value::fail_at(int line, const std::string& path, const std::string& what) const {
  fail_in(source(), line, path, what);
}

Scalar Value::scalar() const {
  if (node_.IsScalar()) {
    return Scalar(where(), node_.Scalar(), "");
  }
  return Scalar(where(), std::nullopt, describe());
}

Map Value::map(const std::vector<std::string>& known) const {
  Map m(path_, line_, source_);
  if (node_.IsNull()) {
    return m;  // "server:" with every key commented out
  }
  if (!node_.IsMap()) {
    fail("expected a map, got " + describe());
  }
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    const YAML::Node key_node = it->first;
    const int key_line = line_of(key_node, line_);
    if (!key_node.IsScalar()) {
      fail_at(key_line, path_, "keys must be plain names, got " + shape_of(key_node));
    }
    const std::string& key = key_node.Scalar();
    const std::string key_path = join_path(path_, key);
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string what = "unknown key";
      if (const std::string hint = closest_word(key, known); !hint.empty()) {
        what += "; did you mean '" + hint + "'?";
      }
      fail_at(key_line, key_path, what);
    }
    // yaml-cpp keeps both of two equal keys and looks up the first; a repeated key is a mistake.
    if (m.has(key)) {
      fail_at(key_line, key_path, "duplicate key");
    }
    const YAML::Node value = it->second;
    // An empty value is blamed on its key's line: yaml-cpp marks it where the next token starts.
    const int value_line = value.IsNull() ? key_line : line_of(value, key_line);
    m.entries_.push_back({key, key_line, Value(value, key_path, value_line, source_)});
  }
  return m;
}

std::vector<Value> Value::list(std::string_view expected) const {
  std::vector<Value> items;
  if (node_.IsNull()) {
    return items;
  }
  if (!node_.IsSequence()) {
    fail("expected " + std::string(expected) + ", got " + describe());
  }
  items.reserve(node_.size());
  for (std::size_t i = 0; i < node_.size(); ++i) {
    const YAML::Node item = node_[i];
    items.emplace_back(item, index_path(path_, i), line_of(item, line_), source_);
  }
  return items;
}

// ---- Map ----

const Value* Map::find(std::string_view key) const {
  for (const auto& entry : entries_) {
    if (entry.key == key) {
      return &entry.value;
    }
  }
  return nullptr;
}

int Map::line_of(std::string_view key) const {
  const Value* v = find(key);
  return v == nullptr ? line_ : v->line();
}

std::string Map::path_of(std::string_view key) const {
  return join_path(path_, key);
}

void Map::fail(std::string_view key, const std::string& what) const {
  fail_in(*source_, line_of(key), path_of(key), what);
}

void Map::fail_at(int line, std::string_view path, const std::string& what) const {
  fail_in(*source_, line, path, what);
}

bool Map::read_string(std::string_view key, std::string& out) const {
  const Value* v = find(key);
  if (v != nullptr) {
    out = v->scalar().string();
  }
  return v != nullptr;
}

bool Map::read_whole(std::string_view key, std::uint32_t& out, std::uint32_t min,
                     std::uint32_t max) const {
  const Value* v = find(key);
  if (v != nullptr) {
    out = v->scalar().whole32(min, max);
  }
  return v != nullptr;
}

bool Map::read_whole(std::string_view key, std::uint64_t& out, std::uint64_t min,
                     std::uint64_t max) const {
  const Value* v = find(key);
  if (v != nullptr) {
    out = v->scalar().whole(min, max);
  }
  return v != nullptr;
}

bool Map::read_bool(std::string_view key, bool& out) const {
  const Value* v = find(key);
  if (v != nullptr) {
    out = v->scalar().boolean();
  }
  return v != nullptr;
}

bool Map::read_duration(std::string_view key, std::chrono::milliseconds& out,
                        bool allow_zero) const {
  const Value* v = find(key);
  if (v != nullptr) {
    out = v->scalar().duration(out, allow_zero);
  }
  return v != nullptr;
}

bool Map::read_env_name(std::string_view key, std::string& out) const {
  const Value* v = find(key);
  if (v != nullptr) {
    out = v->scalar().env_name();
  }
  return v != nullptr;
}

bool Map::read_host_port(std::string_view key, net::HostPort& out, std::string_view example) const {
  const Value* v = find(key);
  if (v != nullptr) {
    out = v->scalar().host_port(example);
  }
  return v != nullptr;
}

bool Map::read_one_of(std::string_view key, std::string& out,
                      const std::vector<std::string>& choices) const {
  const Value* v = find(key);
  if (v != nullptr) {
    out = v->scalar().one_of(choices);
  }
  return v != nullptr;
}

// ---- Document ----

Document Document::parse(const std::string& text, const std::string& source) {
  auto src = std::make_shared<const std::string>(source);
  // First the events alone: syntax, nesting and loops, in every document (LoadAll reads them
  // all). Only then are nodes built, from text known to be safe.
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    ShapeCheck check(text);
    int documents = 0;
    while (parser.HandleNextDocument(check)) {
      if (++documents >= kMaxDocuments) {
        fail_in(source, 1, "(root)", "only one YAML document is allowed");
      }
    }
  } catch (const ShapeProblem& problem) {
    fail_in(source, problem.line, problem.path, problem.what);
  } catch (const YAML::Exception& e) {
    fail_in(source, e.mark.is_null() ? 1 : e.mark.line + 1, "(syntax)", e.msg);
  }
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    fail_in(source, e.mark.is_null() ? 1 : e.mark.line + 1, "(syntax)", e.msg);
  }
  if (docs.size() > 1) {
    fail_in(source, line_of(docs[1], 1), "(root)",
            "only one YAML document is allowed (found a second '---')");
  }
  YAML::Node root = docs.empty() ? YAML::Node(YAML::NodeType::Null) : docs[0];
  const int line = line_of(root, 1);
  return Document(Value(std::move(root), "", line, std::move(src)));
}

}  // namespace fg::yaml
