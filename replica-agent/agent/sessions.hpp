#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>

#include "common/net/conn.hpp"

namespace fg::agent {

// Open connections and whether each is serving a request, so that a drain can close the idle
// ones at once and learn when the last busy one is done.
class SessionTracker {
 public:
  std::uint64_t add(net::Conn* conn) {
    auto id = next_id_++;
    sessions_.emplace(id, Entry{conn, false});
    return id;
  }

  void remove(std::uint64_t id) {
    auto it = sessions_.find(id);
    if (it == sessions_.end()) {
      return;
    }
    if (it->second.busy) {
      --busy_;
    }
    sessions_.erase(it);
    check_drained();
  }

  void set_busy(std::uint64_t id, bool busy) {
    auto it = sessions_.find(id);
    if (it == sessions_.end() || it->second.busy == busy) {
      return;
    }
    it->second.busy = busy;
    busy ? ++busy_ : --busy_;
    if (!busy && draining_) {
      it->second.conn->close();
      check_drained();
    }
  }

  bool draining() const { return draining_; }
  std::size_t size() const { return sessions_.size(); }
  std::size_t busy() const { return busy_; }

  // Closes idle connections; on_drained runs (once) when no request is left in flight.
  void begin_drain(std::function<void()> on_drained) {
    draining_ = true;
    on_drained_ = std::move(on_drained);
    for (auto& [id, entry] : sessions_) {
      if (!entry.busy) {
        entry.conn->close();
      }
    }
    check_drained();
  }

  void forget_drain_callback() { on_drained_ = nullptr; }

  void close_all() {
    for (auto& [id, entry] : sessions_) {
      entry.conn->close();
    }
  }

 private:
  struct Entry {
    net::Conn* conn;
    bool busy;
  };

  void check_drained() {
    if (draining_ && busy_ == 0 && on_drained_) {
      auto callback = std::move(on_drained_);
      on_drained_ = nullptr;
      callback();
    }
  }

  std::map<std::uint64_t, Entry> sessions_;
  std::uint64_t next_id_ = 1;
  std::size_t busy_ = 0;
  bool draining_ = false;
  std::function<void()> on_drained_;
};

}  // namespace fg::agent
