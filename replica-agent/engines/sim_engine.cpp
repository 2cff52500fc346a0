#include "replica-agent/engines/sim_engine.hpp"

#include <chrono>
#include <ctime>

#include <boost/asio/experimental/awaitable_operators.hpp>

#include "common/openai/errors.hpp"
#include "replica-agent/engines/sim_answer.hpp"

namespace fg::agent {

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;

namespace {

double per_second(std::size_t n, double ms) {
  return ms > 0 ? static_cast<double>(n) / ms * 1000.0 : 0.0;
}

class SimEngine final : public Engine {
 public:
  explicit SimEngine(AgentContext* ctx) : ctx_(ctx) {}

  // The simulator answers at once (after model_file, when there is one).
  void start() override { ctx_->engine_ready = true; }

  std::optional<std::string> count_tokens(Endpoint endpoint, const std::string& prompt) override {
    // Counting tokens reads no prompt into a slot: answered at once, as llama.cpp tokenizes.
    return token_count_body(endpoint, sim::prompt_tokens_for_chars(prompt.size()));
  }

  asio::awaitable<EngineOutcome> answer(EngineRequest request) override {
    return run(ctx_, request);
  }

 private:
  static asio::awaitable<EngineOutcome> run(AgentContext* ctx, EngineRequest q) {
    net::ServerRequest r = q.r;
    std::optional<SlotGuard>& guard = *q.slot;
    const std::string& prompt = *q.prompt;
    const nlohmann::json& body = *q.body;
    EngineOutcome out;
    const std::size_t cached = ctx->admission.cached_tokens(*guard, prompt);
    // A rerank reads its documents and generates nothing.
    const auto max_tokens = q.endpoint == Endpoint::rerank ? std::optional<std::size_t>(0)
                                                           : sim::requested_max_tokens(body);
    out.plan = sim::plan_request(*ctx->profile, ctx->sim, prompt, cached, max_tokens, ctx->sim_rng);
    const sim::SimPlan& plan = *out.plan;
    if (plan.fail) {
      guard.reset();
      std::string error =
          openai::error_body("simulated failure (--fail-rate); retry",
                             openai::error_type_for_status(500), "simulated_failure", "");
      if (auto shaped = openai::reshaped_error(q.api, 500, error)) {
        error = std::move(*shaped);
      }
      co_await r.writer->send_full(500, "application/json", std::move(error), {});
      out.status = 500;
      out.outcome = "simulated_failure";
      out.keep_alive = r.writer->keep_alive() && r.writer->finished();
      co_return out;
    }

    ResponseMeta meta;
    meta.endpoint = q.endpoint;
    meta.id = make_response_id(q.endpoint, ctx->id_rng(), ctx->id_rng());
    meta.created = static_cast<std::int64_t>(std::time(nullptr));
    meta.model = ctx->config.model;
    meta.include_usage = q.info->stream && q.info->include_usage;

    AnswerInput input;
    input.plan = &plan;
    input.meta = &meta;
    input.slot = q.slot;
    input.prompt = &prompt;
    input.usage = Usage{plan.prompt_tokens, plan.cached_tokens, plan.completion_tokens};
    input.stream = q.info->stream;
    input.start = Clock::now();
    std::string rerank;
    if (q.endpoint == Endpoint::rerank) {
      std::vector<std::string> documents = body["documents"].get<std::vector<std::string>>();
      std::size_t top_n = documents.size();
      if (auto n = body.find("top_n"); n != body.end() && n->is_number_unsigned()) {
        top_n = n->get<std::size_t>();
      }
      rerank = rerank_body(meta, rerank_scores(body["query"].get<std::string>(), documents, top_n),
                           input.usage);
      input.whole_body = &rerank;
    }
    AnswerProgress progress;

    // The client may vanish at any time, during prefill included: watch_client notices, and
    // whichever branch ends first cancels the other, so the slot is freed at once.
    r.conn->expires_never();
    auto done = co_await (net::watch_client(r) || run_sim_answer(ctx, r.writer, input, &progress));
    const bool client_gone = done.index() == 0 || !progress.finished;
    finish_slot(ctx, input, progress);
    if (progress.finished) {
      ctx->metrics.tokens(static_cast<double>(plan.prompt_tokens),
                          static_cast<double>(plan.completion_tokens));
      ctx->metrics.speeds(per_second(progress.timings.prompt_n, progress.timings.prompt_ms),
                          per_second(progress.timings.predicted_n, progress.timings.predicted_ms));
    }
    // 499 (nginx's "client closed request") when the client left before any response head.
    out.status = q.info->stream || !client_gone ? 200 : 499;
    out.outcome = client_gone ? "client_gone" : "ok";
    out.keep_alive = !client_gone && r.writer->keep_alive();
    co_return out;
  }

  AgentContext* ctx_;
};

}  // namespace

std::unique_ptr<Engine> make_sim_engine(AgentContext* ctx) {
  return std::make_unique<SimEngine>(ctx);
}

}  // namespace fg::agent
