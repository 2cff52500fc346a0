#include "common/net/connection_limits.hpp"

namespace fg::net {

Admission ConnectionLimiter::admit(const std::string& address) {
  if (open_ >= caps_.total) {
    return Admission::over_total;
  }
  auto& from = by_address_[address];
  if (caps_.per_address != 0 && from >= caps_.per_address) {
    if (from == 0) {
      by_address_.erase(address);
    }
    return Admission::over_per_address;
  }
  ++from;
  ++open_;
  return Admission::admitted;
}

void ConnectionLimiter::release(const std::string& address) {
  auto it = by_address_.find(address);
  if (it == by_address_.end()) {
    return;
  }
  if (--it->second == 0) {
    by_address_.erase(it);
  }
  --open_;
}

std::uint32_t ConnectionLimiter::open_from(const std::string& address) const {
  auto it = by_address_.find(address);
  return it == by_address_.end() ? 0 : it->second;
}

const char* to_string(Admission admission) {
  switch (admission) {
    case Admission::admitted:
      return "admitted";
    case Admission::over_total:
      return "max_connections";
    case Admission::over_per_address:
      return "max_connections_per_ip";
  }
  return "admitted";
}

bool LogThrottle::allow(Clock::time_point now, std::uint64_t* held_back) {
  if (last_ && now - *last_ < interval_) {
    ++held_back_;
    return false;
  }
  last_ = now;
  *held_back = held_back_;
  held_back_ = 0;
  return true;
}

std::optional<std::string> check_descriptor_budget(const DescriptorBudget& budget,
                                                   std::uint64_t limit, const char* cap_key) {
  if (budget.needed() <= limit) {
    return std::nullopt;
  }
  const std::uint64_t others = budget.admin_connections + budget.reserve;
  std::string fits = others < limit ? "at most " + std::to_string(limit - others)
                                    : "a value that fits (none does at this limit)";
  return std::string(cap_key) + ": " + std::to_string(budget.public_connections) +
         " client connections, " + std::to_string(budget.admin_connections) +
         " admin connections and " + std::to_string(budget.reserve) +
         " descriptors kept for phones, probes and files need " + std::to_string(budget.needed()) +
         " file descriptors, but the process may open only " + std::to_string(limit) +
         " (RLIMIT_NOFILE); set " + cap_key + " to " + fits +
         ", or raise the limit (ulimit -n, systemd LimitNOFILE=)";
}

}  // namespace fg::net
