// Randomized invariant checks of the routing core over long random event sequences with an
// injected clock: admissions of every kind (bands, sheddable, tenants, groups, retries with
// exclusions), completions with reports, releases, cancels, time passing, replicas turning
// unroutable and changing slots, group caps changing. After every step: no over-commit, work
// conservation (a waiter that could use a free slot is held for a busy replica, or the slot's
// replica is reserved for a higher band that was seen within the reserve window, on at most half
// the replicas), the overtaking bound, the cache budget, exact accounting; at the end everyone
// left is served.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "orchestrator/scheduling/scheduler.hpp"
#include "tests/orchestrator/scheduling/routing_test_util.hpp"

namespace fg::scheduling {
namespace {

using testing::at_seconds;
using testing::review;
using Outcome = Scheduler::Outcome;

const std::string kModel = "m";
constexpr ReplicaId kReplicas = 5;
constexpr std::uint64_t kBudget = 6 * 1024;

struct Info {
  std::vector<ReplicaId> exclude{};
  std::string group{};
  std::uint32_t tokens = 0;
  std::int32_t band = 0;
};

RoutingOptions property_options(RoutingPolicy policy) {
  RoutingOptions o;
  o.policy = policy;
  o.exploration = 0.05;
  o.max_overtakes = 3;  // small, so that the bound is reached often
  o.scan_window = 4;    // small, so that scans go past it
  o.cache_budget_bytes = kBudget;
  o.band_queue_max = {{5, 4}};
  o.fair_share_slack_tokens = 2000;
  o.tenant_weights = {{"b", 2.0}};
  o.hold_margin = 0.1;
  // Short and small, so that reserves come, go and hit their cap often.
  o.reserve_margin = 0.5;
  o.reserve_prompts = 3;
  o.reserve_window = std::chrono::seconds(60);
  return o;
}

struct Harness {
  Harness(std::uint32_t seed, RoutingPolicy policy, bool vary_slots)
      : rng(seed), vary(vary_slots), options(property_options(policy)), s(24, options, seed) {
    s.add_model(kModel);
    for (ReplicaId r = 1; r <= kReplicas; ++r) {
      s.add_replica(r, kModel, pick(3) + 1);
      s.set_measured_speeds(r, 20.0 + pick(200), 2.0 + pick(20));
    }
  }

  std::uint32_t pick(std::uint32_t n) {
    return std::uniform_int_distribution<std::uint32_t>(0, n - 1)(rng);
  }

  bool effectively_excluded(const std::vector<ReplicaId>& exclude, ReplicaId r) const {
    if (std::find(exclude.begin(), exclude.end(), r) == exclude.end()) {
      return false;
    }
    for (ReplicaId other = 1; other <= kReplicas; ++other) {
      const bool serves = s.routable(other) && s.slots(other) > 0;
      if (serves && std::find(exclude.begin(), exclude.end(), other) == exclude.end()) {
        return true;  // somewhere else to go: the exclusion holds
      }
    }
    return false;
  }

  bool group_full(const std::string& group) const {
    auto it = limits.find(group);
    return !group.empty() && it != limits.end() && s.group_in_flight(group) >= it->second;
  }

  bool can_use_now(const Info& info, ReplicaId r) const {
    return s.routable(r) && s.in_flight(r) < s.slots(r) && !effectively_excluded(info.exclude, r) &&
           !group_full(info.group);
  }

  void check_grant(WaiterId w, ReplicaId r, const Info& info) {
    ASSERT_TRUE(s.routable(r)) << "unroutable replica " << r;
    ASSERT_FALSE(effectively_excluded(info.exclude, r)) << "excluded replica " << r;
    if (!vary) {
      ASSERT_LE(s.in_flight(r), s.slots(r));
    }
    if (!info.group.empty() && limits.contains(info.group)) {
      ASSERT_LE(s.group_in_flight(info.group), limits.at(info.group)) << "group over its cap";
    }
    ASSERT_TRUE(served.insert(w).second) << "granted twice: " << w;
    bound[w] = r;
    on_replica[r].push_back(w);
  }

  void take(const std::vector<Grant>& grants) {
    for (const Grant& g : grants) {
      auto it = queued.find(g.waiter);
      ASSERT_NE(it, queued.end()) << "grant for a waiter not queued: " << g.waiter;
      Info info = it->second;
      queued.erase(it);
      ASSERT_NO_FATAL_FAILURE(check_grant(g.waiter, g.replica, info));
      ++late_grants;
    }
  }

  void unbind(WaiterId w) {
    ReplicaId r = bound.at(w);
    bound.erase(w);
    auto& list = on_replica[r];
    list.erase(std::find(list.begin(), list.end(), w));
  }

  Completion report(const Info& info) {
    Completion c;
    c.ok = pick(10) != 0;
    if (pick(4) != 0) {
      c.prompt_tokens = info.tokens;
      c.cached_tokens = pick(info.tokens + 1);
      c.completion_tokens = pick(40);
    }
    if (pick(2) == 0) {
      c.timings = Timings{.prompt_n = static_cast<double>(pick(info.tokens + 1)),
                          .prompt_ms = static_cast<double>(pick(100000)),
                          .predicted_n = static_cast<double>(pick(40)),
                          .predicted_ms = static_cast<double>(pick(10000))};
    }
    return c;
  }

  void admit() {
    const WaiterId w = next++;
    Info info;
    info.tokens = 100 + pick(4000);
    Request r = review(pick(4), info.tokens / 2, w, info.tokens - info.tokens / 2);
    const std::uint32_t band = pick(20);
    r.priority = band < 12 ? 0 : band < 17 ? 5 : -1;
    r.sheddable = *r.priority < 0 && pick(2) == 0;
    r.tenant = std::string(1, static_cast<char>('a' + pick(3)));
    const std::uint32_t group = pick(4);
    if (group < 2) {
      r.group = group == 0 ? "g1" : "g2";
    }
    if (pick(4) == 0) {
      for (ReplicaId id = 1; id <= kReplicas; ++id) {
        if (pick(2) == 0) {
          r.exclude.push_back(id);
        }
      }
    }
    if (pick(3) == 0) {
      r.max_tokens = pick(64);
    }
    info.exclude = r.exclude;
    info.group = r.group;
    info.band = *r.priority;
    const bool sheddable = r.sheddable;
    band_admitted[info.band] = now;
    told = now;
    Scheduler::Admission a = s.admit(w, kModel, at_seconds(now), std::move(r));
    switch (a.outcome) {
      case Outcome::granted:
        ASSERT_NO_FATAL_FAILURE(check_grant(w, a.replica, info));
        break;
      case Outcome::queued:
        ASSERT_FALSE(sheddable) << "a sheddable request waits";
        queued[w] = info;
        break;
      case Outcome::queue_full:
        ASSERT_TRUE(!a.shed || sheddable);
        if (a.shed) {
          ASSERT_GE(a.retry_after.count(), 1);
        }
        ++refusals;
        break;
      case Outcome::unknown_model:
        FAIL() << "model exists";
    }
  }

  void step() {
    const std::uint32_t op = pick(vary ? 100 : 95);
    if (op < 35) {
      admit();
    } else if (op < 60) {
      if (bound.empty()) {
        return;
      }
      auto it = bound.begin();
      std::advance(it, pick(static_cast<std::uint32_t>(bound.size())));
      const WaiterId w = it->first;
      Info info{.tokens = 1000};
      unbind(w);
      told = now;
      take(s.complete(w, at_seconds(now), report(info)));
    } else if (op < 65) {
      if (bound.empty()) {
        return;
      }
      auto it = bound.begin();
      std::advance(it, pick(static_cast<std::uint32_t>(bound.size())));
      // The old API ends the replica's oldest binding.
      const ReplicaId r = it->second;
      unbind(on_replica[r].front());
      told = now;
      take(s.release(r, at_seconds(now)));
    } else if (op < 73) {
      if (!queued.empty() && pick(4) != 0) {
        auto it = queued.begin();
        std::advance(it, pick(static_cast<std::uint32_t>(queued.size())));
        ASSERT_TRUE(s.cancel(it->first));
        queued.erase(it);
      } else {
        ASSERT_FALSE(s.cancel(next + 1000));
      }
    } else if (op < 85) {
      now += pick(30000) / 1000.0;
    } else if (op < 90) {
      const ReplicaId r = pick(kReplicas) + 1;
      take(s.set_routable(r, !s.routable(r)));
    } else if (op < 95) {
      const std::string group = pick(2) == 0 ? "g1" : "g2";
      const std::uint32_t limit = pick(4);
      if (limit == 3) {
        limits.erase(group);
        take(s.set_group_limit(group, std::nullopt));
      } else {
        limits[group] = limit;
        take(s.set_group_limit(group, limit));
      }
    } else {
      take(s.set_slots(pick(kReplicas) + 1, pick(4)));
    }
    // The shell's timer: tick whenever the scheduler asks for it.
    for (int i = 0; i < 10; ++i) {
      auto wake = s.next_wakeup();
      if (!wake || *wake > at_seconds(now)) {
        return;
      }
      told = now;
      take(s.tick(at_seconds(now)));
    }
    auto wake = s.next_wakeup();
    ASSERT_TRUE(!wake || *wake > at_seconds(now)) << "next_wakeup stays in the past";
  }

  void check() {
    std::uint64_t total = 0;
    std::uint32_t busy_routable = 0;
    for (ReplicaId r = 1; r <= kReplicas; ++r) {
      if (!vary) {
        ASSERT_LE(s.in_flight(r), s.slots(r)) << "over-commit on " << r;
      }
      ASSERT_EQ(s.in_flight(r), on_replica[r].size());
      total += s.in_flight(r);
      if (s.routable(r)) {
        busy_routable += s.in_flight(r);
      }
    }
    ASSERT_EQ(total, bound.size());
    ASSERT_EQ(s.queue_depth(kModel), queued.size());
    std::uint32_t held = 0;
    std::map<std::int32_t, std::vector<ReplicaId>> reserved;
    for (const auto& [w, info] : queued) {
      if (!reserved.contains(info.band)) {
        ASSERT_NO_FATAL_FAILURE(check_reserve(info.band, reserved[info.band]));
      }
    }
    for (const auto& [w, info] : queued) {
      // The starvation bound.
      ASSERT_LE(s.overtaken(w), options.max_overtakes) << "waiter " << w;
      if (s.held(w)) {
        ++held;
        continue;
      }
      // Work conservation: nobody waits while a slot it may use is free, unless held or the
      // replica is reserved for a higher band.
      const std::vector<ReplicaId>& kept = reserved.at(info.band);
      for (ReplicaId r = 1; r <= kReplicas; ++r) {
        if (std::find(kept.begin(), kept.end(), r) != kept.end()) {
          reserve_blocks += can_use_now(info, r) ? 1 : 0;
          continue;
        }
        ASSERT_FALSE(can_use_now(info, r))
            << "waiter " << w << " could use replica " << r << " (band " << info.band << ")";
      }
    }
    ASSERT_LE(held, busy_routable) << "more held waiters than busy slots";
    if (options.policy == RoutingPolicy::least_loaded) {
      ASSERT_EQ(held, 0u);
    }
    ASSERT_LE(s.prompt_cache().bytes_used(), kBudget);
  }

  // What the scheduler keeps from a band: free replicas only, at most half of those that serve,
  // and only while a higher band was admitted within the reserve window (of the scheduler's
  // clock: the last time it was told).
  void check_reserve(std::int32_t band, std::vector<ReplicaId>& kept) {
    kept = s.reserved(kModel, band);
    if (kept.empty()) {
      return;
    }
    ASSERT_EQ(options.policy, RoutingPolicy::expected_finish) << "least_loaded keeps nothing";
    std::uint32_t serving = 0;
    for (ReplicaId r = 1; r <= kReplicas; ++r) {
      serving += s.routable(r) && s.slots(r) > 0 ? 1 : 0;
    }
    ASSERT_LE(kept.size(), serving / 2) << "band " << band;
    for (ReplicaId r : kept) {
      ASSERT_TRUE(s.routable(r) && s.in_flight(r) < s.slots(r)) << "kept replica " << r;
    }
    const double window = std::chrono::duration<double>(options.reserve_window).count();
    bool higher_recent = false;
    for (const auto& [b, t] : band_admitted) {
      higher_recent = higher_recent || (b > band && t > told - window);
    }
    ASSERT_TRUE(higher_recent) << "band " << band << " kept out with no higher band recent";
  }

  void drain() {
    for (ReplicaId r = 1; r <= kReplicas; ++r) {
      if (s.slots(r) == 0) {
        take(s.set_slots(r, 1));
      }
      take(s.set_routable(r, true));
    }
    for (const auto& group : {"g1", "g2"}) {
      limits.erase(group);
      take(s.set_group_limit(group, std::nullopt));
    }
    for (int guard = 0; guard < 100000 && (!bound.empty() || !queued.empty()); ++guard) {
      now += 1;
      if (!bound.empty()) {
        const WaiterId w = bound.begin()->first;
        unbind(w);
        take(s.complete(w, at_seconds(now)));
      }
      take(s.tick(at_seconds(now)));
    }
  }

  std::mt19937 rng;
  bool vary;
  RoutingOptions options;
  Scheduler s;
  double now = 0;
  WaiterId next = 1;
  std::map<WaiterId, Info> queued;
  std::map<WaiterId, ReplicaId> bound;
  std::map<ReplicaId, std::deque<WaiterId>> on_replica;
  std::set<WaiterId> served;
  std::map<std::string, std::uint32_t> limits;
  std::size_t late_grants = 0;
  std::size_t refusals = 0;
  std::map<std::int32_t, double> band_admitted;  // the last admission of each band
  double told = 0;                               // the latest time the scheduler was told
  std::size_t reserve_blocks = 0;                // a waiter that could have used a reserved replica
};

void run_property(std::uint32_t seed, RoutingPolicy policy, bool vary) {
  Harness h(seed, policy, vary);
  std::size_t held_seen = 0;
  for (int i = 0; i < 4000; ++i) {
    ASSERT_NO_FATAL_FAILURE(h.step()) << "seed " << seed << " step " << i;
    ASSERT_NO_FATAL_FAILURE(h.check()) << "seed " << seed << " step " << i;
    for (const auto& [w, info] : h.queued) {
      held_seen += h.s.held(w) ? 1 : 0;
    }
  }
  EXPECT_GT(h.late_grants, 100u) << "seed " << seed;
  EXPECT_GT(h.refusals, 0u) << "seed " << seed;
  if (policy == RoutingPolicy::expected_finish) {
    EXPECT_GT(held_seen, 0u) << "seed " << seed << ": holds never exercised";
    EXPECT_GT(h.reserve_blocks, 0u) << "seed " << seed << ": the reserve never kept anyone out";
  }
  ASSERT_NO_FATAL_FAILURE(h.drain());
  EXPECT_TRUE(h.queued.empty()) << "seed " << seed << ": " << h.queued.size() << " never served";
  EXPECT_TRUE(h.bound.empty());
  EXPECT_EQ(h.s.queue_depth(kModel), 0u);
  EXPECT_EQ(h.s.next_wakeup(), std::nullopt);
}

TEST(RoutingProperty, ExpectedFinishKeepsItsInvariants) {
  for (std::uint32_t seed = 1; seed <= 6; ++seed) {
    ASSERT_NO_FATAL_FAILURE(run_property(seed, RoutingPolicy::expected_finish, false));
  }
}

TEST(RoutingProperty, ExpectedFinishWithSlotChangesKeepsItsInvariants) {
  for (std::uint32_t seed = 101; seed <= 104; ++seed) {
    ASSERT_NO_FATAL_FAILURE(run_property(seed, RoutingPolicy::expected_finish, true));
  }
}

TEST(RoutingProperty, LeastLoadedWithBandsTenantsAndGroupsKeepsItsInvariants) {
  for (std::uint32_t seed = 201; seed <= 204; ++seed) {
    ASSERT_NO_FATAL_FAILURE(run_property(seed, RoutingPolicy::least_loaded, false));
  }
}

// Two tenants that always have work queued, requests of random sizes: what each has received,
// in tokens divided by its weight, never drifts apart by more than the slack plus one request.
TEST(RoutingProperty, FairSharesConvergeByTokens) {
  for (RoutingPolicy policy : {RoutingPolicy::least_loaded, RoutingPolicy::expected_finish}) {
    RoutingOptions o = property_options(policy);
    o.exploration = 0;
    o.tenant_weights = {{"heavy", 1.0}, {"light", 3.0}};
    Scheduler s(1000, o, 9);
    s.add_model(kModel);
    for (ReplicaId r = 1; r <= 3; ++r) {
      s.add_replica(r, kModel, 2);
    }
    std::mt19937 rng(11);
    WaiterId next = 1;
    std::map<WaiterId, std::string> tenant_of;
    std::map<std::string, int> waiting;
    std::vector<WaiterId> running;
    double now = 0;
    auto add = [&](const std::string& tenant) {
      const auto tokens = static_cast<std::uint32_t>(200 + rng() % 6000);
      Request r = review(0, 0, next, tokens);
      r.tenant = tenant;
      r.max_tokens = 0;  // no answer: the charge is the prompt alone
      tenant_of[next] = tenant;
      Scheduler::Admission a = s.admit(next, kModel, at_seconds(now), r);
      if (a.outcome == Outcome::granted) {
        running.push_back(next);
      } else {
        ++waiting[tenant];
      }
      ++next;
    };
    for (int i = 0; i < 20; ++i) {
      add("heavy");
      add("light");
    }
    for (int i = 0; i < 3000; ++i) {
      now += 1;
      const std::size_t k = rng() % running.size();
      const WaiterId done = running[k];
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(k));
      for (const Grant& g : s.complete(done, at_seconds(now))) {
        running.push_back(g.waiter);
        --waiting[tenant_of[g.waiter]];
      }
      for (const char* tenant : {"heavy", "light"}) {
        while (waiting[tenant] < 10) {
          add(tenant);
        }
      }
      const double heavy = *s.tenant_usage(kModel, 0, "heavy");
      const double light = *s.tenant_usage(kModel, 0, "light");
      ASSERT_LE(std::abs(heavy - light), o.fair_share_slack_tokens + 6200)
          << to_string(policy) << " step " << i;
    }
  }
}

}  // namespace
}  // namespace fg::scheduling
