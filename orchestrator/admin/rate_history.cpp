#include "orchestrator/admin/rate_history.hpp"

namespace fg::admin {

namespace {

double per_second(std::uint64_t before, std::uint64_t after, double seconds) {
  // A counter that went down restarted from zero: everything it holds now is new.
  const std::uint64_t delta = after >= before ? after - before : after;
  return static_cast<double>(delta) / seconds;
}

}  // namespace

void RateHistory::sample(TimePoint now, const std::map<std::string, Totals>& totals) {
  for (auto it = series_.begin(); it != series_.end();) {
    it = totals.count(it->first) == 0 ? series_.erase(it) : std::next(it);
  }
  for (const auto& [model, current] : totals) {
    auto [it, added] = series_.try_emplace(model);
    Series& s = it->second;
    if (added) {
      s.last_at = now;
      s.last = current;
      continue;
    }
    if (now <= s.last_at) {
      continue;
    }
    const double seconds = std::chrono::duration<double>(now - s.last_at).count();
    s.points.push_back({s.last_at, now, per_second(s.last.requests, current.requests, seconds),
                        per_second(s.last.tokens, current.tokens, seconds)});
    while (s.points.size() > capacity_) {
      s.points.pop_front();
    }
    s.last_at = now;
    s.last = current;
  }
}

std::vector<RatePoint> RateHistory::points(const std::string& model) const {
  auto it = series_.find(model);
  if (it == series_.end()) {
    return {};
  }
  return {it->second.points.begin(), it->second.points.end()};
}

RatePoint RateHistory::recent(const std::string& model,
                              std::chrono::steady_clock::duration window) const {
  auto it = series_.find(model);
  if (it == series_.end() || it->second.points.empty()) {
    return {};
  }
  const auto& points = it->second.points;
  const TimePoint end = points.back().at;
  // Weighted by each interval's length, so uneven sampling does not skew the average.
  double seconds = 0;
  double requests = 0;
  double tokens = 0;
  TimePoint from = end;
  for (auto p = points.rbegin(); p != points.rend(); ++p) {
    if (seconds > 0 && end - p->from > window) {
      break;
    }
    const double length = std::chrono::duration<double>(p->at - p->from).count();
    seconds += length;
    requests += p->requests_per_second * length;
    tokens += p->tokens_per_second * length;
    from = p->from;
  }
  return {from, end, requests / seconds, tokens / seconds};
}

}  // namespace fg::admin
