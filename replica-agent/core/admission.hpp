#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "replica-agent/engines/sim_model.hpp"

namespace fg::agent {

class Admission;

// One taken slot. Released exactly once: when the guard is destroyed (request done, failed, or
// its client gone), never by hand.
class SlotGuard {
 public:
  SlotGuard(SlotGuard&& other) noexcept
      : admission_(std::exchange(other.admission_, nullptr)), slot_(other.slot_) {}
  SlotGuard& operator=(SlotGuard&&) = delete;
  SlotGuard(const SlotGuard&) = delete;
  ~SlotGuard();

  std::size_t slot() const { return slot_; }

 private:
  friend class Admission;
  SlotGuard(Admission* admission, std::size_t slot) : admission_(admission), slot_(slot) {}
  Admission* admission_;
  std::size_t slot_;
};

// The phone's slots: which are busy and what each one's prompt cache holds. A request either gets
// a slot at once or is refused (the caller answers 503): the agent never queues, so a phone
// shared by several gateways is never overloaded. Pure: no I/O, no clock.
class Admission {
 public:
  explicit Admission(std::size_t slots) : cache_(slots), busy_(slots, false) {}

  std::size_t total() const { return busy_.size(); }
  std::size_t busy() const { return busy_count_; }
  std::size_t idle() const { return total() - busy_count_; }

  // The idle slot whose cache shares the longest prefix with prompt (llama.cpp's slot choice), or
  // nullopt when every slot is busy.
  std::optional<SlotGuard> try_acquire(std::string_view prompt) {
    auto slot = cache_.pick_slot(prompt, busy_);
    if (!slot) {
      return std::nullopt;
    }
    busy_[*slot] = true;
    ++busy_count_;
    return SlotGuard(this, *slot);
  }

  // Changes the number of slots (a proxied engine's, once known). Only while none is taken:
  // returns false and changes nothing otherwise.
  bool resize(std::size_t slots) {
    if (busy_count_ != 0 || slots == 0) {
      return false;
    }
    cache_ = sim::SlotCache(slots);
    busy_.assign(slots, false);
    return true;
  }

  std::size_t cached_tokens(const SlotGuard& guard, std::string_view prompt) const {
    return cache_.cached_prefix_tokens(guard.slot(), prompt);
  }
  // What the slot's cache holds after the request evaluated text.
  void remember(const SlotGuard& guard, std::string text) {
    cache_.store(guard.slot(), std::move(text));
  }

 private:
  friend class SlotGuard;
  void release(std::size_t slot) {
    if (slot < busy_.size() && busy_[slot]) {
      busy_[slot] = false;
      --busy_count_;
    }
  }

  sim::SlotCache cache_;
  std::vector<bool> busy_;
  std::size_t busy_count_ = 0;
};

inline SlotGuard::~SlotGuard() {
  if (admission_ != nullptr) {
    admission_->release(slot_);
  }
}

}  // namespace fg::agent
