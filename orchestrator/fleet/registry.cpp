#include "orchestrator/fleet/registry.hpp"

namespace fg::fleet {

Replica& Registry::add(const std::string& model, const net::Url& url, std::uint32_t slots) {
  auto replica = std::make_unique<Replica>();
  replica->id = next_id_++;
  replica->name = "r" + std::to_string(replica->id);
  replica->model = model;
  replica->url = url;
  replica->slots = slots;
  auto& ref = *replica;
  replicas_.emplace(ref.id, std::move(replica));
  return ref;
}

Replica* Registry::find(ReplicaId id) {
  auto it = replicas_.find(id);
  return it == replicas_.end() ? nullptr : it->second.get();
}

void Registry::remove(ReplicaId id) {
  replicas_.erase(id);
}

std::vector<Replica*> Registry::all() {
  std::vector<Replica*> out;
  out.reserve(replicas_.size());
  for (auto& [id, replica] : replicas_) {
    out.push_back(replica.get());
  }
  return out;
}

std::unique_ptr<net::Conn> Registry::take_idle(Replica& replica,
                                               std::chrono::steady_clock::duration max_idle,
                                               std::chrono::steady_clock::time_point now) {
  // Newest first: the most recently used connection is the least likely to have been closed.
  while (!replica.idle.empty()) {
    IdleConn idle = std::move(replica.idle.back());
    replica.idle.pop_back();
    if (now - idle.since <= max_idle && idle.conn->is_open()) {
      return std::move(idle.conn);
    }
  }
  return nullptr;
}

void Registry::give_back(Replica& replica, std::unique_ptr<net::Conn> conn,
                         std::size_t max_per_replica, std::chrono::steady_clock::time_point now) {
  if (max_per_replica == 0) {
    return;
  }
  replica.idle.push_back(IdleConn{std::move(conn), now});
  while (replica.idle.size() > max_per_replica) {
    replica.idle.pop_front();
  }
}

}  // namespace fg::fleet
