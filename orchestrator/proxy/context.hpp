#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/ssl/context.hpp>

#include "common/net/body_budget.hpp"
#include "common/net/session_tracker.hpp"
#include "common/util/text.hpp"
#include "orchestrator/config/config.hpp"
#include "orchestrator/fleet/registry.hpp"
#include "orchestrator/proxy/slot_broker.hpp"

namespace fg::net {
class OffThread;
class WatchStarter;
}  // namespace fg::net
namespace fg::metrics {
class Metrics;
}
namespace fg::fleet {
class FleetManager;
}
namespace fg::batch {
class BatchService;
}

namespace fg::proxy {

// What the gateway knows about one accepted client key (never the key itself).
struct ApiKeyInfo {
  std::string name;                      // the tenant of its requests: fair shares, batch ownership
  std::optional<std::int32_t> priority;  // configured band; absent: routing.default_priority
};

// Everything a client session needs from the gateway. Owned by the gateway, outlives sessions.
// A request takes a snapshot of the configuration when it starts (configs->snapshot()) and keeps
// it to its end.
struct ProxyContext {
  const config::ConfigSource* configs = nullptr;
  SlotBroker* broker = nullptr;
  fleet::Registry* registry = nullptr;
  BearerKeys api_keys;  // empty: the public listener is open
  // One per key of api_keys, in its order: server.api_keys by name, then the keys of
  // server.api_keys_env (named "api_keys_env#1", ...).
  std::vector<ApiKeyInfo> key_info;
  // Keys the prompt block hashes (openai::PromptHasher): random per process.
  std::uint64_t prompt_key = 0;
  boost::asio::ssl::context* upstream_tls = nullptr;
  std::string upstream_authorization;  // "Bearer <key>" or empty
  net::SessionTracker* sessions = nullptr;
  metrics::Metrics* metrics = nullptr;
  fleet::FleetManager* fleet = nullptr;
  net::BodyBudget* body_budget = nullptr;  // the public listener's (server.max_buffered_bytes)
  batch::BatchService* batch = nullptr;    // the Files and Batches API; nullptr: batch.enabled off
  // Runs CPU work that would hold the io thread for milliseconds (inspecting a large request
  // body) on other threads; nullptr: such work runs on the io thread.
  net::OffThread* off_thread = nullptr;
  // Starts each request's client watch late (net::WatchStarter); nullptr: at once.
  net::WatchStarter* watch_starter = nullptr;
};

}  // namespace fg::proxy
