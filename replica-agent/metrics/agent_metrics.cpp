#include "replica-agent/metrics/agent_metrics.hpp"

#include <prometheus/text_serializer.h>

#include <map>

namespace fg::agent {

AgentMetrics::AgentMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_(prometheus::BuildCounter()
                    .Name("fleetgate_agent_requests_total")
                    .Help("Completion requests answered, by HTTP status (499: client gone before "
                          "the response head).")
                    .Register(*registry_)),
      tokens_(prometheus::BuildCounter()
                  .Name("fleetgate_agent_tokens_total")
                  .Help("Tokens processed, by kind (prompt, completion).")
                  .Register(*registry_)),
      prompt_tokens_(tokens_.Add({{"kind", "prompt"}})),
      completion_tokens_(tokens_.Add({{"kind", "completion"}})),
      busy_slots_(prometheus::BuildGauge()
                      .Name("fleetgate_agent_busy_slots")
                      .Help("Slots serving a request now.")
                      .Register(*registry_)
                      .Add({})),
      slots_(prometheus::BuildGauge()
                 .Name("fleetgate_agent_slots")
                 .Help("Slots (parallel requests) of this phone.")
                 .Register(*registry_)
                 .Add({})),
      prefill_tps_(prometheus::BuildGauge()
                       .Name("fleetgate_agent_prefill_tokens_per_second")
                       .Help("Prompt tokens read per second by the last request that reported "
                             "timings.")
                       .Register(*registry_)
                       .Add({})),
      decode_tps_(prometheus::BuildGauge()
                      .Name("fleetgate_agent_decode_tokens_per_second")
                      .Help("Tokens generated per second by the last request that reported "
                            "timings.")
                      .Register(*registry_)
                      .Add({})),
      autotune_prefill_(prometheus::BuildGauge()
                            .Name("fleetgate_agent_autotune_prefill_tokens_per_second")
                            .Help("engine.autotune: prefill speed measured for each llama-server "
                                  "setting tried (--threads, --batch-size).")
                            .Register(*registry_)),
      autotune_decode_(prometheus::BuildGauge()
                           .Name("fleetgate_agent_autotune_decode_tokens_per_second")
                           .Help("engine.autotune: decode speed measured for each llama-server "
                                 "setting tried.")
                           .Register(*registry_)),
      autotune_seconds_(prometheus::BuildGauge()
                            .Name("fleetgate_agent_autotune_reference_seconds")
                            .Help("engine.autotune: the score of each setting tried, the seconds "
                                  "the reference job takes (prompt_tokens / prefill + "
                                  "predict_tokens / decode); the lowest is chosen.")
                            .Register(*registry_)),
      autotune_chosen_(prometheus::BuildGauge()
                           .Name("fleetgate_agent_autotune_chosen")
                           .Help("engine.autotune: 1 for the llama-server setting the engine runs "
                                 "with.")
                           .Register(*registry_)) {
  prometheus::BuildGauge()
      .Name("fleetgate_agent_build_info")
      .Help("Always 1; the version label says which build runs.")
      .Register(*registry_)
      .Add({{"version", FLEETGATE_VERSION}})
      .Set(1);
}

void AgentMetrics::request_done(unsigned status) {
  requests_.Add({{"status", std::to_string(status)}}).Increment();
}

void AgentMetrics::tokens(double prompt, double completion) {
  if (prompt > 0) {
    prompt_tokens_.Increment(prompt);
  }
  if (completion > 0) {
    completion_tokens_.Increment(completion);
  }
}

void AgentMetrics::speeds(double prefill_tokens_per_second, double decode_tokens_per_second) {
  if (prefill_tokens_per_second > 0) {
    prefill_tps_.Set(prefill_tokens_per_second);
  }
  if (decode_tokens_per_second > 0) {
    decode_tps_.Set(decode_tokens_per_second);
  }
}

void AgentMetrics::autotune_measured(const std::string& threads, const std::string& batch_size,
                                     double prefill_tokens_per_second,
                                     double decode_tokens_per_second, double reference_seconds) {
  const std::map<std::string, std::string> labels{{"threads", threads}, {"batch_size", batch_size}};
  autotune_prefill_.Add(labels).Set(prefill_tokens_per_second);
  autotune_decode_.Add(labels).Set(decode_tokens_per_second);
  autotune_seconds_.Add(labels).Set(reference_seconds);
}

void AgentMetrics::autotune_chosen(const std::string& threads, const std::string& batch_size) {
  autotune_chosen_.Add({{"threads", threads}, {"batch_size", batch_size}}).Set(1);
}

std::string AgentMetrics::scrape(double busy_slots, double total_slots) {
  busy_slots_.Set(busy_slots);
  slots_.Set(total_slots);
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace fg::agent
