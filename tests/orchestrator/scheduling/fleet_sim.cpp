#include "tests/orchestrator/scheduling/fleet_sim.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <stdexcept>
#include <string>

#include "common/openai/prompt_blocks.hpp"
#include "orchestrator/scheduling/scheduler.hpp"

namespace fg::scheduling::sim {

namespace {

const std::string kModel = "fraud-reviewer";
constexpr std::uint64_t kHashKey = 0xF1EE7;

std::uint64_t splitmix(std::uint64_t& state) {
  std::uint64_t x = (state += 0x9E3779B97F4A7C15ULL);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

double unit(std::uint64_t& state) {
  return static_cast<double>(splitmix(state) >> 11) * 0x1.0p-53;
}

// Word-like text of `bytes` bytes, a function of the seed only.
std::string text(std::uint64_t seed, std::size_t bytes) {
  std::string out;
  out.reserve(bytes + 8);
  std::uint64_t state = seed * 0x2545F4914F6CDD1DULL + 1;
  while (out.size() < bytes) {
    std::uint64_t draw = splitmix(state);
    for (int i = 0; i < 8 && out.size() < bytes; ++i, draw >>= 8) {
      const unsigned c = draw & 0xFF;
      out += c < 40 ? ' ' : static_cast<char>('a' + c % 26);
    }
  }
  return out;
}

TimePoint at(double seconds) {
  return TimePoint{} +
         std::chrono::duration_cast<TimePoint::duration>(std::chrono::duration<double>(seconds));
}

double seconds_of(TimePoint t) {
  return std::chrono::duration<double>(t - TimePoint{}).count();
}

struct Event {
  enum Kind { done, issue, arrival, interactive, tick };
  double t = 0;
  Kind kind = tick;
  std::uint64_t id = 0;
  bool operator>(const Event& other) const { return t != other.t ? t > other.t : id > other.id; }
};

struct Job {
  std::uint32_t client = 0;
  double issued = 0;
  std::uint32_t prefix = 0;  // 0: none
  ReplicaId phone = 0;
  double cached = 0;
  double uncached = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
  bool interactive = false;
  std::uint32_t overtaken = 0;  // as last seen while it waited
};

struct Truth {
  std::optional<std::uint32_t> holds;  // the prefix in the slot
};

class Simulation {
 public:
  explicit Simulation(const Config& c)
      : c_(c), s_(1'000'000, c.options, c.seed), rng_(c.seed * 7919 + 3), truth_(c.phones.size()) {
    s_.add_model(kModel);
    for (std::size_t i = 0; i < c_.phones.size(); ++i) {
      s_.add_replica(i + 1, kModel, 1);
    }
    for (std::uint32_t k = 1; k <= c_.workload.prefixes; ++k) {
      prefixes_.push_back(text(k, static_cast<std::size_t>(c_.workload.prefix_tokens) * 4));
    }
  }

  Result run() {
    const Workload& w = c_.workload;
    for (const Phone& p : c_.phones) {
      top_prefill_ = std::max(top_prefill_, p.prefill_tps);
    }
    if (w.interactive_rate > 0) {
      push({.t = next_arrival(0, w.interactive_rate), .kind = Event::interactive, .id = seq_++});
    }
    if (w.arrival_rate > 0) {
      push({.t = next_arrival(0), .kind = Event::arrival, .id = seq_++});
    } else {
      for (std::uint32_t client = 0; client < w.clients; ++client) {
        push({.t = 0, .kind = Event::issue, .id = client});
      }
    }
    while (!events_.empty() && events_.top().t <= c_.seconds) {
      Event e = events_.top();
      events_.pop();
      now_ = e.t;
      switch (e.kind) {
        case Event::issue:
          admit(static_cast<std::uint32_t>(e.id));
          break;
        case Event::arrival:
          admit(0);
          push({.t = next_arrival(now_), .kind = Event::arrival, .id = seq_++});
          break;
        case Event::interactive:
          admit(0, true);
          push({.t = next_arrival(now_, w.interactive_rate),
                .kind = Event::interactive,
                .id = seq_++});
          break;
        case Event::done:
          finish(e.id);
          break;
        case Event::tick:
          tick_at_.reset();
          if (auto wake = s_.next_wakeup(); wake && seconds_of(*wake) <= now_) {
            snapshot();
            start_all(s_.tick(at(now_)));
          }
          break;
      }
      schedule_tick();
    }
    return result();
  }

 private:
  void push(Event e) { events_.push(e); }

  double next_arrival(double t) { return next_arrival(t, c_.workload.arrival_rate); }
  double next_arrival(double t, double rate) { return t - std::log(1.0 - unit(rng_)) / rate; }

  // Remembers how often each waiting job was overtaken (the scheduler forgets at the grant).
  void snapshot() {
    for (auto& [id, job] : jobs_) {
      if (job.phone == 0) {
        job.overtaken = s_.overtaken(id);
      }
    }
  }

  // Time-weighted: how many fast phones hold each prefix (the fleet's affinity balance).
  void observe_prefixes() {
    const double dt = now_ - std::max(last_observed_, c_.warmup_seconds);
    last_observed_ = now_;
    if (dt <= 0 || c_.workload.prefixes == 0) {
      return;
    }
    std::vector<std::uint32_t> fast(c_.workload.prefixes + 1, 0);
    for (std::size_t i = 0; i < truth_.size(); ++i) {
      if (truth_[i].holds && c_.phones[i].prefill_tps >= top_prefill_) {
        ++fast[*truth_[i].holds];
      }
    }
    const std::uint32_t least = *std::min_element(fast.begin() + 1, fast.end());
    observed_seconds_ += dt;
    without_fast_seconds_ += least == 0 ? dt : 0;
    min_fast_sum_ += dt * least;
  }

  double jitter() { return 1.0 + c_.jitter * (2.0 * unit(rng_) - 1.0); }

  void admit(std::uint32_t client, bool interactive = false) {
    const Workload& w = c_.workload;
    const WaiterId id = next_waiter_++;
    Job job{.client = client, .issued = now_, .interactive = interactive};
    job.prefix = w.prefixes == 0 ? 0 : static_cast<std::uint32_t>(splitmix(rng_) % w.prefixes) + 1;
    openai::PromptHasher hasher(kHashKey);
    if (job.prefix != 0) {
      hasher.add_message("system", prefixes_[job.prefix - 1]);
    }
    hasher.add_message("user", text(0x1000000 + id, static_cast<std::size_t>(w.case_tokens) * 4));
    openai::PromptBlocks blocks = hasher.finish();
    Request request{.prompt_blocks = std::move(blocks.hashes), .prompt_bytes = blocks.bytes};
    if (interactive) {
      request.priority = w.interactive_priority;
    }
    jobs_[id] = job;
    Scheduler::Admission a = s_.admit(id, kModel, at(now_), std::move(request));
    if (a.outcome == Scheduler::Outcome::granted) {
      start(id, a.replica);
    } else if (a.outcome != Scheduler::Outcome::queued) {
      throw std::runtime_error("simulated request refused");
    }
  }

  void start(WaiterId id, ReplicaId phone) {
    const Workload& w = c_.workload;
    Job& job = jobs_.at(id);
    Truth& truth = truth_.at(phone - 1);
    const Phone& speed = c_.phones.at(phone - 1);
    const double prompt = w.prefix_tokens * (job.prefix != 0 ? 1.0 : 0.0) + w.case_tokens;
    job.phone = phone;
    job.cached = job.prefix != 0 && truth.holds == job.prefix ? w.prefix_tokens : 0.0;
    account(job, phone);
    observe_prefixes();
    job.uncached = prompt - job.cached;
    job.prefill_seconds = job.uncached / speed.prefill_tps * jitter();
    // As in llama-server: the first token comes with the end of prefill, each later one a decode
    // step after it, and predicted_ms (reported below) covers those answer_tokens - 1 steps.
    const double steps = w.answer_tokens > 0 ? static_cast<double>(w.answer_tokens) - 1 : 0.0;
    job.decode_seconds = steps / speed.decode_tps * jitter();
    truth.holds = job.prefix == 0 ? std::nullopt : std::optional(job.prefix);
    push({.t = now_ + job.prefill_seconds + job.decode_seconds, .kind = Event::done, .id = id});
  }

  void account(const Job& job, ReplicaId phone) {
    if (job.issued < c_.warmup_seconds || job.prefix == 0) {
      return;
    }
    Result::Profile& p = profile_;
    const bool hit = job.cached > 0;
    const bool slow = c_.phones.at(phone - 1).prefill_tps < top_prefill_;
    ++p.grants;
    p.hits += hit ? 1 : 0;
    p.slow_grants += slow ? 1 : 0;
    p.slow_hits += slow && hit ? 1 : 0;
    if (job.interactive) {
      ++interactive_grants_;
      p.interactive_slow += slow ? 1 : 0;
      p.interactive_misses += hit ? 0 : 1;
      interactive_wait_ += now_ - job.issued;
    }
    if (hit) {
      return;
    }
    bool held_anywhere = false;
    for (const Truth& t : truth_) {
      held_anywhere = held_anywhere || t.holds == job.prefix;
    }
    p.misses_due += job.overtaken >= c_.options.max_overtakes ? 1 : 0;
    p.misses_slow += slow ? 1 : 0;
    p.misses_unheld += held_anywhere ? 0 : 1;
    p.misses_interactive += job.interactive ? 1 : 0;
  }

  void start_all(const std::vector<Grant>& grants) {
    for (const Grant& g : grants) {
      start(g.waiter, g.replica);
    }
  }

  void finish(WaiterId id) {
    const Workload& w = c_.workload;
    Job job = jobs_.at(id);
    jobs_.erase(id);
    const double prompt = job.cached + job.uncached;
    Completion report{.prompt_tokens = static_cast<std::uint64_t>(prompt),
                      .cached_tokens = static_cast<std::uint64_t>(job.cached),
                      .completion_tokens = w.answer_tokens,
                      .timings = Timings{.prompt_n = job.uncached,
                                         .prompt_ms = job.prefill_seconds * 1000,
                                         .predicted_n = static_cast<double>(w.answer_tokens),
                                         .predicted_ms = job.decode_seconds * 1000,
                                         .cache_n = job.cached}};
    if (job.issued >= c_.warmup_seconds && job.interactive) {
      interactive_latencies_.push_back(now_ - job.issued);
    } else if (job.issued >= c_.warmup_seconds) {
      latencies_.push_back(now_ - job.issued);
      cached_tokens_ += job.cached;
      prompt_tokens_ += prompt;
    }
    for (const auto& [waiting, j] : jobs_) {
      max_overtaken_ = std::max<std::uint64_t>(max_overtaken_, s_.overtaken(waiting));
    }
    snapshot();
    start_all(s_.complete(id, at(now_), report));
    if (job.interactive) {
      return;
    }
    if (w.arrival_rate <= 0 && now_ < w.clients_until) {
      admit(job.client);
    }
  }

  void schedule_tick() {
    auto wake = s_.next_wakeup();
    if (!wake) {
      return;
    }
    const double t = std::max(seconds_of(*wake), now_);
    if (!tick_at_ || t < *tick_at_) {
      tick_at_ = t;
      push({.t = t, .kind = Event::tick, .id = seq_++});
    }
  }

  Result result() {
    Result r;
    r.completed = latencies_.size();
    const double measured = c_.seconds - c_.warmup_seconds;
    r.per_hour = measured > 0 ? static_cast<double>(r.completed) * 3600.0 / measured : 0;
    if (!latencies_.empty()) {
      double sum = 0;
      for (double l : latencies_) {
        sum += l;
      }
      r.mean_latency = sum / static_cast<double>(latencies_.size());
      std::vector<double> sorted = latencies_;
      std::sort(sorted.begin(), sorted.end());
      r.p95_latency =
          sorted[static_cast<std::size_t>(0.95 * static_cast<double>(sorted.size() - 1))];
      r.max_latency = sorted.back();
    }
    r.cache_share = prompt_tokens_ > 0 ? cached_tokens_ / prompt_tokens_ : 0;
    const auto& stats = s_.prompt_cache().stats();
    r.prediction_ratio = stats.reported_blocks > 0 ? static_cast<double>(stats.predicted_blocks) /
                                                         static_cast<double>(stats.reported_blocks)
                                                   : 0;
    r.max_overtaken = max_overtaken_;
    r.cache_bytes = s_.prompt_cache().bytes_used();
    r.interactive_completed = interactive_latencies_.size();
    if (!interactive_latencies_.empty()) {
      std::vector<double> sorted = interactive_latencies_;
      std::sort(sorted.begin(), sorted.end());
      double sum = 0;
      for (double l : sorted) {
        sum += l;
      }
      r.interactive_mean = sum / static_cast<double>(sorted.size());
      r.interactive_p95 =
          sorted[static_cast<std::size_t>(0.95 * static_cast<double>(sorted.size() - 1))];
    }
    r.profile = profile_;
    if (observed_seconds_ > 0) {
      r.profile.share_prefix_without_fast = without_fast_seconds_ / observed_seconds_;
      r.profile.mean_min_fast_per_prefix = min_fast_sum_ / observed_seconds_;
    }
    if (interactive_grants_ > 0) {
      r.profile.interactive_mean_wait =
          interactive_wait_ / static_cast<double>(interactive_grants_);
    }
    return r;
  }

  const Config& c_;
  Scheduler s_;
  std::uint64_t rng_;
  std::vector<Truth> truth_;
  std::vector<std::string> prefixes_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::map<WaiterId, Job> jobs_;
  std::optional<double> tick_at_;
  double now_ = 0;
  std::uint64_t seq_ = 1'000'000;
  WaiterId next_waiter_ = 1;
  std::vector<double> latencies_;
  double cached_tokens_ = 0;
  double prompt_tokens_ = 0;
  std::uint64_t max_overtaken_ = 0;
  std::vector<double> interactive_latencies_;
  double top_prefill_ = 0;
  Result::Profile profile_{};
  std::uint64_t interactive_grants_ = 0;
  double interactive_wait_ = 0;
  double last_observed_ = 0;
  double observed_seconds_ = 0;
  double without_fast_seconds_ = 0;
  double min_fast_sum_ = 0;
};

}  // namespace

std::vector<Phone> fraud_review_fleet() {
  std::vector<Phone> phones(16);
  for (std::size_t i = 12; i < phones.size(); ++i) {
    phones[i].prefill_tps /= 4;
    phones[i].decode_tps /= 4;
  }
  return phones;
}

Result run(const Config& config) {
  return Simulation(config).run();
}

}  // namespace fg::scheduling::sim
