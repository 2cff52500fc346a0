#pragma once

#include <memory>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

namespace fg::agent {

// Every metric family of the agent, declared in one place. No model or replica labels:
// Prometheus adds those from service discovery (the gateway's file_sd list). Label values are
// bounded (HTTP status codes, token kinds); never prompts or keys.
class AgentMetrics {
 public:
  AgentMetrics();

  // One answered completion request (chat or completions), whatever its outcome; 499 when the
  // client left before a response head.
  void request_done(unsigned status);
  void tokens(double prompt, double completion);
  // From the last request's timings (llama.cpp's prompt_per_second and predicted_per_second).
  void speeds(double prefill_tokens_per_second, double decode_tokens_per_second);
  // engine.autotune: one measured candidate (labels: its --threads and --batch-size, "default"
  // when not set), and the one chosen (its chosen gauge is 1).
  void autotune_measured(const std::string& threads, const std::string& batch_size,
                         double prefill_tokens_per_second, double decode_tokens_per_second,
                         double reference_seconds);
  void autotune_chosen(const std::string& threads, const std::string& batch_size);

  // Prometheus text exposition format. busy and total slots are read at the scrape.
  std::string scrape(double busy_slots, double total_slots);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Counter>& tokens_;
  prometheus::Counter& prompt_tokens_;
  prometheus::Counter& completion_tokens_;
  prometheus::Gauge& busy_slots_;
  prometheus::Gauge& slots_;
  prometheus::Gauge& prefill_tps_;
  prometheus::Gauge& decode_tps_;
  prometheus::Family<prometheus::Gauge>& autotune_prefill_;
  prometheus::Family<prometheus::Gauge>& autotune_decode_;
  prometheus::Family<prometheus::Gauge>& autotune_seconds_;
  prometheus::Family<prometheus::Gauge>& autotune_chosen_;
};

}  // namespace fg::agent
