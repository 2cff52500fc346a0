#include "common/net/body_budget.hpp"

namespace fg::net {

void BodyBudget::Reservation::release() {
  if (budget_ != nullptr) {
    budget_->used_ -= bytes_;
    budget_ = nullptr;
    bytes_ = 0;
  }
}

std::optional<BodyBudget::Reservation> BodyBudget::try_reserve(std::uint64_t bytes,
                                                               std::uint64_t limit) {
  if (bytes == 0) {
    return Reservation{};
  }
  const std::uint64_t cap = bytes <= kSmallBody ? limit : limit - limit / 4;
  if (used_ > cap || bytes > cap - used_) {
    return std::nullopt;
  }
  used_ += bytes;
  return Reservation{this, bytes};
}

}  // namespace fg::net
