#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/ssl/context.hpp>

#include "common/net/conn.hpp"
#include "orchestrator/config/config.hpp"
#include "orchestrator/fleet/registry.hpp"
#include "orchestrator/proxy/slot_broker.hpp"

namespace fg::metrics {
class Metrics;
}
namespace fg::fleet {
class FleetManager;
}

namespace fg::proxy {

// Open client connections, so that shutdown can close the idle ones at once and wait for the busy
// ones to finish their current request.
class SessionTracker {
 public:
  std::uint64_t add(net::Conn* conn);
  void remove(std::uint64_t id);
  void set_busy(std::uint64_t id, bool busy);
  // Stops keep-alive reuse and closes every idle connection.
  void begin_drain();
  bool draining() const { return draining_; }
  std::size_t size() const { return sessions_.size(); }
  void close_all();
  // Called (once per drain) when the last session ends while draining.
  std::function<void()> on_drained;

 private:
  struct Entry {
    net::Conn* conn = nullptr;
    bool busy = false;
  };
  std::unordered_map<std::uint64_t, Entry> sessions_;
  std::uint64_t next_id_ = 1;
  bool draining_ = false;
};

// Everything a client session needs from the gateway. Owned by the gateway, outlives sessions.
// A request takes a snapshot of the configuration when it starts (configs->snapshot()) and keeps
// it to its end.
struct ProxyContext {
  const config::ConfigSource* configs = nullptr;
  SlotBroker* broker = nullptr;
  fleet::Registry* registry = nullptr;
  std::vector<std::string> api_keys;  // empty: the public listener is open
  boost::asio::ssl::context* upstream_tls = nullptr;
  std::string upstream_authorization;  // "Bearer <key>" or empty
  SessionTracker* sessions = nullptr;
  metrics::Metrics* metrics = nullptr;
  fleet::FleetManager* fleet = nullptr;
};

}  // namespace fg::proxy
