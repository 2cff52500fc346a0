#include "orchestrator/scheduling/prompt_cache_model.hpp"

#include <algorithm>

namespace fg::scheduling {

namespace {

// llama-server's thresholds (server-context.cpp / server-task.cpp): a slot that keeps less than
// half of its prompt is saved to the host cache first; a host entry is only loaded when the new
// prompt keeps at least a quarter of it.
constexpr double kSaveBelowKeep = 0.5;
constexpr double kLoadMinKeep = 0.25;

double share(std::size_t part, std::size_t whole) {
  return whole == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(whole);
}

}  // namespace

std::size_t common_prefix_blocks(std::span<const BlockHash> a, std::span<const BlockHash> b) {
  // Largest k with a[k-1] == b[k-1]; the predicate holds for every shorter prefix too.
  std::size_t lo = 0;
  std::size_t hi = std::min(a.size(), b.size());
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo + 1) / 2;
    if (a[mid - 1] == b[mid - 1]) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

PromptCacheModel::PromptCacheModel(std::uint64_t budget_bytes, double slot_similarity)
    : budget_(budget_bytes), similarity_(slot_similarity) {}

void PromptCacheModel::configure(std::uint64_t budget_bytes, double slot_similarity) {
  budget_ = budget_bytes;
  similarity_ = slot_similarity;
  evict_until_fits(0);
}

void PromptCacheModel::set_slots(ReplicaId phone, std::uint32_t slots) {
  Phone& p = phones_[phone];
  while (p.slots.size() > slots) {
    if (p.slots.back().seq != 0) {
      drop_sequence(p.slots.back().seq);
    }
    const auto last = static_cast<std::uint32_t>(p.slots.size() - 1);
    p.idle_by_age.erase(lru_key(p.slots.back(), last));
    p.slots.pop_back();
  }
  for (auto i = static_cast<std::uint32_t>(p.slots.size()); i < slots; ++i) {
    p.slots.emplace_back();
    p.idle_by_age.insert(lru_key(p.slots.back(), i));
  }
}

void PromptCacheModel::set_host_capacity(ReplicaId phone, std::uint64_t blocks) {
  auto it = phones_.find(phone);
  if (it == phones_.end()) {
    return;
  }
  Phone& p = it->second;
  p.host_capacity = blocks;
  while (!p.host.empty() && p.host_blocks > p.host_capacity) {
    drop_sequence(p.host.front());
  }
}

void PromptCacheModel::remove_phone(ReplicaId phone) {
  clear_phone(phone);
  phones_.erase(phone);
}

void PromptCacheModel::clear_phone(ReplicaId phone) {
  auto it = phones_.find(phone);
  if (it == phones_.end()) {
    return;
  }
  Phone& p = it->second;
  for (Slot& slot : p.slots) {
    if (slot.seq != 0) {
      drop_sequence(slot.seq);
    }
  }
  while (!p.host.empty()) {
    drop_sequence(p.host.front());
  }
}

std::span<const BlockHash> PromptCacheModel::blocks_of(SeqId seq) const {
  if (seq == 0) {
    return {};
  }
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? std::span<const BlockHash>() : std::span(it->second.blocks);
}

void PromptCacheModel::set_slot(Phone& p, std::uint32_t i, const Slot& next) {
  Slot& s = p.slots[i];
  if (!s.busy) {
    p.idle_by_age.erase(lru_key(s, i));
    p.idle_holding.erase(i);
  }
  s = next;
  if (!s.busy) {
    p.idle_by_age.insert(lru_key(s, i));
    if (s.seq != 0) {
      p.idle_holding.insert(i);
    }
  }
}

void PromptCacheModel::set_slot_seq(Phone& p, std::uint32_t i, SeqId seq) {
  Slot next = p.slots[i];
  next.seq = seq;
  set_slot(p, i, next);
}

PromptCacheModel::Choice PromptCacheModel::choose_slot(
    const Phone& p, std::span<const BlockHash> prompt,
    std::optional<std::uint32_t> also_idle) const {
  // A busy slot counted as idle (an idle one is in the indexes already).
  std::optional<std::uint32_t> extra;
  if (also_idle && *also_idle < p.slots.size() && p.slots[*also_idle].busy) {
    extra = also_idle;
  }
  if (p.idle_by_age.empty() && !extra) {
    return choose_any_slot(p, prompt);
  }
  Choice choice;
  // By similarity: the largest share of the new prompt already cached, above the threshold; of
  // equals the lowest index (llama.cpp scans in order and takes a strictly better one).
  if (similarity_ > 0 && !prompt.empty()) {
    double best = 0;
    auto consider = [&](std::uint32_t i) {
      const double sim =
          share(common_prefix_blocks(blocks_of(p.slots[i].seq), prompt), prompt.size());
      if (sim > similarity_ && (sim > best || (sim == best && i < *choice.slot))) {
        best = sim;
        choice.slot = i;
      }
    };
    if (extra && p.slots[*extra].seq != 0) {
      consider(*extra);
    }
    for (std::uint32_t i : p.idle_holding) {
      if (best == 1.0 && i > *choice.slot) {
        break;  // the whole prompt is cached there: nothing later beats it
      }
      consider(i);
    }
    if (choice.slot) {
      auto held = blocks_of(p.slots[*choice.slot].seq);
      choice.save_to_host = share(common_prefix_blocks(held, prompt), held.size()) < kSaveBelowKeep;
      return choice;
    }
  }
  // Least recently used.
  if (!p.idle_by_age.empty()) {
    choice.slot = ~p.idle_by_age.begin()->second;
  }
  if (extra && (!choice.slot || lru_key(p.slots[*extra], *extra) < *p.idle_by_age.begin())) {
    choice.slot = extra;
  }
  choice.save_to_host = true;
  return choice;
}

PromptCacheModel::Choice PromptCacheModel::choose_any_slot(
    const Phone& p, std::span<const BlockHash> prompt) const {
  Choice choice;
  if (similarity_ > 0 && !prompt.empty()) {
    double best = 0;
    for (std::uint32_t i = 0; i < p.slots.size(); ++i) {
      if (p.slots[i].seq == 0) {
        continue;
      }
      const double sim =
          share(common_prefix_blocks(blocks_of(p.slots[i].seq), prompt), prompt.size());
      if (sim > best && sim > similarity_) {
        best = sim;
        choice.slot = i;
      }
    }
    if (choice.slot) {
      auto held = blocks_of(p.slots[*choice.slot].seq);
      choice.save_to_host = share(common_prefix_blocks(held, prompt), held.size()) < kSaveBelowKeep;
      return choice;
    }
  }
  // Least recently used (the last of equals, as llama.cpp's `<=` picks).
  std::uint64_t oldest = 0;
  for (std::uint32_t i = 0; i < p.slots.size(); ++i) {
    if (!choice.slot || p.slots[i].last_used <= oldest) {
      oldest = p.slots[i].last_used;
      choice.slot = i;
    }
  }
  choice.save_to_host = true;
  return choice;
}

PromptCacheModel::SeqId PromptCacheModel::best_host_entry(const Phone& p, SeqId slot_seq,
                                                          std::span<const BlockHash> prompt) const {
  auto held = blocks_of(slot_seq);
  const std::size_t lcp = common_prefix_blocks(held, prompt);
  double best_keep = held.empty() ? -1.0 : share(lcp, held.size());
  double best_sim = share(lcp, prompt.size());
  SeqId best = 0;
  for (SeqId id : p.host) {
    auto entry = blocks_of(id);
    const std::size_t n = common_prefix_blocks(entry, prompt);
    const double keep = share(n, entry.size());
    const double sim = share(n, prompt.size());
    if (keep < kLoadMinKeep) {
      continue;
    }
    if (best_keep < keep && best_sim < sim) {
      best_keep = keep;
      best_sim = sim;
      best = id;
    }
  }
  return best;
}

std::size_t PromptCacheModel::expected_cached_blocks(ReplicaId phone,
                                                     std::span<const BlockHash> prompt,
                                                     std::optional<std::uint32_t> also_idle) const {
  auto it = phones_.find(phone);
  if (it == phones_.end() || prompt.empty()) {
    return 0;
  }
  const Phone& p = it->second;
  Choice choice = choose_slot(p, prompt, also_idle);
  if (!choice.slot) {
    return 0;
  }
  SeqId held = p.slots[*choice.slot].seq;
  if (choice.save_to_host && p.host_capacity > 0) {
    if (SeqId loaded = best_host_entry(p, held, prompt)) {
      held = loaded;
    }
  }
  return common_prefix_blocks(blocks_of(held), prompt);
}

void PromptCacheModel::save_to_host(Phone& p, std::uint32_t slot) {
  const SeqId id = p.slots[slot].seq;
  auto held = blocks_of(id);
  if (id == 0 || held.empty() || held.size() > p.host_capacity) {
    return;  // nothing to save, or larger than the whole cache (llama.cpp skips it)
  }
  for (SeqId entry : p.host) {
    if (common_prefix_blocks(blocks_of(entry), held) == held.size()) {
      return;  // already cached
    }
  }
  // Entries the saved prompt contains are obsolete; then the oldest make room.
  for (auto e = p.host.begin(); e != p.host.end();) {
    SeqId entry = *e++;
    auto blocks = blocks_of(entry);
    if (common_prefix_blocks(blocks, held) == blocks.size()) {
      drop_sequence(entry);
    }
  }
  while (!p.host.empty() && p.host_blocks + held.size() > p.host_capacity) {
    drop_sequence(p.host.front());
  }
  Sequence& s = seqs_.at(id);
  s.slot = kHost;
  set_slot_seq(p, slot, 0);
  p.host.push_back(id);
  p.host_blocks += s.blocks.size();
  touch(id);
}

PromptCacheModel::Placement PromptCacheModel::on_send(ReplicaId phone,
                                                      std::span<const BlockHash> prompt) {
  auto it = phones_.find(phone);
  if (it == phones_.end() || it->second.slots.empty()) {
    return {};
  }
  Phone& p = it->second;
  Choice choice = choose_slot(p, prompt, std::nullopt);
  const std::uint32_t slot = *choice.slot;
  Placement placement{.slot = slot};
  if (choice.save_to_host && p.host_capacity > 0) {
    // As llama.cpp: save the slot's prompt first, then look for a better one to load; the slot's
    // old prompt stays the reference whether it moved to the host cache or not.
    const SeqId base = p.slots[slot].seq;
    save_to_host(p, slot);
    const SeqId loaded = best_host_entry(p, base, prompt);
    if (loaded != 0) {
      if (p.slots[slot].seq != 0) {
        drop_sequence(p.slots[slot].seq);
      }
      Sequence& s = seqs_.at(loaded);
      p.host.remove(loaded);
      p.host_blocks -= s.blocks.size();
      s.slot = static_cast<std::int32_t>(slot);
      set_slot_seq(p, slot, loaded);
    }
  }
  placement.cached_blocks = common_prefix_blocks(blocks_of(p.slots[slot].seq), prompt);
  if (p.slots[slot].seq != 0) {
    drop_sequence(p.slots[slot].seq);
  }
  // `p` stays valid: phones_ is not touched by eviction, only sequences are.
  Slot next = p.slots[slot];
  next.seq = prompt.empty() ? 0 : add_sequence(phone, static_cast<std::int32_t>(slot), prompt);
  next.busy = true;
  set_slot(p, slot, next);
  return placement;
}

void PromptCacheModel::on_finish(ReplicaId phone, std::uint32_t slot) {
  auto it = phones_.find(phone);
  if (it == phones_.end() || slot >= it->second.slots.size()) {
    return;
  }
  Slot next = it->second.slots[slot];
  next.busy = false;
  next.last_used = ++tick_;
  set_slot(it->second, slot, next);
  if (next.seq != 0) {
    touch(next.seq);
  }
}

void PromptCacheModel::on_report(ReplicaId phone, const Placement& placement,
                                 std::size_t reported_blocks) {
  ++stats_.reports;
  stats_.predicted_blocks += placement.cached_blocks;
  stats_.reported_blocks += reported_blocks;
  if (placement.cached_blocks >= 2 && reported_blocks * 2 < placement.cached_blocks) {
    ++stats_.under;
    auto it = phones_.find(phone);
    if (reported_blocks == 0 && it != phones_.end()) {
      // Nothing reused where much was expected: the phone lost its cache. Keep only the prompt
      // it has just read.
      ++stats_.phones_cleared;
      Phone& p = it->second;
      for (std::uint32_t i = 0; i < p.slots.size(); ++i) {
        if (i != placement.slot && p.slots[i].seq != 0) {
          drop_sequence(p.slots[i].seq);
        }
      }
      while (!p.host.empty()) {
        drop_sequence(p.host.front());
      }
    }
  } else if (reported_blocks > placement.cached_blocks + 1) {
    ++stats_.over;
  }
}

PromptCacheModel::SeqId PromptCacheModel::add_sequence(ReplicaId phone, std::int32_t slot,
                                                       std::span<const BlockHash> blocks) {
  const std::uint64_t room = budget_ > kBytesPerSequence ? budget_ - kBytesPerSequence : 0;
  const std::size_t keep = std::min<std::uint64_t>(blocks.size(), room / kBytesPerBlock);
  if (keep == 0) {
    return 0;
  }
  evict_until_fits(cost(keep));
  const SeqId id = next_seq_++;
  Sequence& s = seqs_[id];
  s.phone = phone;
  s.slot = slot;
  s.blocks.assign(blocks.begin(), blocks.begin() + static_cast<std::ptrdiff_t>(keep));
  s.lru = lru_.insert(lru_.end(), id);
  used_ += cost(keep);
  return id;
}

void PromptCacheModel::drop_sequence(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) {
    return;
  }
  Sequence& s = it->second;
  auto pit = phones_.find(s.phone);
  if (pit != phones_.end()) {
    Phone& p = pit->second;
    if (s.slot == kHost) {
      p.host.remove(seq);
      p.host_blocks -= s.blocks.size();
    } else if (static_cast<std::size_t>(s.slot) < p.slots.size() &&
               p.slots[static_cast<std::size_t>(s.slot)].seq == seq) {
      set_slot_seq(p, static_cast<std::uint32_t>(s.slot), 0);
    }
  }
  used_ -= cost(s.blocks.size());
  lru_.erase(s.lru);
  seqs_.erase(it);
}

void PromptCacheModel::evict_until_fits(std::uint64_t incoming) {
  while (!lru_.empty() && used_ + incoming > budget_) {
    drop_sequence(lru_.front());
    ++stats_.evictions;
  }
}

void PromptCacheModel::touch(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it != seqs_.end()) {
    lru_.splice(lru_.end(), lru_, it->second.lru);
  }
}

std::size_t PromptCacheModel::slot_blocks(ReplicaId phone, std::uint32_t slot) const {
  auto it = phones_.find(phone);
  if (it == phones_.end() || slot >= it->second.slots.size()) {
    return 0;
  }
  return blocks_of(it->second.slots[slot].seq).size();
}

PromptCacheModel::PhoneSummary PromptCacheModel::summary(ReplicaId phone) const {
  PhoneSummary out;
  auto it = phones_.find(phone);
  if (it == phones_.end()) {
    return out;
  }
  for (const Slot& slot : it->second.slots) {
    out.slot_blocks += blocks_of(slot.seq).size();
  }
  out.host_entries = it->second.host.size();
  out.host_blocks = it->second.host_blocks;
  out.host_capacity_blocks = it->second.host_capacity;
  return out;
}

std::size_t PromptCacheModel::host_entries(ReplicaId phone) const {
  auto it = phones_.find(phone);
  return it == phones_.end() ? 0 : it->second.host.size();
}

bool PromptCacheModel::slot_busy(ReplicaId phone, std::uint32_t slot) const {
  auto it = phones_.find(phone);
  return it != phones_.end() && slot < it->second.slots.size() && it->second.slots[slot].busy;
}

}  // namespace fg::scheduling
