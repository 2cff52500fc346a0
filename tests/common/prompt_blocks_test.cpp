#include "common/openai/prompt_blocks.hpp"

#include <random>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace fg::openai {
namespace {

std::string text(std::size_t n, char c = 'a') {
  return std::string(n, c);
}

// Deterministic filler so that blocks differ from one another.
std::string words(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string out;
  while (out.size() < n) {
    out += static_cast<char>('a' + rng() % 26);
    if (rng() % 6 == 0) {
      out += ' ';
    }
  }
  out.resize(n);
  return out;
}

PromptBlocks whole(std::string_view prompt, std::uint64_t key = 0) {
  PromptHasher h(key);
  h.add_prompt(prompt);
  return h.finish();
}

TEST(PromptBlocks, EmptyPromptHasNoBlocks) {
  PromptHasher h;
  PromptBlocks b = h.finish();
  EXPECT_TRUE(b.hashes.empty());
  EXPECT_EQ(b.bytes, 0u);
}

TEST(PromptBlocks, OnlyWholeBlocksAreHashedButEveryByteCounts) {
  EXPECT_EQ(whole(text(kPromptBlockBytes - 1)).hashes.size(), 0u);
  EXPECT_EQ(whole(text(kPromptBlockBytes)).hashes.size(), 1u);
  PromptBlocks b = whole(text(2 * kPromptBlockBytes + 44));
  EXPECT_EQ(b.hashes.size(), 2u);
  EXPECT_EQ(b.bytes, 2 * kPromptBlockBytes + 44);
}

TEST(PromptBlocks, AtMostMaxBlocksAreHashedAndEveryByteStillCounts) {
  const std::size_t cap_bytes = kMaxPromptBlocks * kPromptBlockBytes;
  const std::string prompt = words(cap_bytes + 10 * kPromptBlockBytes + 5, 3);
  PromptBlocks long_one = whole(prompt);
  EXPECT_EQ(long_one.hashes.size(), kMaxPromptBlocks);
  EXPECT_EQ(long_one.bytes, prompt.size());
  // The hashes kept are those of its first kMaxPromptBlocks blocks, as for the prefix alone.
  PromptBlocks prefix = whole(std::string_view(prompt).substr(0, cap_bytes));
  EXPECT_EQ(long_one.hashes, prefix.hashes);
  // In pieces too (the scanner feeds it so).
  PromptHasher h;
  for (std::size_t i = 0; i < prompt.size(); i += 1000) {
    h.add_prompt(std::string_view(prompt).substr(i, 1000));
  }
  PromptBlocks pieces = h.finish();
  EXPECT_EQ(pieces.hashes, long_one.hashes);
  EXPECT_EQ(pieces.bytes, prompt.size());
}

TEST(PromptBlocks, PiecesOfAnySizeGiveTheSameBlocks) {
  const std::string prompt = words(5000, 1);
  const PromptBlocks expected = whole(prompt);
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    PromptHasher h;
    std::size_t at = 0;
    while (at < prompt.size()) {
      std::size_t n = std::min<std::size_t>(rng() % 300, prompt.size() - at);
      h.add_prompt(std::string_view(prompt).substr(at, n));
      at += n;
    }
    PromptBlocks b = h.finish();
    EXPECT_EQ(b.hashes, expected.hashes) << "round " << round;
    EXPECT_EQ(b.bytes, expected.bytes);
  }
}

TEST(PromptBlocks, SharedPrefixSharesExactlyItsWholeBlocks) {
  const std::string prefix = words(1000, 2);  // 7 whole blocks and 104 bytes
  PromptBlocks a = whole(prefix + words(900, 3));
  PromptBlocks b = whole(prefix + words(900, 4));
  ASSERT_EQ(a.hashes.size(), b.hashes.size());
  for (std::size_t i = 0; i < 7; ++i) {
    EXPECT_EQ(a.hashes[i], b.hashes[i]) << i;
  }
  for (std::size_t i = 7; i < a.hashes.size(); ++i) {
    EXPECT_NE(a.hashes[i], b.hashes[i]) << i;
  }
}

TEST(PromptBlocks, HashesAreChained) {
  // Equal bytes at different positions, or after a different history, hash differently.
  PromptBlocks same = whole(text(3 * kPromptBlockBytes));
  EXPECT_NE(same.hashes[0], same.hashes[1]);
  EXPECT_NE(same.hashes[1], same.hashes[2]);
  PromptBlocks other = whole(text(kPromptBlockBytes, 'b') + text(kPromptBlockBytes));
  EXPECT_NE(other.hashes[1], same.hashes[1]);
}

TEST(PromptBlocks, KeyChangesEveryHash) {
  const std::string prompt = words(1000, 5);
  PromptBlocks a = whole(prompt, 1);
  PromptBlocks b = whole(prompt, 2);
  EXPECT_EQ(whole(prompt, 1).hashes, a.hashes);
  for (std::size_t i = 0; i < a.hashes.size(); ++i) {
    EXPECT_NE(a.hashes[i], b.hashes[i]);
  }
}

// The hash is part of a contract (the simulator may compute it too): it must not change by
// accident, nor differ between platforms.
TEST(PromptBlocks, StableValues) {
  PromptBlocks b = whole(text(2 * kPromptBlockBytes));
  ASSERT_EQ(b.hashes.size(), 2u);
  EXPECT_EQ(b.hashes[0], 0xFD4D17ECFA85C51DULL);
  EXPECT_EQ(b.hashes[1], 0xEFA031D6BC0A7445ULL);
}

TEST(PromptBlocks, MessagesAreFramedByRole) {
  const std::string a = words(300, 6);
  const std::string b = words(300, 7);
  const std::string c = words(300, 13);  // so that whole blocks cover the framing before it
  PromptHasher h;
  h.add_message("user", a + b);
  h.add_message("user", c);
  PromptBlocks one = h.finish();
  h.add_message("user", a);
  h.add_message("user", b);
  h.add_message("user", c);
  PromptBlocks two = h.finish();
  h.add_message("system", a + b);
  h.add_message("user", c);
  PromptBlocks other_role = h.finish();
  // The same text split into two messages, or under another role, is another prompt.
  EXPECT_NE(one.hashes.back(), two.hashes.back());
  EXPECT_NE(one.hashes.back(), other_role.hashes.back());
  EXPECT_EQ(one.bytes, a.size() + b.size() + c.size() + 2 * (2 + 4));
  EXPECT_EQ(two.bytes, a.size() + b.size() + c.size() + 3 * (2 + 4));
}

TEST(PromptBlocks, StreamedMessageEqualsWholeMessage) {
  const std::string content = words(2000, 8);
  PromptHasher h;
  h.add_message("system", content);
  h.add_message("user", "hello");
  PromptBlocks expected = h.finish();
  for (std::size_t piece : {1u, 7u, 128u, 500u}) {
    for (std::size_t at = 0; at < content.size(); at += piece) {
      h.add_content(std::string_view(content).substr(at, piece));
    }
    h.end_message("system");
    h.add_content("hel");
    h.add_content("lo");
    h.end_message("user");
    EXPECT_EQ(h.finish().hashes, expected.hashes) << piece;
  }
}

TEST(PromptBlocks, ChatBodiesShareTheirInstructions) {
  const std::string instructions = words(20000, 9);
  auto body = [&](const std::string& case_text) {
    return nlohmann::json{{"model", "m"},
                          {"messages",
                           {{{"role", "system"}, {"content", instructions}},
                            {{"role", "user"}, {"content", case_text}}}}};
  };
  PromptBlocks a = prompt_blocks(body(words(8000, 10)));
  PromptBlocks b = prompt_blocks(body(words(8000, 11)));
  // instructions + mark + "system" + end, then the case.
  const std::size_t shared = (instructions.size() + 8) / kPromptBlockBytes;
  ASSERT_GT(a.hashes.size(), shared);
  for (std::size_t i = 0; i < shared; ++i) {
    ASSERT_EQ(a.hashes[i], b.hashes[i]) << i;
  }
  EXPECT_NE(a.hashes[shared], b.hashes[shared]);
  EXPECT_EQ(a.bytes, instructions.size() + 8 + 8000 + 6);
}

TEST(PromptBlocks, BodyShapes) {
  const std::string content = words(600, 12);
  PromptHasher h;
  h.add_message("user", content);
  PromptBlocks chat = h.finish();
  // Array content: the text parts, in order; other parts add nothing.
  nlohmann::json parts = {{"model", "m"},
                          {"messages",
                           {{{"role", "user"},
                             {"content",
                              {{{"type", "text"}, {"text", content.substr(0, 100)}},
                               {{"type", "image_url"}, {"image_url", {{"url", "data:..."}}}},
                               {{"type", "text"}, {"text", content.substr(100)}}}}}}}};
  EXPECT_EQ(prompt_blocks(parts).hashes, chat.hashes);
  // Completions: the prompt as it is, or its string elements concatenated.
  PromptBlocks plain = whole(content);
  EXPECT_EQ(prompt_blocks(nlohmann::json{{"prompt", content}}).hashes, plain.hashes);
  EXPECT_EQ(
      prompt_blocks(nlohmann::json{{"prompt", {content.substr(0, 50), 7, content.substr(50)}}})
          .hashes,
      plain.hashes);
  EXPECT_EQ(prompt_blocks(nlohmann::json::array()).bytes, 0u);
  EXPECT_EQ(prompt_blocks(nlohmann::json{{"prompt", {1, 2, 3}}}).bytes, 0u);
  // A message without a role, or with a null content, still frames.
  nlohmann::json odd = {{"messages", {{{"content", nullptr}}, 3, {{"role", "user"}}}}};
  EXPECT_EQ(prompt_blocks(odd).bytes, 2u + 2u + 4u);
}

}  // namespace
}  // namespace fg::openai
