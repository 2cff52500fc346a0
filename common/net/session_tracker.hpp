#pragma once

// Open server sessions and whether each is serving a request, so that a drain (SIGTERM) can close
// the idle ones at once and learn when the last busy one is done. Pure: sessions are anything
// that can be closed.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>

namespace fg::net {

class Closable {
 public:
  virtual ~Closable() = default;
  // Closes at once; pending operations complete with an error.
  virtual void close() = 0;
};

class SessionTracker {
 public:
  std::uint64_t add(Closable* session);
  void remove(std::uint64_t id);
  // A session is busy from the moment its request is read to the end of its response. One that
  // becomes idle while draining is closed.
  void set_busy(std::uint64_t id, bool busy);

  // Stops keep-alive reuse and closes every idle session; on_drained runs once, when no session
  // is busy any more (at once if none is).
  void begin_drain(std::function<void()> on_drained);
  // Drops the drain callback (its owner is going away).
  void forget_drain_callback() { on_drained_ = nullptr; }
  bool draining() const { return draining_; }
  std::size_t size() const { return sessions_.size(); }
  std::size_t busy() const { return busy_; }
  void close_all();

 private:
  struct Entry {
    Closable* session = nullptr;
    bool busy = false;
  };
  void check_drained();

  std::map<std::uint64_t, Entry> sessions_;
  std::uint64_t next_id_ = 1;
  std::size_t busy_ = 0;
  bool draining_ = false;
  std::function<void()> on_drained_;
};

}  // namespace fg::net
