#include "common/openai/prompt_blocks.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include <nlohmann/json.hpp>

namespace fg::openai {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Little-endian on every platform, so a hash is the same wherever it is computed. On a
// little-endian host (x86-64, aarch64) that is one load: the byte loop, which GCC did not
// merge, made hashing cost ~8 instructions a byte, ~250k of the ~1M instructions a
// 7,000-token prompt took through the gateway.
std::uint64_t load64(const unsigned char* p) {
  std::uint64_t v = 0;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&v, p, sizeof v);
  } else {
    for (int i = 7; i >= 0; --i) {
      v = (v << 8) | p[i];
    }
  }
  return v;
}

void add_content_json(const nlohmann::json& content, PromptHasher& hasher) {
  if (content.is_string()) {
    hasher.add_content(content.get_ref<const std::string&>());
    return;
  }
  if (!content.is_array()) {
    return;
  }
  for (const auto& part : content) {
    if (!part.is_object()) {
      continue;
    }
    auto type = part.find("type");
    bool text_type = type == part.end() || (type->is_string() && *type == "text");
    auto text = part.find("text");
    if (text_type && text != part.end() && text->is_string()) {
      hasher.add_content(text->get_ref<const std::string&>());
    }
  }
}

}  // namespace

PromptHasher::PromptHasher(std::uint64_t key) : key_(splitmix64(key)), chain_(key_) {}

void PromptHasher::add_content(std::string_view piece) {
  feed(piece);
}

void PromptHasher::end_message(std::string_view role) {
  const char mark = kRoleMark;
  feed(std::string_view(&mark, 1));
  feed(role);
  const char end = kMessageEnd;
  feed(std::string_view(&end, 1));
}

void PromptHasher::add_message(std::string_view role, std::string_view content) {
  add_content(content);
  end_message(role);
}

void PromptHasher::add_prompt(std::string_view piece) {
  feed(piece);
}

PromptBlocks PromptHasher::finish() {
  PromptBlocks out = std::move(out_);
  out_ = PromptBlocks{};
  chain_ = key_;
  fill_ = 0;
  return out;
}

void PromptHasher::feed(std::string_view bytes) {
  out_.bytes += bytes.size();
  while (!bytes.empty() && out_.hashes.size() < kMaxPromptBlocks) {
    const std::size_t n = std::min(bytes.size(), kPromptBlockBytes - fill_);
    // memcpy, not copy_n: from char to unsigned char that was a byte loop (~5 instructions a byte).
    std::memcpy(block_ + fill_, bytes.data(), n);
    fill_ += n;
    bytes.remove_prefix(n);
    if (fill_ == kPromptBlockBytes) {
      seal_block();
    }
  }
}

void PromptHasher::seal_block() {
  static_assert(kPromptBlockBytes % 8 == 0);
  // Murmur-style word mixing seeded with the previous block's hash, then a strong finaliser. Not
  // cryptographic: a collision, chosen or not, costs one wrong guess about a phone's cache.
  std::uint64_t h = chain_ ^ 0x6A09E667F3BCC909ULL;
  for (std::size_t i = 0; i < kPromptBlockBytes; i += 8) {
    std::uint64_t w = load64(block_ + i) * 0x87C37B91114253D5ULL;
    w = std::rotl(w, 31) * 0x4CF5AD432745937FULL;
    h = std::rotl(h ^ w, 27) * 5 + 0x52DCE729;
  }
  chain_ = splitmix64(h ^ key_);
  out_.hashes.push_back(chain_);
  fill_ = 0;
}

PromptBlocks prompt_blocks(const nlohmann::json& body, std::uint64_t key) {
  PromptHasher hasher(key);
  if (!body.is_object()) {
    return hasher.finish();
  }
  if (auto messages = body.find("messages"); messages != body.end() && messages->is_array()) {
    for (const auto& message : *messages) {
      if (!message.is_object()) {
        continue;
      }
      if (auto content = message.find("content"); content != message.end()) {
        add_content_json(*content, hasher);
      }
      auto role = message.find("role");
      hasher.end_message(role != message.end() && role->is_string()
                             ? std::string_view(role->get_ref<const std::string&>())
                             : std::string_view());
    }
    return hasher.finish();
  }
  if (auto prompt = body.find("prompt"); prompt != body.end()) {
    if (prompt->is_string()) {
      hasher.add_prompt(prompt->get_ref<const std::string&>());
    } else if (prompt->is_array()) {
      for (const auto& piece : *prompt) {
        if (piece.is_string()) {
          hasher.add_prompt(piece.get_ref<const std::string&>());
        }
      }
    }
  }
  return hasher.finish();
}

}  // namespace fg::openai
