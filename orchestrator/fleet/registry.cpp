#include "orchestrator/fleet/registry.hpp"

#include <cstdio>

namespace fg::fleet {

std::shared_ptr<Replica> Registry::add(const std::string& model, const net::Url& url,
                                       std::uint32_t slots) {
  auto replica = std::make_shared<Replica>();
  replica->id = next_id_++;
  // snprintf rather than "r" + to_string(): GCC 12 warns falsely (-Wstringop-overflow) on that.
  char name[24];
  std::snprintf(name, sizeof name, "r%llu", static_cast<unsigned long long>(replica->id));
  replica->name = name;
  replica->model = model;
  replica->url = url;
  replica->slots = slots;
  replicas_.emplace(replica->id, replica);
  return replica;
}

std::shared_ptr<Replica> Registry::find(ReplicaId id) const {
  auto it = replicas_.find(id);
  return it == replicas_.end() ? nullptr : it->second;
}

void Registry::remove(ReplicaId id) {
  auto it = replicas_.find(id);
  if (it == replicas_.end()) {
    return;
  }
  it->second->removed = true;
  it->second->idle.clear();
  if (it->second->stop_probe) {
    it->second->stop_probe();
  }
  if (it->second->stop_challenge) {
    it->second->stop_challenge();
  }
  replicas_.erase(it);
}

std::vector<std::shared_ptr<Replica>> Registry::all() const {
  std::vector<std::shared_ptr<Replica>> out;
  out.reserve(replicas_.size());
  for (const auto& [id, replica] : replicas_) {
    out.push_back(replica);
  }
  return out;
}

std::unique_ptr<net::Conn> Registry::take_idle(Replica& replica, Clock::duration max_idle,
                                               Clock::time_point now) {
  // Newest first: the most recently used connection is the least likely to have been closed.
  while (!replica.idle.empty()) {
    IdleConn idle = std::move(replica.idle.back());
    replica.idle.pop_back();
    // Unread bytes (a second answer, garbage) or the replica's close: never reused.
    if (now - idle.since <= max_idle && idle.conn->is_open() && !idle.conn->input_pending()) {
      return std::move(idle.conn);
    }
  }
  return nullptr;
}

void Registry::give_back(Replica& replica, std::unique_ptr<net::Conn> conn,
                         std::size_t max_per_replica, Clock::time_point now) {
  if (max_per_replica == 0 || replica.removed) {
    return;
  }
  replica.idle.push_back(IdleConn{std::move(conn), now});
  while (replica.idle.size() > max_per_replica) {
    replica.idle.pop_front();
  }
}

}  // namespace fg::fleet
