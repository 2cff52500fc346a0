#include "common/net/tls_sessions.hpp"

#include <openssl/crypto.h>

#include <algorithm>
#include <utility>

namespace fg::net {

namespace {

// What a connection carries for its sessions: the server they are kept for, and whether it was
// offered one (forget drops the server's others then).
struct Mark {
  std::string server;
  bool offered = false;
};

void free_mark(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
  delete static_cast<Mark*>(ptr);
}

void free_sessions(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
  delete static_cast<TlsSessions*>(ptr);
}

// OpenSSL's ex_data slots: on each connection its Mark, on a context its TlsSessions (both freed
// with their owner).
int mark_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, free_mark);
  return index;
}
int sessions_index() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, free_sessions);
  return index;
}

bool expired(SSL_SESSION* session, std::time_t now) {
  return SSL_SESSION_is_resumable(session) == 0 ||
         now - SSL_SESSION_get_time(session) >= SSL_SESSION_get_timeout(session);
}

}  // namespace

TlsSessions::~TlsSessions() {
  for (auto& [server, kept] : sessions_) {
    for (SSL_SESSION* session : kept) {
      SSL_SESSION_free(session);
    }
  }
}

TlsSessions* TlsSessions::enable(SSL_CTX* ctx) {
  if (TlsSessions* existing = of(ctx)) {
    return existing;
  }
  auto* sessions = new TlsSessions();
  if (SSL_CTX_set_ex_data(ctx, sessions_index(), sessions) != 1) {
    delete sessions;
    return nullptr;
  }
  // The client side of OpenSSL's cache: new sessions go to the callback, none to its own store
  // (a client's would never be looked up).
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(ctx, &TlsSessions::on_new_session);
  return sessions;
}

TlsSessions* TlsSessions::of(SSL_CTX* ctx) {
  return static_cast<TlsSessions*>(SSL_CTX_get_ex_data(ctx, sessions_index()));
}

bool TlsSessions::offer(SSL* ssl, const std::string& server) {
  auto* mark = new Mark{server, false};
  if (SSL_set_ex_data(ssl, mark_index(), mark) != 1) {
    delete mark;
    return false;
  }
  SSL_SESSION* session = nullptr;
  {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(server);
    if (it == sessions_.end()) {
      return false;
    }
    const std::time_t now = std::time(nullptr);
    std::vector<SSL_SESSION*>& kept = it->second;
    while (!kept.empty() && session == nullptr) {
      SSL_SESSION* newest = kept.back();
      kept.pop_back();
      if (expired(newest, now)) {
        SSL_SESSION_free(newest);
      } else {
        session = newest;
      }
    }
    if (kept.empty()) {
      sessions_.erase(it);
    }
  }
  if (session == nullptr) {
    return false;
  }
  const bool set = SSL_set_session(ssl, session) == 1;  // ssl takes a reference of its own
  SSL_SESSION_free(session);
  mark->offered = set;
  return set;
}

void TlsSessions::forget(SSL* ssl) {
  const auto* mark = static_cast<const Mark*>(SSL_get_ex_data(ssl, mark_index()));
  if (mark == nullptr || !mark->offered) {
    return;
  }
  std::lock_guard lock(mu_);
  drop(mark->server);
}

void TlsSessions::forget_server(const std::string& server) {
  std::lock_guard lock(mu_);
  drop(server);
}

void TlsSessions::drop(const std::string& server) {
  auto it = sessions_.find(server);
  if (it == sessions_.end()) {
    return;
  }
  for (SSL_SESSION* session : it->second) {
    SSL_SESSION_free(session);
  }
  sessions_.erase(it);
}

std::size_t TlsSessions::size() const {
  std::lock_guard lock(mu_);
  return sessions_.size();
}

std::size_t TlsSessions::kept(const std::string& server) const {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(server);
  return it == sessions_.end() ? 0 : it->second.size();
}

int TlsSessions::on_new_session(SSL* ssl, SSL_SESSION* session) {
  TlsSessions* sessions = of(SSL_get_SSL_CTX(ssl));
  // 1: the reference OpenSSL passed is ours now; 0: OpenSSL keeps it.
  return sessions != nullptr && sessions->keep(ssl, session) ? 1 : 0;
}

bool TlsSessions::keep(SSL* ssl, SSL_SESSION* session) {
  const auto* mark = static_cast<const Mark*>(SSL_get_ex_data(ssl, mark_index()));
  if (mark == nullptr) {
    return false;  // a connection that did not ask (no server to keep it for)
  }
  std::lock_guard lock(mu_);
  auto it = sessions_.find(mark->server);
  if (it == sessions_.end()) {
    if (sessions_.size() >= next_sweep_ || sessions_.size() >= kMaxServers) {
      sweep(std::time(nullptr));
    }
    if (sessions_.size() >= kMaxServers) {
      return false;
    }
    it = sessions_.emplace(mark->server, std::vector<SSL_SESSION*>{}).first;
  }
  std::vector<SSL_SESSION*>& kept = it->second;
  if (kept.size() >= kPerServer) {
    SSL_SESSION_free(kept.front());
    kept.erase(kept.begin());
  }
  kept.push_back(session);
  return true;
}

void TlsSessions::sweep(std::time_t now) {
  std::vector<std::string> gone;
  for (auto& [server, kept] : sessions_) {
    auto stale = std::remove_if(kept.begin(), kept.end(), [now](SSL_SESSION* session) {
      if (!expired(session, now)) {
        return false;
      }
      SSL_SESSION_free(session);
      return true;
    });
    kept.erase(stale, kept.end());
    if (kept.empty()) {
      gone.push_back(server);
    }
  }
  for (const std::string& server : gone) {
    sessions_.erase(sessions_.find(server));
  }
  // The next sweep when the map has doubled (or reached the cap): the sweeps' cost stays linear
  // in the sessions kept.
  next_sweep_ = std::max<std::size_t>(1024, sessions_.size() * 2);
}

}  // namespace fg::net
