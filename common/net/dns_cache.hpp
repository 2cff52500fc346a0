#pragma once

// The lookup policy of the resolver: a cache of resolved addresses per host:port for a TTL, and
// one lookup at a time per host:port (later askers wait for the running one instead of starting
// their own). Pure: time is passed in; no sockets, no threads.

#include <chrono>
#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace fg::net {

// What a lookup found: numeric addresses ("192.0.2.1", "2001:db8::1"), or why none.
struct LookupResult {
  std::vector<std::string> addresses;
  enum class Error { none, not_found, try_again, failed } error = Error::none;
  std::string message;  // gai_strerror's text for a failure
  bool ok() const { return error == Error::none && !addresses.empty(); }
};

class DnsCache {
 public:
  using Clock = std::chrono::steady_clock;

  explicit DnsCache(Clock::duration ttl = std::chrono::seconds(30), std::size_t max_entries = 4096)
      : ttl_(ttl), max_entries_(max_entries) {}

  // 0 turns the cache off (every connection resolves; concurrent askers still share a lookup).
  void set_ttl(Clock::duration ttl);
  Clock::duration ttl() const { return ttl_; }

  enum class Step {
    cached,  // addresses holds fresh addresses
    wait,    // a lookup for this key runs already: wait for its finish()
    lookup,  // the caller must start the lookup and call finish() with its result
  };
  struct Begin {
    Step step = Step::lookup;
    std::vector<std::string> addresses;
  };
  Begin begin(const std::string& key, Clock::time_point now);
  // Ends the running lookup of key. Successes are kept for the TTL; failures are not cached
  // (the next connection asks again), so a fixed DNS record is seen at once.
  void finish(const std::string& key, const LookupResult& result, Clock::time_point now);

  std::size_t size() const { return entries_.size(); }
  bool in_flight(const std::string& key) const { return running_.count(key) != 0; }

 private:
  struct Entry {
    std::vector<std::string> addresses;
    Clock::time_point expires;
  };
  // Drops expired entries, then the soonest to expire, until there is room for one more.
  void make_room(Clock::time_point now);

  Clock::duration ttl_;
  std::size_t max_entries_;
  std::map<std::string, Entry, std::less<>> entries_;
  std::set<std::string, std::less<>> running_;
};

}  // namespace fg::net
