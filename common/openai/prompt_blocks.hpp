#pragma once

// The canonical rendering of a request's prompt and its chained block hashes: what the gateway
// remembers about the prompts each phone holds in its cache (hashes only, never text). Pure and
// streaming: a one-pass scanner of the request body can feed the pieces as it meets them, without
// a DOM and without holding the prompt text.
//
// Rendering. Chat: for each message, its content (string content whole; for array content the
// "text" parts, in order), then kRoleMark, the role, kMessageEnd. The role comes after the content
// so that a scanner never holds content back whatever the key order of the message object: it
// streams the content and keeps only the (short) role until the message ends. Completions: the
// prompt text as it is, no marks. Shared instructions in front therefore render to the same bytes
// in every request, whatever follows them, which is all the prefix match needs.
//
// Blocks. The rendering is cut into kPromptBlockBytes-byte blocks; block i's hash covers its bytes
// and block i-1's hash, so equal hashes at position i mean equal renderings up to the end of block
// i (a prefix match is one comparison per block, and a binary search over positions). A trailing
// partial block is not hashed: it cannot be the cached prefix of a longer prompt, and the byte
// count still says how long the prompt is.
//
// Why 128 bytes: at ~4 bytes per token of English text with BPE tokenizers (the assumption the
// simulator makes too, and which the scheduler corrects per model from the token counts phones
// report), a block is ~32 tokens. llama.cpp reuses any common token prefix, so the block size only
// sets how finely the gateway sees it: the estimate of a cached prefix is short by less than one
// block, under 0.5% of a 7,000-token review and under a second of prefill on the slowest phone,
// and it is short by the same amount on every phone, so comparisons between phones do not move.
// Smaller blocks cost memory and hashing for nothing (a 7,000-token prompt is ~220 hashes, 1.7 KB).
//
// The hashes are keyed: a gateway passes a random key at start, so a hash means nothing outside
// the process (it cannot be compared with a table of hashes of known prompts).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace fg::openai {

using BlockHash = std::uint64_t;

inline constexpr std::size_t kPromptBlockBytes = 128;
// Blocks hashed per prompt, at most: 512 KiB of rendering, ~128k tokens, more than a phone's
// context holds, so no phone caches a longer prefix. Past it only the byte count grows. Without
// it a 4 MiB prompt (server.max_body_bytes) was 32,768 hashes (256 KiB) per request, each one
// then looked up and placed in the scheduler's prompt-cache model on the io thread.
inline constexpr std::size_t kMaxPromptBlocks = 4096;
inline constexpr char kRoleMark = '\x1f';
inline constexpr char kMessageEnd = '\x1e';

struct PromptBlocks {
  std::vector<BlockHash> hashes;  // one per whole block, chained; at most kMaxPromptBlocks
  std::uint64_t bytes = 0;        // length of the whole rendering, the partial block included
};

class PromptHasher {
 public:
  explicit PromptHasher(std::uint64_t key = 0);

  // Chat: a message is add_content any number of times (its pieces, in order), then
  // end_message(role).
  void add_content(std::string_view piece);
  void end_message(std::string_view role);
  void add_message(std::string_view role, std::string_view content);
  // Completions: the prompt text, in pieces.
  void add_prompt(std::string_view piece);

  // The blocks so far; the hasher starts over afterwards (same key).
  PromptBlocks finish();

 private:
  void feed(std::string_view bytes);
  void seal_block();

  std::uint64_t key_;
  std::uint64_t chain_;
  std::size_t fill_ = 0;
  unsigned char block_[kPromptBlockBytes] = {};
  PromptBlocks out_;
};

// The blocks of a parsed request body: "messages" (chat) when it is an array, else "prompt"
// (a string, or the string elements of an array, concatenated as the simulator reads them).
// Anything else (images, tool calls, token-id prompts, null contents) contributes nothing.
PromptBlocks prompt_blocks(const nlohmann::json& body, std::uint64_t key = 0);

}  // namespace fg::openai
