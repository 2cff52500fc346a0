#include "orchestrator/fleet/reload_plan.hpp"

#include <map>
#include <utility>

namespace fg::fleet {

namespace {

using LocalAction = ReloadPlan::LocalAction;

void plan_statics(const RunningFleet& old, const config::Config& next, ReloadPlan& plan) {
  // url -> (model, slots) as the new file wants it.
  std::map<std::string, std::pair<std::string, std::uint32_t>> wanted;
  for (const auto& model : next.models) {
    for (const auto& endpoint : model.endpoints) {
      wanted.emplace(endpoint.url.to_string(), std::make_pair(model.name, endpoint.slots));
    }
  }
  std::set<std::string> kept;
  for (const auto& s : old.statics) {
    if (next.find_model(s.model) == nullptr) {
      continue;  // goes with its model
    }
    auto it = wanted.find(s.url);
    const bool stays = it != wanted.end() && it->second.first == s.model && !kept.count(s.url);
    if (!stays) {
      if (!s.removing) {
        plan.remove_statics.push_back(s.id);
      }
      continue;
    }
    plan.keep_statics.push_back({s.id, it->second.second, s.removing});
    kept.insert(s.url);
  }
  for (const auto& [url, target] : wanted) {
    if (kept.count(url)) {
      continue;
    }
    if (old.other_urls.count(url)) {
      plan.shadowed_statics.push_back(url);
      continue;
    }
    auto parsed = net::parse_url(url);
    plan.add_statics.push_back({target.first, *parsed, target.second});
  }
}

void plan_locals(const RunningFleet& old, const config::Config& next, ReloadPlan& plan) {
  std::map<std::string, std::vector<const RunningFleet::Local*>> running;
  for (const auto& local : old.locals) {
    running[local.model].push_back(&local);
  }
  for (const auto& [model, agents] : running) {
    const auto* m = next.find_model(model);
    for (const auto* agent : agents) {
      if (m == nullptr || !m->local || agent->index >= m->local->count) {
        plan.locals.push_back({LocalAction::Kind::stop, model, agent->index, agent->settings});
      } else if (!same_agent_settings(agent->settings, *m->local)) {
        plan.locals.push_back({LocalAction::Kind::restart, model, agent->index, *m->local});
      }
    }
  }
  for (const auto& m : next.models) {
    if (!m.local) {
      continue;
    }
    std::set<std::uint32_t> have;
    if (auto it = running.find(m.name); it != running.end()) {
      for (const auto* agent : it->second) {
        have.insert(agent->index);
      }
    }
    for (std::uint32_t i = 0; i < m.local->count; ++i) {
      if (!have.count(i)) {
        plan.locals.push_back({LocalAction::Kind::start, m.name, i, *m.local});
      }
    }
  }
}

}  // namespace

bool same_agent_settings(const config::LocalFleetConfig& a, const config::LocalFleetConfig& b) {
  return a.engine == b.engine && a.profile == b.profile && a.time_scale == b.time_scale &&
         a.slots == b.slots;
}

ReloadPlan plan_reload(const RunningFleet& old, const config::Config& next) {
  ReloadPlan plan;
  std::set<std::string> next_models;
  for (const auto& model : next.models) {
    next_models.insert(model.name);
    if (!old.models.count(model.name)) {
      plan.add_models.push_back(model.name);
    }
  }
  for (const auto& model : old.models) {
    if (!next_models.count(model)) {
      plan.remove_models.push_back(model);
    }
  }
  plan_statics(old, next, plan);
  plan_locals(old, next, plan);
  return plan;
}

}  // namespace fg::fleet
