#include "common/net/session_tracker.hpp"

#include <utility>

namespace fg::net {

std::uint64_t SessionTracker::add(Closable* session) {
  const auto id = next_id_++;
  sessions_.emplace(id, Entry{session, false});
  return id;
}

void SessionTracker::remove(std::uint64_t id) {
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

void SessionTracker::set_busy(std::uint64_t id, bool busy) {
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second.busy == busy) {
    return;
  }
  it->second.busy = busy;
  if (busy) {
    ++busy_;
    return;
  }
  --busy_;
  if (draining_) {
    it->second.session->close();
    check_drained();
  }
}

void SessionTracker::begin_drain(std::function<void()> on_drained) {
  draining_ = true;
  on_drained_ = std::move(on_drained);
  for (auto& [id, entry] : sessions_) {
    if (!entry.busy) {
      entry.session->close();
    }
  }
  check_drained();
}

void SessionTracker::close_all() {
  for (auto& [id, entry] : sessions_) {
    entry.session->close();
  }
}

void SessionTracker::check_drained() {
  if (draining_ && busy_ == 0 && on_drained_) {
    auto callback = std::move(on_drained_);
    on_drained_ = nullptr;
    callback();
  }
}

}  // namespace fg::net
