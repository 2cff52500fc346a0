#include "common/net/dns_cache.hpp"

namespace fg::net {

void DnsCache::set_ttl(Clock::duration ttl) {
  ttl_ = ttl;
  if (ttl_ <= Clock::duration::zero()) {
    entries_.clear();
  }
}

DnsCache::Begin DnsCache::begin(const std::string& key, Clock::time_point now) {
  if (auto it = entries_.find(key); it != entries_.end()) {
    if (now < it->second.expires) {
      return {Step::cached, it->second.addresses};
    }
    entries_.erase(it);
  }
  if (running_.count(key) != 0) {
    return {Step::wait, {}};
  }
  running_.insert(key);
  return {Step::lookup, {}};
}

void DnsCache::finish(const std::string& key, const LookupResult& result, Clock::time_point now) {
  running_.erase(key);
  if (!result.ok() || ttl_ <= Clock::duration::zero() || max_entries_ == 0) {
    return;
  }
  if (entries_.find(key) == entries_.end()) {
    make_room(now);
  }
  entries_[key] = Entry{result.addresses, now + ttl_};
}

void DnsCache::make_room(Clock::time_point now) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    it = now >= it->second.expires ? entries_.erase(it) : std::next(it);
  }
  while (entries_.size() >= max_entries_) {
    auto soonest = entries_.begin();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->second.expires < soonest->second.expires) {
        soonest = it;
      }
    }
    entries_.erase(soonest);
  }
}

}  // namespace fg::net
