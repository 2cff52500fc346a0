#include "replica-agent/engines/sim_answer.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace fg::agent {

namespace asio = boost::asio;

namespace {

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

bool written(bool ok, AnswerProgress* progress) {
  if (!ok) {
    progress->write_failed = true;
  }
  return ok;
}

}  // namespace

void finish_slot(AgentContext* ctx, const AnswerInput& input, const AnswerProgress& progress) {
  if (!input.slot->has_value()) {
    return;
  }
  if (progress.prefilled) {
    ctx->admission.remember(**input.slot, *input.prompt + progress.generated);
  }
  input.slot->reset();
}

asio::awaitable<void> run_sim_answer(AgentContext* ctx, net::ResponseWriter* writer,
                                     AnswerInput input, AnswerProgress* progress) {
  const sim::SimPlan& plan = *input.plan;
  const ResponseMeta& meta = *input.meta;

  if (input.stream) {
    // The head goes out at once; the first event waits for the first token, so a gateway's
    // first-byte timeout (not its shorter idle timeout) covers a long prefill.
    bool opened = co_await writer->begin_stream(200, "text/event-stream");
    if (!written(opened, progress)) {
      co_return;
    }
  }

  asio::steady_timer timer(co_await asio::this_coro::executor);
  timer.expires_at(input.start + seconds(plan.prefill_seconds));
  auto [prefill_ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  if (prefill_ec) {
    co_return;
  }
  const auto prefill_end = Clock::now();
  progress->prefilled = true;
  progress->timings.prompt_n = plan.prompt_tokens - plan.cached_tokens;
  progress->timings.cache_n = plan.cached_tokens;
  progress->timings.prompt_ms = ms_between(input.start, prefill_end);

  // Token 0 comes with the end of prefill; each later one an interval after the previous
  // deadline (not after the write), so write time does not accumulate. The interval follows the
  // number of busy slots at that moment.
  auto deadline = prefill_end;
  auto last_token = prefill_end;
  for (std::size_t i = 0; i < plan.completion_tokens; ++i) {
    if (i > 0) {
      double interval =
          sim::token_interval_seconds(*ctx->profile, ctx->admission.busy(), ctx->sim.time_scale) *
          plan.decode_jitter;
      deadline += seconds(interval);
      timer.expires_at(deadline);
      auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
      if (ec) {
        co_return;
      }
    }
    std::string token = sim::sim_token(plan.text_seed, i);
    if (input.stream) {
      std::string bytes;
      if (i == 0) {
        bytes = stream_opening(meta, input.usage);
      }
      bytes += stream_token(meta, i, token);
      bool sent = co_await writer->send_chunk(std::move(bytes));
      if (!written(sent, progress)) {
        co_return;
      }
    }
    progress->generated += token;
    last_token = Clock::now();
  }
  progress->timings.predicted_n = plan.completion_tokens;
  progress->timings.predicted_ms = ms_between(prefill_end, last_token);
  finish_slot(ctx, input, *progress);

  bool sent = false;
  if (input.stream) {
    std::string bytes;
    if (plan.completion_tokens == 0) {
      bytes = stream_opening(meta, input.usage);
    }
    bytes += stream_closing(meta, progress->generated, plan.finish_reason, input.usage,
                            progress->timings);
    sent = co_await writer->end_stream(std::move(bytes));
  } else {
    std::string body = input.whole_body != nullptr
                           ? *input.whole_body
                           : answer_body(meta, progress->generated, plan.finish_reason, input.usage,
                                         progress->timings);
    sent = co_await writer->send_full(200, "application/json", std::move(body));
  }
  if (!written(sent, progress)) {
    co_return;
  }
  progress->finished = true;
}

}  // namespace fg::agent
