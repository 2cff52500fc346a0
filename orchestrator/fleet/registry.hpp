#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/net/conn.hpp"
#include "common/net/url.hpp"
#include "orchestrator/scheduling/scheduler.hpp"

namespace fg::fleet {

using scheduling::ReplicaId;

// An idle keep-alive connection to a replica, kept for reuse.
struct IdleConn {
  std::unique_ptr<net::Conn> conn;
  std::chrono::steady_clock::time_point since;
};

// One phone. Slot accounting is not here: the scheduler owns in-flight counts.
struct Replica {
  ReplicaId id = 0;
  std::string name;  // "r<id>": what logs and metrics show (never the URL's secrets)
  std::string model;
  net::Url url;
  std::uint32_t slots = 1;
  std::deque<IdleConn> idle;
  std::uint64_t requests = 0;
  std::uint64_t failures = 0;
};

class Registry {
 public:
  Replica& add(const std::string& model, const net::Url& url, std::uint32_t slots);
  Replica* find(ReplicaId id);
  void remove(ReplicaId id);
  std::vector<Replica*> all();

  // Takes a pooled connection younger than max_idle, or nullptr.
  std::unique_ptr<net::Conn> take_idle(Replica& replica,
                                       std::chrono::steady_clock::duration max_idle,
                                       std::chrono::steady_clock::time_point now);
  // Returns a connection for reuse; the oldest is dropped beyond max_per_replica.
  void give_back(Replica& replica, std::unique_ptr<net::Conn> conn, std::size_t max_per_replica,
                 std::chrono::steady_clock::time_point now);

 private:
  ReplicaId next_id_ = 1;
  std::map<ReplicaId, std::unique_ptr<Replica>> replicas_;
};

}  // namespace fg::fleet
