#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include "replica-agent/core/context.hpp"
#include "replica-agent/core/http_client.hpp"

namespace fg::agent {

// Registers this phone with the gateway (POST {gateway}/admin/v1/replicas/register), keeps the
// per-replica secret the answer carries (in memory only; never logged) and sends it in the
// Fleetgate-Replica-Secret header on heartbeats, re-registrations and the deregistration.
// Heartbeats go at the interval the gateway returns; it registers again when a heartbeat gets
// 404 (the gateway restarted and forgot it) or 403 (its registration was taken over), or the
// phone's slot count changed, and backs off with jitter (1 s doubling to 30 s) while the gateway
// is unreachable or refuses (409: the URL is still held by this agent's previous run, until that
// registration misses its heartbeats). Serving never depends on it. On shutdown it deregisters
// (POST .../{id}/deregister). Protocol: docs/lifecycle.md.
class Registrar {
 public:
  Registrar(boost::asio::any_io_executor executor, AgentContext* ctx, std::string token);
  ~Registrar();

  void start();
  // Stops the loop, deregisters when registered (5 s at most) and then calls done.
  void stop_and_deregister(std::function<void()> done);
  // The secret of the current registration ("" when not registered): the key for answering the
  // gateway's URL challenge (issue 12).
  const std::string& secret() const { return secret_; }

 private:
  static boost::asio::awaitable<void> loop(Registrar* self);
  static boost::asio::awaitable<void> deregister(Registrar* self, std::function<void()> done);
  // POST .../{id}/deregister once (a failure is logged), then forgets the registration.
  static boost::asio::awaitable<void> deregister_once(Registrar* self);
  // One registration attempt; true when the gateway gave an id.
  static boost::asio::awaitable<bool> register_once(Registrar* self);
  std::string registration_body() const;
  // The Fleetgate-Replica-Secret header when registered.
  HttpHeaders identity() const;
  void forget_registration();

  boost::asio::any_io_executor executor_;
  AgentContext* ctx_;
  std::string token_;
  net::Url gateway_;
  std::string id_;      // "" = not registered
  std::string secret_;  // the registration's secret ("" with a gateway that sends none)
  std::uint32_t registered_slots_ = 0;
  // The URL of the last successful registration. A tunnel re-opened with another URL ends that
  // registration and registers the new URL, which the gateway challenges before routing to it.
  std::string registered_url_;
  std::chrono::milliseconds interval_{10'000};
  std::uint32_t failures_ = 0;
  std::mt19937_64 rng_;
  boost::asio::cancellation_signal stop_;
  bool running_ = false;
};

}  // namespace fg::agent
