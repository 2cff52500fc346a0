#pragma once

// The request bodies a listener holds at once, in total: each body is counted from the moment
// its head is accepted (at its declared length; a chunked body at the body limit) until its
// request is finished, so that memory held for bodies (being read, waiting in the queue, being
// sent to a phone) is bounded whatever the number of connections. The last quarter of the budget
// is kept for small bodies (kSmallBody at most), so a flood of large bodies never shuts out
// ordinary requests. Pure: no sockets; one io thread uses it.

#include <cstdint>
#include <optional>

namespace fg::net {

class BodyBudget {
 public:
  // Bodies up to this size may use the whole budget; larger ones only three quarters of it.
  static constexpr std::uint64_t kSmallBody = 64 * 1024;

  // Holds bytes of a budget until destroyed (or moved from).
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept : budget_(other.budget_), bytes_(other.bytes_) {
      other.budget_ = nullptr;
      other.bytes_ = 0;
    }
    Reservation& operator=(Reservation&& other) noexcept {
      if (this != &other) {
        release();
        budget_ = other.budget_;
        bytes_ = other.bytes_;
        other.budget_ = nullptr;
        other.bytes_ = 0;
      }
      return *this;
    }
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    ~Reservation() { release(); }

    std::uint64_t bytes() const { return bytes_; }

   private:
    friend class BodyBudget;
    Reservation(BodyBudget* budget, std::uint64_t bytes) : budget_(budget), bytes_(bytes) {}
    void release();

    BodyBudget* budget_ = nullptr;
    std::uint64_t bytes_ = 0;
  };

  // A reservation of bytes when they fit within limit (the current setting, so a reload applies
  // to the next body); nullopt when they do not. Zero bytes always fit.
  std::optional<Reservation> try_reserve(std::uint64_t bytes, std::uint64_t limit);

  std::uint64_t used() const { return used_; }

 private:
  std::uint64_t used_ = 0;
};

}  // namespace fg::net
