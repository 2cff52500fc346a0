#include "replica-agent/agent/sim_answer.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/openai/sse.hpp"

namespace fg::agent {

namespace asio = boost::asio;

namespace {

constexpr auto kWriteTimeout = std::chrono::seconds(30);

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

asio::awaitable<bool> write_all(net::Conn* conn, std::string bytes, AnswerProgress* progress) {
  conn->expires_after(kWriteTimeout);
  auto [ec, n] = co_await conn->write(asio::buffer(bytes));
  if (ec) {
    progress->write_failed = true;
    co_return false;
  }
  co_return true;
}

// One SSE event as one HTTP chunk.
std::string event(std::string_view payload) {
  return net::chunk(openai::sse_data(payload));
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

asio::awaitable<void> run_sim_answer(AgentContext* ctx, net::Conn* conn, AnswerInput input,
                                     AnswerProgress* progress) {
  const sim::SimPlan& plan = *input.plan;
  const ResponseMeta& meta = *input.meta;
  const bool chat = meta.endpoint == Endpoint::chat;

  if (input.stream) {
    // The head goes out at once; the first event waits for the first token, so a gateway's
    // first-byte timeout (not its shorter idle timeout) covers a long prefill.
    auto headers = input.headers;
    headers.emplace_back("Cache-Control", "no-cache");
    std::string head =
        net::response_head(200, "text/event-stream", std::nullopt, headers, input.keep_alive);
    if (!co_await write_all(conn, std::move(head), progress)) {
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
      if (i == 0 && chat) {
        bytes = event(role_chunk(meta));
      }
      bytes += event(token_chunk(meta, token));
      if (!co_await write_all(conn, std::move(bytes), progress)) {
        co_return;
      }
    }
    progress->generated += token;
    last_token = Clock::now();
  }
  progress->timings.predicted_n = plan.completion_tokens;
  progress->timings.predicted_ms = ms_between(prefill_end, last_token);
  finish_slot(ctx, input, *progress);

  std::string bytes;
  if (input.stream) {
    if (plan.completion_tokens == 0 && chat) {
      bytes = event(role_chunk(meta));
    }
    bytes += event(finish_chunk(meta, plan.finish_reason, progress->timings));
    if (meta.include_usage) {
      bytes += event(usage_chunk(meta, input.usage));
    }
    bytes += event("[DONE]");
    bytes += net::kLastChunk;
  } else {
    std::string body =
        full_body(meta, progress->generated, plan.finish_reason, input.usage, progress->timings);
    bytes = net::full_response(200, "application/json", body, input.headers, input.keep_alive);
  }
  if (!co_await write_all(conn, std::move(bytes), progress)) {
    co_return;
  }
  progress->finished = true;
}

}  // namespace fg::agent
