#include "orchestrator/scheduling/prompt_cache_model.hpp"

#include <optional>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace fg::scheduling {
namespace {

using Blocks = std::vector<BlockHash>;

// A prompt made of a shared part and a part of its own, hashed the way chained blocks behave:
// equal at a position only when everything before is equal too.
Blocks prompt(std::uint64_t shared, std::size_t shared_blocks, std::uint64_t own = 0,
              std::size_t own_blocks = 0) {
  Blocks out;
  for (std::size_t i = 0; i < shared_blocks; ++i) {
    out.push_back(shared * 1'000'003 + i + 1);
  }
  for (std::size_t i = 0; i < own_blocks; ++i) {
    out.push_back((own + 7919) * 999'983 + (i + 1) * 17 + 0x8000'0000'0000'0000ULL);
  }
  return out;
}

Blocks concat(const Blocks& a, std::uint64_t own, std::size_t n) {
  Blocks out = a;
  Blocks tail = prompt(0, 0, own, n);
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

constexpr std::uint64_t kBig = 1ull << 30;
constexpr ReplicaId kPhone = 1;

TEST(CommonPrefixBlocks, BinarySearchFindsTheSharedPrefix) {
  Blocks p = prompt(1, 40);
  EXPECT_EQ(common_prefix_blocks(p, p), 40u);
  EXPECT_EQ(common_prefix_blocks(p, prompt(2, 40)), 0u);
  EXPECT_EQ(common_prefix_blocks(concat(prompt(1, 13), 5, 9), p), 13u);
  EXPECT_EQ(common_prefix_blocks(prompt(1, 3), p), 3u);
  EXPECT_EQ(common_prefix_blocks({}, p), 0u);
  for (std::size_t k = 0; k <= 40; ++k) {
    EXPECT_EQ(common_prefix_blocks(concat(prompt(1, k), 9, 5), p), k);
  }
}

TEST(PromptCacheModel, OneSlotReusesTheSharedPrefix) {
  PromptCacheModel c(kBig, 0.1);
  c.set_slots(kPhone, 1);
  Blocks instructions = prompt(1, 40);
  EXPECT_EQ(c.expected_cached_blocks(kPhone, concat(instructions, 1, 15)), 0u);
  auto first = c.on_send(kPhone, concat(instructions, 1, 15));
  EXPECT_EQ(first.slot, 0u);
  EXPECT_EQ(first.cached_blocks, 0u);
  EXPECT_TRUE(c.slot_busy(kPhone, 0));
  EXPECT_EQ(c.slot_blocks(kPhone, 0), 55u);
  c.on_finish(kPhone, 0);
  EXPECT_FALSE(c.slot_busy(kPhone, 0));
  Blocks second = concat(instructions, 2, 15);
  EXPECT_EQ(c.expected_cached_blocks(kPhone, second), 40u);
  EXPECT_EQ(c.on_send(kPhone, second).cached_blocks, 40u);
  // Another instruction set replaces it.
  c.on_finish(kPhone, 0);
  EXPECT_EQ(c.on_send(kPhone, concat(prompt(2, 40), 3, 15)).cached_blocks, 0u);
  c.on_finish(kPhone, 0);
  EXPECT_EQ(c.expected_cached_blocks(kPhone, second), 0u);
  EXPECT_EQ(c.expected_cached_blocks(99, second), 0u);
}

TEST(PromptCacheModel, SlotChosenBySimilarityAmongIdleSlots) {
  PromptCacheModel c(kBig, 0.1);
  c.set_slots(kPhone, 2);
  // An empty phone takes the last of its equally unused slots (llama.cpp's LRU with `<=`).
  EXPECT_EQ(c.on_send(kPhone, concat(prompt(1, 40), 1, 10)).slot, 1u);
  EXPECT_EQ(c.on_send(kPhone, concat(prompt(2, 40), 2, 10)).slot, 0u);
  c.on_finish(kPhone, 1);
  c.on_finish(kPhone, 0);
  // Each instruction set goes back to the slot that holds it.
  auto a = c.on_send(kPhone, concat(prompt(2, 40), 3, 10));
  EXPECT_EQ(a.slot, 0u);
  EXPECT_EQ(a.cached_blocks, 40u);
  auto b = c.on_send(kPhone, concat(prompt(1, 40), 4, 10));
  EXPECT_EQ(b.slot, 1u);
  EXPECT_EQ(b.cached_blocks, 40u);
}

TEST(PromptCacheModel, BelowTheSimilarityThresholdTheLeastRecentlyUsedSlotIsTaken) {
  PromptCacheModel c(kBig, 0.5);
  c.set_slots(kPhone, 2);
  c.on_send(kPhone, concat(prompt(1, 4), 1, 36));   // slot 1
  c.on_send(kPhone, concat(prompt(2, 30), 2, 10));  // slot 0
  c.on_finish(kPhone, 1);                           // slot 1 used longer ago
  c.on_finish(kPhone, 0);
  // 4 of 40 blocks shared with slot 1 (10%): below 0.5, so by LRU, and slot 1 is the older.
  auto p = c.on_send(kPhone, concat(prompt(1, 4), 3, 36));
  EXPECT_EQ(p.slot, 1u);
  EXPECT_EQ(p.cached_blocks, 4u);
  c.on_finish(kPhone, 1);
  // Now slot 0 is the older: a prompt sharing 4 of 40 with slot 1 lands on slot 0, reusing 0.
  auto q = c.on_send(kPhone, concat(prompt(1, 4), 4, 36));
  EXPECT_EQ(q.slot, 0u);
  EXPECT_EQ(q.cached_blocks, 0u);
}

TEST(PromptCacheModel, BusyPhoneCountsTheSlotThatFreesFirst) {
  PromptCacheModel c(kBig, 0.1);
  c.set_slots(kPhone, 2);
  Blocks a = concat(prompt(1, 40), 1, 10);
  Blocks b = concat(prompt(2, 40), 2, 10);
  EXPECT_EQ(c.on_send(kPhone, a).slot, 1u);
  EXPECT_EQ(c.on_send(kPhone, b).slot, 0u);
  Blocks next_a = concat(prompt(1, 40), 3, 10);
  EXPECT_EQ(c.expected_cached_blocks(kPhone, next_a, 1u), 40u);
  EXPECT_EQ(c.expected_cached_blocks(kPhone, next_a, 0u), 0u);
  // With every slot busy and none named, any slot may be the one.
  EXPECT_EQ(c.expected_cached_blocks(kPhone, next_a), 40u);
}

TEST(PromptCacheModel, HostCacheKeepsPromptsASlotGaveUp) {
  PromptCacheModel c(kBig, 0.1);
  c.set_slots(kPhone, 1);
  c.set_host_capacity(kPhone, 1000);
  Blocks a = concat(prompt(1, 40), 1, 10);
  Blocks b = concat(prompt(2, 40), 2, 10);
  c.on_send(kPhone, a);
  c.on_finish(kPhone, 0);
  EXPECT_EQ(c.on_send(kPhone, b).cached_blocks, 0u);  // a is saved to the host cache
  c.on_finish(kPhone, 0);
  EXPECT_EQ(c.host_entries(kPhone), 1u);
  Blocks next_a = concat(prompt(1, 40), 3, 10);
  EXPECT_EQ(c.expected_cached_blocks(kPhone, next_a), 40u);
  // b goes to the host cache, a comes back from it into the slot.
  auto p = c.on_send(kPhone, next_a);
  EXPECT_EQ(p.cached_blocks, 40u);
  EXPECT_EQ(c.host_entries(kPhone), 1u);
  c.on_finish(kPhone, 0);
  EXPECT_EQ(c.expected_cached_blocks(kPhone, concat(prompt(2, 40), 4, 10)), 40u);
  // Without a host cache the slot alone counts.
  PromptCacheModel plain(kBig, 0.1);
  plain.set_slots(kPhone, 1);
  plain.on_send(kPhone, a);
  plain.on_finish(kPhone, 0);
  plain.on_send(kPhone, b);
  plain.on_finish(kPhone, 0);
  EXPECT_EQ(plain.expected_cached_blocks(kPhone, next_a), 0u);
  EXPECT_EQ(plain.host_entries(kPhone), 0u);
}

TEST(PromptCacheModel, HostCacheDropsTheOldestAndWhatItContains) {
  PromptCacheModel c(kBig, 0.1);
  c.set_slots(kPhone, 1);
  c.set_host_capacity(kPhone, 120);  // room for two 50-block prompts
  for (std::uint64_t k = 1; k <= 4; ++k) {
    c.on_send(kPhone, concat(prompt(k, 40), k, 10));
    c.on_finish(kPhone, 0);
  }
  // 1, 2, 3 were saved in turn; only the two newest fit.
  EXPECT_EQ(c.host_entries(kPhone), 2u);
  EXPECT_EQ(c.expected_cached_blocks(kPhone, concat(prompt(1, 40), 9, 10)), 0u);
  EXPECT_EQ(c.expected_cached_blocks(kPhone, concat(prompt(3, 40), 9, 10)), 40u);
  // A prompt that extends a cached one replaces it (the old one is contained in it).
  PromptCacheModel d(kBig, 0.1);
  d.set_slots(kPhone, 1);
  d.set_host_capacity(kPhone, 1000);
  Blocks chat = prompt(5, 20);
  d.on_send(kPhone, chat);
  d.on_finish(kPhone, 0);
  d.on_send(kPhone, prompt(6, 20));  // chat saved
  d.on_finish(kPhone, 0);
  // The chat's next turn: prompt 6 is saved and the chat comes back from the host cache.
  EXPECT_EQ(d.on_send(kPhone, concat(chat, 1, 30)).cached_blocks, 20u);
  d.on_finish(kPhone, 0);
  d.on_send(kPhone, prompt(7, 20));
  d.on_finish(kPhone, 0);
  EXPECT_EQ(d.host_entries(kPhone), 2u);  // prompt 6 and the longer chat
  // Shrinking the capacity drops the oldest at once.
  d.set_host_capacity(kPhone, 60);
  EXPECT_EQ(d.host_entries(kPhone), 1u);
}

TEST(PromptCacheModel, OneBudgetForEveryPhone) {
  const std::uint64_t budget =
      10 * PromptCacheModel::kBytesPerSequence + 300 * PromptCacheModel::kBytesPerBlock;
  PromptCacheModel c(budget, 0.1);
  for (ReplicaId phone = 1; phone <= 8; ++phone) {
    c.set_slots(phone, 1);
  }
  std::mt19937 rng(3);
  for (int i = 0; i < 500; ++i) {
    ReplicaId phone = rng() % 8 + 1;
    c.on_send(phone, concat(prompt(rng() % 4, 40), static_cast<std::uint64_t>(i), rng() % 30));
    c.on_finish(phone, 0);
    ASSERT_LE(c.bytes_used(), budget) << i;
  }
  EXPECT_GT(c.stats().evictions, 0u);
  // The most recently used prompt is still known, the oldest are not.
  c.on_send(3, prompt(9, 60));
  c.on_finish(3, 0);
  EXPECT_EQ(c.slot_blocks(3, 0), 60u);
  // A prompt larger than the whole budget is kept as far as it fits.
  c.on_send(4, prompt(10, 1000));
  EXPECT_LE(c.bytes_used(), budget);
  EXPECT_EQ(c.slot_blocks(4, 0),
            (budget - PromptCacheModel::kBytesPerSequence) / PromptCacheModel::kBytesPerBlock);
  // A smaller budget applies at once; removing phones frees what they held.
  c.configure(budget / 4, 0.1);
  EXPECT_LE(c.bytes_used(), budget / 4);
  for (ReplicaId phone = 1; phone <= 8; ++phone) {
    c.remove_phone(phone);
  }
  EXPECT_EQ(c.bytes_used(), 0u);
}

TEST(PromptCacheModel, ReportsCorrectTheBelief) {
  PromptCacheModel c(kBig, 0.1);
  c.set_slots(kPhone, 2);
  c.set_host_capacity(kPhone, 1000);
  c.on_send(kPhone, concat(prompt(1, 40), 1, 10));
  c.on_send(kPhone, concat(prompt(2, 40), 2, 10));
  c.on_finish(kPhone, 0);
  c.on_finish(kPhone, 1);
  auto p = c.on_send(kPhone, concat(prompt(1, 40), 3, 10));
  ASSERT_EQ(p.cached_blocks, 40u);
  // As predicted, or close: nothing changes.
  c.on_report(kPhone, p, 39);
  EXPECT_EQ(c.stats().under, 0u);
  EXPECT_EQ(c.slot_blocks(kPhone, p.slot == 0 ? 1 : 0), 50u);
  // More than predicted: noted.
  c.on_report(kPhone, PromptCacheModel::Placement{.slot = p.slot, .cached_blocks = 0}, 20);
  EXPECT_EQ(c.stats().over, 1u);
  // Nothing reused where 40 blocks were expected: the phone lost its cache; only the prompt it
  // just read is left.
  c.on_report(kPhone, p, 0);
  EXPECT_EQ(c.stats().under, 1u);
  EXPECT_EQ(c.stats().phones_cleared, 1u);
  EXPECT_EQ(c.slot_blocks(kPhone, p.slot), 50u);
  EXPECT_EQ(c.slot_blocks(kPhone, p.slot == 0 ? 1 : 0), 0u);
  EXPECT_EQ(c.stats().reports, 3u);
  EXPECT_EQ(c.stats().predicted_blocks, 80u);
  EXPECT_EQ(c.stats().reported_blocks, 59u);
}

TEST(PromptCacheModel, ResizeAndClear) {
  PromptCacheModel c(kBig, 0.1);
  c.set_slots(kPhone, 3);
  for (int i = 0; i < 3; ++i) {
    c.on_send(kPhone, prompt(static_cast<std::uint64_t>(i + 1), 10));
  }
  const std::uint64_t three = c.bytes_used();
  c.set_slots(kPhone, 1);
  EXPECT_LT(c.bytes_used(), three);
  EXPECT_EQ(c.slot_blocks(kPhone, 2), 0u);
  c.on_finish(kPhone, 2);  // a slot that no longer exists: ignored
  c.clear_phone(kPhone);
  EXPECT_EQ(c.bytes_used(), 0u);
  EXPECT_EQ(c.on_send(kPhone, prompt(1, 10)).cached_blocks, 0u);
  // An unknown phone places nothing.
  EXPECT_EQ(c.on_send(42, prompt(1, 10)).cached_blocks, 0u);
}

// llama-server's slot choice written as plainly as possible: every slot looked at, in order.
// The model keeps indexes of its idle slots instead; in random traffic over many slots (and
// resizes, and sends with every slot busy) the two must pick the same slot every time.
struct ReferenceSlots {
  struct Slot {
    Blocks blocks;
    bool busy = false;
    std::uint64_t last_used = 0;
  };
  std::vector<Slot> slots;
  std::uint64_t tick = 0;
  double similarity = 0.1;

  std::uint32_t choose(const Blocks& prompt, std::optional<std::uint32_t> also_idle) const {
    auto idle = [&](std::uint32_t i) { return !slots[i].busy || also_idle == i; };
    bool any_idle = false;
    for (std::uint32_t i = 0; i < slots.size(); ++i) {
      any_idle = any_idle || idle(i);
    }
    std::optional<std::uint32_t> pick;
    double best = 0;
    for (std::uint32_t i = 0; i < slots.size() && !prompt.empty(); ++i) {
      if ((any_idle && !idle(i)) || slots[i].blocks.empty()) {
        continue;
      }
      const double sim = static_cast<double>(common_prefix_blocks(slots[i].blocks, prompt)) /
                         static_cast<double>(prompt.size());
      if (sim > best && sim > similarity) {
        best = sim;
        pick = i;
      }
    }
    if (pick) {
      return *pick;
    }
    std::uint64_t oldest = 0;
    for (std::uint32_t i = 0; i < slots.size(); ++i) {
      if ((any_idle && !idle(i))) {
        continue;
      }
      if (!pick || slots[i].last_used <= oldest) {
        oldest = slots[i].last_used;
        pick = i;
      }
    }
    return *pick;
  }
};

TEST(PromptCacheModel, SlotChoiceMatchesAScanOfEverySlotInRandomTraffic) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 20; ++round) {
    PromptCacheModel c(kBig, 0.1);
    ReferenceSlots ref;
    auto resize = [&](std::uint32_t n) {
      c.set_slots(kPhone, n);
      ref.slots.resize(n);
    };
    resize(1 + static_cast<std::uint32_t>(rng() % 40));
    for (int step = 0; step < 600; ++step) {
      const auto roll = rng() % 100;
      if (roll < 2) {
        resize(1 + static_cast<std::uint32_t>(rng() % 40));
        continue;
      }
      std::vector<std::uint32_t> busy;
      for (std::uint32_t i = 0; i < ref.slots.size(); ++i) {
        if (ref.slots[i].busy) {
          busy.push_back(i);
        }
      }
      if (roll < 45 && !busy.empty()) {
        const std::uint32_t i = busy[rng() % busy.size()];
        c.on_finish(kPhone, i);
        ref.slots[i].busy = false;
        ref.slots[i].last_used = ++ref.tick;
        continue;
      }
      // A prompt: empty, or one of a few shared prefixes (sometimes whole) and a case of its own.
      Blocks p;
      if (rng() % 8 != 0) {
        p = prompt(1 + rng() % 4, 1 + rng() % 12);
        if (rng() % 3 != 0) {
          p = concat(p, rng() % 1000, 1 + rng() % 6);
        }
      }
      std::optional<std::uint32_t> also_idle;
      if (!busy.empty() && rng() % 2 == 0) {
        also_idle = busy[rng() % busy.size()];
      }
      const std::uint32_t want = ref.choose(p, also_idle);
      EXPECT_EQ(c.expected_cached_blocks(kPhone, p, also_idle),
                p.empty() ? 0u : common_prefix_blocks(ref.slots[want].blocks, p))
          << "round " << round << " step " << step;
      const std::uint32_t sent = ref.choose(p, std::nullopt);
      const auto placed = c.on_send(kPhone, p);
      ASSERT_EQ(placed.slot, sent) << "round " << round << " step " << step;
      EXPECT_EQ(placed.cached_blocks, common_prefix_blocks(ref.slots[sent].blocks, p));
      ref.slots[sent].blocks = p;
      ref.slots[sent].busy = true;
    }
  }
}

}  // namespace
}  // namespace fg::scheduling
