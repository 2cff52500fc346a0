#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <mutex>
#include <string>
#include <vector>

#include <openssl/ssl.h>

#include <boost/unordered/unordered_flat_map.hpp>

namespace fg::net {

// TLS session resumption for a client context: the sessions (TLS 1.3 tickets) each server (a
// replica's URL) gave us, each offered on one later connection to it. A resumed handshake skips
// the server's certificate and its signature (CPU a phone pays on every new connection, and the
// gateway's verification), and the connection shares the first one's parsed certificate instead
// of parsing its own (docs/benchmarks.md). A server that does not know the ticket (restarted,
// keys rotated) answers with a full handshake; nothing fails.
//
// Each ticket is offered once, as TLS 1.3 asks of clients, and as OpenSSL's client enforces: a
// session it resumed with is not offered again (measured: a second connection offered it made a
// full handshake). A full handshake brings two tickets (the OpenSSL default) and a resumed one
// brings one from OpenSSL's servers (the agent's), so a replica's connections
// opened one after another keep resuming; Node's server sends none after a resumed handshake, so
// there every third connection is a full one. Connections opened faster than tickets arrive make
// full handshakes. Sessions are kept per server URL, never shared between URLs.
class TlsSessions {
 public:
  // Upper bound on servers remembered: beyond it new sessions are not kept (their connections
  // still work, the next handshake to them is full). A kept session is about 1 KiB beside the
  // certificate its server's sessions and live connections share; a replica without any live
  // connection costs ~5 KiB more.
  static constexpr std::size_t kMaxServers = 16384;
  // Tickets kept per server, the newest; an older one is dropped when a new one comes.
  static constexpr std::size_t kPerServer = 4;

  TlsSessions() = default;
  ~TlsSessions();
  TlsSessions(const TlsSessions&) = delete;
  TlsSessions& operator=(const TlsSessions&) = delete;

  // Turns resumption on for ctx (client side): the sessions OpenSSL receives on its connections
  // are kept here, and the context owns this object (freed with it). Returns the object.
  static TlsSessions* enable(SSL_CTX* ctx);
  // The sessions of ctx's connections, or null when enable was not called for it.
  static TlsSessions* of(SSL_CTX* ctx);

  // Before the handshake: offers ssl the newest session kept for server (if any), which is then
  // no longer kept, and marks ssl so that the sessions it receives are kept for server. True when
  // one was offered.
  bool offer(SSL* ssl, const std::string& server);
  // After a failed handshake that offered a session: drops the server's other sessions too (they
  // came from the same server), so that the next connection makes a full handshake.
  void forget(SSL* ssl);
  // Drops the sessions kept for server (a replica that left the fleet).
  void forget_server(const std::string& server);
  // After a successful client handshake that asked (offer): counts it, full or resumed.
  void count_handshake(bool resumed) {
    (resumed ? resumed_ : full_).fetch_add(1, std::memory_order_relaxed);
  }

  // For the metrics: servers with a session kept, and the handshakes counted so far.
  std::size_t size() const;
  // Sessions kept for server (tests).
  std::size_t kept(const std::string& server) const;
  std::uint64_t full_handshakes() const { return full_.load(std::memory_order_relaxed); }
  std::uint64_t resumed_handshakes() const { return resumed_.load(std::memory_order_relaxed); }

 private:
  static int on_new_session(SSL* ssl, SSL_SESSION* session);
  bool keep(SSL* ssl, SSL_SESSION* session);
  // Drops expired sessions; called with mu_ held.
  void sweep(std::time_t now);
  // Frees every session of the entry and erases it; called with mu_ held.
  void drop(const std::string& server);

  mutable std::mutex mu_;  // OpenSSL's callback may run on any thread that reads a connection
  // Per server, its sessions oldest first (at most kPerServer; never empty).
  boost::unordered_flat_map<std::string, std::vector<SSL_SESSION*>> sessions_;
  std::size_t next_sweep_ = 1024;
  std::atomic<std::uint64_t> full_{0};
  std::atomic<std::uint64_t> resumed_{0};
};

}  // namespace fg::net
