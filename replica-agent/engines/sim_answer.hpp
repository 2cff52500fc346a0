#pragma once

#include <chrono>
#include <optional>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "common/net/response_writer.hpp"
#include "replica-agent/core/context.hpp"
#include "replica-agent/engines/responses.hpp"
#include "replica-agent/engines/sim_model.hpp"

namespace fg::agent {

using Clock = std::chrono::steady_clock;

// One admitted request, planned and ready to be answered.
struct AnswerInput {
  const sim::SimPlan* plan = nullptr;
  const ResponseMeta* meta = nullptr;
  std::optional<SlotGuard>* slot = nullptr;  // the request's slot, released by finish_slot
  const std::string* prompt = nullptr;
  Usage usage;
  bool stream = false;
  Clock::time_point start;  // when the slot was taken
  // Set for answers that do not depend on the text generated (rerank): sent after the prefill.
  const std::string* whole_body = nullptr;
};

// How far the answer got, read by the caller even when the answer was cancelled midway.
struct AnswerProgress {
  bool prefilled = false;  // the prompt was "read": the slot's cache now holds it
  std::string generated;   // answer text produced so far
  bool finished = false;   // the whole response was written
  bool write_failed = false;
  Timings timings;
};

// Stores what the slot evaluated (prompt and the answer so far) in its cache, then frees it.
// Idempotent: the first call (end of generation, or the caller after a cancellation) does it.
void finish_slot(AgentContext* ctx, const AnswerInput& input, const AnswerProgress& progress);

// Follows the plan with real timers: waits out the prefill, then produces one token at a time at
// the decode speed for the current number of busy slots, streamed as SSE chunks or sent whole at
// the end. The slot is freed as soon as the last token is generated, before the final write (as
// llama.cpp does), so a client that sends its next request the moment it has read the end of
// this one never finds the slot still taken. Returns early (progress says how far it got) when a
// write fails or it is cancelled.
boost::asio::awaitable<void> run_sim_answer(AgentContext* ctx, net::ResponseWriter* writer,
                                            AnswerInput input, AnswerProgress* progress);

}  // namespace fg::agent
