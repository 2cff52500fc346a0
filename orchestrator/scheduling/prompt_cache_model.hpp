#pragma once

// What the gateway believes each phone holds in its prompt cache, as chained block hashes of the
// canonical rendering (common/openai/prompt_blocks.hpp): per slot the last prompt it read, plus
// the phone's host prompt cache (llama-server --cache-ram) when the agent reports one. Pure.
//
// It follows llama-server's own rules (tools/server in the llama.cpp the project builds), so that
// a guess is right when the gateway is the phone's only client:
// - slot choice: among idle slots holding something, the one whose cached prefix is the largest
//   share of the new prompt, if that share exceeds --slot-prompt-similarity; otherwise the least
//   recently used idle slot;
// - host cache: when a slot is taken by LRU, or keeps less than half of what it held, its old
//   prompt is saved to the host cache (unless an entry already contains it; entries it contains
//   are dropped; the oldest go when over capacity), and the cached prompt sharing the most with
//   the new one (keeping at least a quarter of itself, better on both counts than the slot) is
//   loaded into the slot and leaves the host cache;
// - what is reused is the common prefix of the slot's (possibly loaded) prompt and the new one.
// The phone's reports (cached tokens of each answer) correct the belief: a phone that reused
// nothing where much was expected lost its cache (restart, another client), and is forgotten.
//
// Memory: one budget for every phone. Each remembered prompt costs kBytesPerSequence plus
// kBytesPerBlock per block (accounting, not malloc-exact); when a new one would exceed the
// budget the least recently used prompts anywhere are forgotten, and a prompt larger than the
// whole budget is kept only up to what fits.

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/openai/prompt_blocks.hpp"
#include "orchestrator/scheduling/types.hpp"

namespace fg::scheduling {

using openai::BlockHash;

class PromptCacheModel {
 public:
  static constexpr std::uint64_t kBytesPerBlock = sizeof(BlockHash);
  static constexpr std::uint64_t kBytesPerSequence = 96;

  PromptCacheModel(std::uint64_t budget_bytes, double slot_similarity);

  // A smaller budget forgets at once what no longer fits.
  void configure(std::uint64_t budget_bytes, double slot_similarity);

  // Creates the phone, or resizes it (slots beyond the new count are forgotten).
  void set_slots(ReplicaId phone, std::uint32_t slots);
  // Host prompt cache size in blocks; 0: the phone has none.
  void set_host_capacity(ReplicaId phone, std::uint64_t blocks);
  void remove_phone(ReplicaId phone);
  // Forgets everything the phone holds (its engine restarted).
  void clear_phone(ReplicaId phone);

  // Blocks the phone would reuse if the prompt were sent now. also_idle: a busy slot to count as
  // idle (the one expected to free first, when the phone is busy).
  std::size_t expected_cached_blocks(ReplicaId phone, std::span<const BlockHash> prompt,
                                     std::optional<std::uint32_t> also_idle = {}) const;

  struct Placement {
    std::uint32_t slot = 0;
    std::size_t cached_blocks = 0;  // the prediction
  };
  // The prompt was sent: the slot llama.cpp takes becomes busy and holds it.
  Placement on_send(ReplicaId phone, std::span<const BlockHash> prompt);
  // The request ended: its slot is idle again (and most recently used).
  void on_finish(ReplicaId phone, std::uint32_t slot);
  // The phone said how many prompt blocks it reused for the request placed as `placement`.
  void on_report(ReplicaId phone, const Placement& placement, std::size_t reported_blocks);

  std::uint64_t bytes_used() const { return used_; }
  std::uint64_t budget_bytes() const { return budget_; }

  struct Stats {
    std::uint64_t reports = 0;
    std::uint64_t predicted_blocks = 0;  // summed over reports
    std::uint64_t reported_blocks = 0;
    std::uint64_t under = 0;  // reused less than half the prediction
    std::uint64_t over = 0;   // reused more than one block beyond the prediction
    std::uint64_t evictions = 0;
    std::uint64_t phones_cleared = 0;
  };
  const Stats& stats() const { return stats_; }

  // What the model believes of one phone (admin API).
  struct PhoneSummary {
    std::uint64_t slot_blocks = 0;  // over its slots
    std::uint64_t host_entries = 0;
    std::uint64_t host_blocks = 0;
    std::uint64_t host_capacity_blocks = 0;
  };
  PhoneSummary summary(ReplicaId phone) const;
  // Blocks remembered over every phone (metrics).
  std::uint64_t blocks_held() const {
    return (used_ - kBytesPerSequence * seqs_.size()) / kBytesPerBlock;
  }

  // What the model believes (tests, admin).
  std::size_t slot_blocks(ReplicaId phone, std::uint32_t slot) const;
  std::size_t host_entries(ReplicaId phone) const;
  bool slot_busy(ReplicaId phone, std::uint32_t slot) const;

 private:
  using SeqId = std::uint64_t;
  static constexpr std::int32_t kHost = -1;
  struct Sequence {
    ReplicaId phone = 0;
    std::int32_t slot = kHost;
    std::vector<BlockHash> blocks;
    std::list<SeqId>::iterator lru;
  };
  struct Slot {
    SeqId seq = 0;  // 0: holds nothing the model knows of
    bool busy = false;
    std::uint64_t last_used = 0;
  };
  // An idle slot's place in least-recently-used order: older first, and among equals the
  // higher index first (llama.cpp's `<=` scan picks the last of equals).
  using LruKey = std::pair<std::uint64_t, std::uint32_t>;
  static LruKey lru_key(const Slot& slot, std::uint32_t i) { return {slot.last_used, ~i}; }
  struct Phone {
    std::vector<Slot> slots;
    // Indexes of the idle slots, kept by set_slot: choosing a slot walks only the idle slots that
    // hold a prompt and takes the least recently used one in O(log slots). A scan of every slot
    // cost 20.5k instructions per request on a 1,024-slot replica (bench cpu, 20% of a proxied
    // request).
    std::set<LruKey> idle_by_age;
    std::set<std::uint32_t> idle_holding;  // idle slots with a prompt, by index
    std::list<SeqId> host;                 // oldest first
    std::uint64_t host_capacity = 0;
    std::uint64_t host_blocks = 0;
  };
  struct Choice {
    std::optional<std::uint32_t> slot;
    bool save_to_host = false;
  };

  std::span<const BlockHash> blocks_of(SeqId seq) const;
  // Every change of a slot goes through here, so that the phone's idle indexes stay true.
  static void set_slot(Phone& p, std::uint32_t i, const Slot& next);
  static void set_slot_seq(Phone& p, std::uint32_t i, SeqId seq);
  Choice choose_slot(const Phone& p, std::span<const BlockHash> prompt,
                     std::optional<std::uint32_t> also_idle) const;
  // choose_slot when no slot is idle (the model out of step with the phone): every slot counts.
  Choice choose_any_slot(const Phone& p, std::span<const BlockHash> prompt) const;
  // The host entry llama.cpp would load into a slot holding `slot_seq`; 0 when none.
  SeqId best_host_entry(const Phone& p, SeqId slot_seq, std::span<const BlockHash> prompt) const;
  void save_to_host(Phone& p, std::uint32_t slot);
  SeqId add_sequence(ReplicaId phone, std::int32_t slot, std::span<const BlockHash> blocks);
  void drop_sequence(SeqId seq);
  void evict_until_fits(std::uint64_t incoming);
  void touch(SeqId seq);
  static std::uint64_t cost(std::size_t blocks) {
    return kBytesPerSequence + kBytesPerBlock * blocks;
  }

  std::uint64_t budget_;
  double similarity_;
  std::uint64_t used_ = 0;
  std::uint64_t tick_ = 0;
  SeqId next_seq_ = 1;
  std::unordered_map<SeqId, Sequence> seqs_;
  std::list<SeqId> lru_;  // least recently used first
  std::unordered_map<ReplicaId, Phone> phones_;
  Stats stats_;
};

// Length of the common prefix of two chained block-hash sequences: equal hashes at a position
// imply equal prefixes, so a binary search finds it in O(log n) comparisons.
std::size_t common_prefix_blocks(std::span<const BlockHash> a, std::span<const BlockHash> b);

}  // namespace fg::scheduling
