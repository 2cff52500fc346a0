#include "orchestrator/batch/batch_service.hpp"

#include <openssl/sha.h>

#include <algorithm>
#include <charconv>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <nlohmann/json.hpp>

#include "common/log/log.hpp"
#include "common/net/conn.hpp"
#include "common/openai/inspect.hpp"
#include "common/util/request_id.hpp"
#include "orchestrator/batch/batch_format.hpp"
#include "orchestrator/fleet/fleet_manager.hpp"
#include "orchestrator/metrics/metrics.hpp"
#include "orchestrator/proxy/public_routes.hpp"
#include "orchestrator/proxy/upstream.hpp"

namespace fg::batch {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using nlohmann::json;
using storage::BatchRecord;
using storage::BatchStatus;
using storage::UnixMs;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kChunkBytes = 1024 * 1024;  // an upload is stored in pieces of this size
constexpr std::size_t kLinesPerInsert = 500;      // validated lines written per transaction
constexpr std::size_t kMaxReportedErrors = 100;   // errors.data[] of a failed batch
constexpr int kResultsPerRead = 256;

// The byte stream a batch line's answer is written to: the relay code writes an HTTP response
// exactly as it would to a client, and the runner reads it back (status, body).
class CaptureConn final : public net::Conn {
 public:
  CaptureConn(asio::any_io_executor ex, std::size_t limit) : socket_(ex), limit_(limit) {}
  asio::awaitable<net::IoResult> read_some(asio::mutable_buffer) override {
    co_return net::IoResult{asio::error::eof, 0};
  }
  asio::awaitable<net::IoResult> write(asio::const_buffer first,
                                       asio::const_buffer second) override {
    std::size_t n = first.size() + second.size();
    if (bytes_.size() + n > limit_) {
      co_return net::IoResult{asio::error::message_size, 0};
    }
    bytes_.append(static_cast<const char*>(first.data()), first.size());
    bytes_.append(static_cast<const char*>(second.data()), second.size());
    co_return net::IoResult{{}, n};
  }
  asio::awaitable<void> shutdown() override { co_return; }
  void close() override {}
  bool is_open() const override { return true; }
  bool input_pending() override { return false; }
  // As read_some: the "client" of a batch line has nothing more to say (readable at once, and
  // reading gives eof), exactly what a read-based watch saw before.
  asio::awaitable<net::error_code> wait_readable(std::chrono::steady_clock::duration) override {
    co_return net::error_code{};
  }
  bool can_read_now() const override { return false; }
  net::IoResult read_now(asio::mutable_buffer) override {
    return net::IoResult{asio::error::eof, 0};
  }
  void expires_after(std::chrono::steady_clock::duration) override {}
  void expires_never() override {}
  asio::any_io_executor get_executor() override { return socket_.get_executor(); }
  net::tcp::socket& socket() override { return socket_; }

  const std::string& bytes() const { return bytes_; }

 private:
  net::tcp::socket socket_;
  std::size_t limit_;
  std::string bytes_;
};

struct Captured {
  unsigned status = 0;
  std::string body;
};

std::optional<Captured> parse_captured(const std::string& bytes) {
  http::response_parser<http::string_body> parser;
  parser.eager(true);
  parser.body_limit(bytes.size() + 1);
  boost::beast::error_code ec;
  parser.put(asio::buffer(bytes), ec);
  if (ec && ec != http::error::need_more) {
    return std::nullopt;
  }
  if (!parser.is_done()) {
    parser.put_eof(ec);
    if (ec) {
      return std::nullopt;
    }
  }
  Captured c;
  c.status = parser.get().result_int();
  c.body = std::move(parser.get().body());
  return c;
}

std::string hex(const unsigned char* data, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(digits[data[i] >> 4]);
    out.push_back(digits[data[i] & 15]);
  }
  return out;
}

// The value of `name` in a query string, percent-decoding left out (ids and numbers only).
std::string query_param(std::string_view target, std::string_view name) {
  auto q = target.find('?');
  if (q == std::string_view::npos) {
    return {};
  }
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    auto amp = rest.find('&');
    std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    auto eq = pair.find('=');
    if (pair.substr(0, eq) == name) {
      return eq == std::string_view::npos ? std::string() : std::string(pair.substr(eq + 1));
    }
  }
  return {};
}

// limit in [1, 100], 20 when absent (OpenAI's); nullopt when malformed.
std::optional<int> list_limit(std::string_view target, int fallback, int max) {
  std::string text = query_param(target, "limit");
  if (text.empty()) {
    return fallback;
  }
  int value = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || p != text.data() + text.size() || value < 1 || value > max) {
    return std::nullopt;
  }
  return value;
}

template <typename T, typename F>
json page_json(const std::vector<T>& items, bool has_more, F&& to_json) {
  json data = json::array();
  for (const auto& item : items) {
    data.push_back(to_json(item));
  }
  json page = {{"object", "list"}, {"data", std::move(data)}, {"has_more", has_more}};
  page["first_id"] = items.empty() ? json(nullptr) : json(items.front().id);
  page["last_id"] = items.empty() ? json(nullptr) : json(items.back().id);
  return page;
}

UnixMs backoff_ms(const config::BatchConfig& c, int attempts) {
  UnixMs base = c.retry_backoff.count();
  for (int i = 1; i < attempts && base < 60'000; ++i) {
    base *= 2;
  }
  return std::min<UnixMs>(base, 60'000);
}

}  // namespace

std::string owner_name(const net::Request& head, bool keys_configured) {
  if (!keys_configured) {
    return "default";
  }
  std::string_view key(head[http::field::authorization].data(),
                       head[http::field::authorization].size());
  if (key.substr(0, 7) == "Bearer ") {
    key.remove_prefix(7);
  } else {
    key = std::string_view(head["x-api-key"].data(), head["x-api-key"].size());
  }
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), digest);
  return "key-" + hex(digest, 8);
}

BatchService::BatchService(asio::any_io_executor executor, proxy::ProxyContext* ctx,
                           std::unique_ptr<storage::Storage> db, std::string instance)
    : executor_(std::move(executor)),
      ctx_(ctx),
      db_(std::move(db)),
      instance_(std::move(instance)),
      rng_(std::random_device{}()),
      metrics_(ctx->metrics->registry()) {}

void BatchService::update_metrics() {
  try {
    const UnixMs now = now_ms();
    metrics_.set_lines(db_->count_lines_by_state(now));
    metrics_.set_batches(db_->count_batches_by_status());
    std::vector<metrics::BatchMetrics::Progress> progress;
    for (const auto& batch : db_->active_batches()) {
      if (batch.status != BatchStatus::in_progress) {
        continue;
      }
      auto counts = db_->count_lines(batch.id, now);
      progress.push_back({batch.id, static_cast<double>(counts.pending + counts.leased),
                          static_cast<double>(std::max<UnixMs>(batch.expires_at - now, 0)) / 1000});
    }
    metrics_.set_progress(progress);
  } catch (const std::exception& e) {
    log::error("batch metrics: storage failed", {{"error", e.what()}});
  }
}

BatchService::~BatchService() = default;

storage::UnixMs BatchService::now_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string BatchService::new_id(const char* prefix) {
  unsigned char bytes[12];
  for (auto& b : bytes) {
    b = static_cast<unsigned char>(rng_());
  }
  return prefix + hex(bytes, sizeof bytes);
}

// Uploads left `uploading` (invisible, but their chunks take space): by a dead gateway, or by
// an upload whose removal failed with the storage. With SQLite (one gateway per file) every one
// found at start is such a leftover. Otherwise, and hourly, only uploads begun over a day ago
// are removed: one may still be arriving (at the defaults an upload may take about 50 minutes,
// the body timeout plus one more per 4 MiB of a 200 MB file), here or at another gateway of a
// shared database.
void BatchService::sweep_abandoned_uploads(bool at_start) {
  constexpr storage::UnixMs kDayMs = 24 * 3600 * 1000;
  const auto now = std::chrono::steady_clock::now();
  if (!at_start && now - last_sweep_ < std::chrono::hours(1)) {
    return;
  }
  last_sweep_ = now;
  const storage::UnixMs before = at_start && !db_->shared() ? now_ms() + 1 : now_ms() - kDayMs;
  if (auto n = db_->delete_abandoned_uploads(before); n > 0) {
    log::info("removed uploads a previous run left unfinished", {{"files", n}});
  }
}

void BatchService::start() {
  if (!db_->shared()) {
    if (auto n = db_->release_all_leases(); n > 0) {
      log::info("batch lines of the previous run are pending again", {{"lines", n}});
    }
  }
  sweep_abandoned_uploads(true);
  timer_ = std::make_unique<asio::steady_timer>(executor_);
  asio::co_spawn(executor_, run_loop(), asio::detached);
}

void BatchService::stop() {
  stopped_ = true;
  if (timer_) {
    timer_->cancel();
  }
}

void BatchService::wake() {
  woken_ = true;
  if (timer_) {
    timer_->cancel();
  }
}

asio::awaitable<void> BatchService::run_loop() {
  while (!stopped_) {
    woken_ = false;
    try {
      tick();
    } catch (const std::exception& e) {
      log::error("batch runner: storage failed", {{"error", e.what()}});
    }
    if (woken_ || stopped_) {
      continue;
    }
    timer_->expires_after(ctx_->configs->current().batch.poll_interval);
    co_await timer_->async_wait(asio::as_tuple(asio::use_awaitable));
  }
}

std::size_t BatchService::running_of(const std::string& batch_id) const {
  auto lo = running_.lower_bound({batch_id, INT64_MIN});
  std::size_t n = 0;
  for (auto it = lo; it != running_.end() && it->first.first == batch_id; ++it) {
    ++n;
  }
  return n;
}

void BatchService::tick() {
  auto config = ctx_->configs->snapshot();
  renew_leases(*config);
  sweep_abandoned_uploads(false);
  const UnixMs now = now_ms();
  for (const auto& batch : db_->active_batches()) {
    switch (batch.status) {
      case BatchStatus::validating:
        if (!validating_.contains(batch.id)) {
          validating_.insert(batch.id);
          asio::co_spawn(executor_, validate(batch), asio::detached);
        }
        break;
      case BatchStatus::in_progress:
        if (now >= batch.expires_at) {
          expire(batch);
        } else {
          fill(batch, *config);
        }
        break;
      case BatchStatus::cancelling:
        if (running_of(batch.id) == 0) {
          finalize(batch, BatchStatus::cancelling, BatchStatus::cancelled);
        }
        break;
      case BatchStatus::finalizing:
        finalize(batch, BatchStatus::finalizing, BatchStatus::completed);
        break;
      default:
        break;
    }
  }
}

void BatchService::renew_leases(const config::Config& config) {
  const UnixMs lease = config.batch.lease_timeout.count();
  const UnixMs now = now_ms();
  for (auto& [key, running] : running_) {
    if (running.lease_until - now < lease / 2) {
      running.lease_until = now + lease;
      db_->renew_lease(key.first, key.second, instance_, running.lease_until);
    }
  }
}

void BatchService::fill(const BatchRecord& batch, const config::Config& config) {
  if (stopped_) {
    return;
  }
  const auto& c = config.batch;
  std::size_t room = c.max_in_flight > running_.size() ? c.max_in_flight - running_.size() : 0;
  const std::size_t mine = running_of(batch.id);
  if (c.slots_per_batch > 0) {
    room = std::min<std::size_t>(room, c.slots_per_batch > mine ? c.slots_per_batch - mine : 0);
  }
  if (room == 0) {
    return;
  }
  const UnixMs now = now_ms();
  auto lines = db_->claim_lines(batch.id, instance_, now, now + c.lease_timeout.count(),
                                static_cast<int>(room));
  if (lines.empty()) {
    if (mine == 0) {
      auto counts = db_->count_lines(batch.id, now);
      if (counts.pending == 0 && counts.leased == 0) {
        finalize(batch, BatchStatus::in_progress, BatchStatus::completed);
      }
    }
    return;
  }
  auto shared = ctx_->configs->snapshot();
  for (auto& line : lines) {
    running_[{batch.id, line.line_no}] = Running{line.lease_expires_at};
    asio::co_spawn(executor_, run_line(batch, std::move(line), shared), asio::detached);
  }
}

asio::awaitable<void> BatchService::run_line(BatchRecord batch, storage::Line line,
                                             std::shared_ptr<const config::Config> config) {
  const LineKey key{batch.id, line.line_no};
  struct Done {
    BatchService* self;
    LineKey key;
    ~Done() {
      self->running_.erase(key);
      self->wake();
    }
  } done{this, key};

  const proxy::ProxiedRoute* route = proxy::find_proxied(batch.endpoint);
  const std::string result_id =
      "batch_req_" + batch.id.substr(batch.id.find('_') + 1) + "_" + std::to_string(line.line_no);
  auto record = [&](bool ok, std::string text) {
    metrics_.line_done(ok ? "succeeded" : "failed");
    try {
      if (db_->record_result(batch.id, {line.line_no, ok, std::move(text)}, now_ms()) ==
          storage::RecordOutcome::already_recorded) {
        log::debug("batch line already had its result",
                   {{"batch", batch.id}, {"line", line.line_no}});
      }
    } catch (const std::exception& e) {
      log::error("batch result not recorded (the line runs again)", {{"error", e.what()}});
    }
  };
  // As for interactive requests (client_session): under expected_finish the same pass gives the
  // prompt's blocks, so batch lines that share instructions go where those are cached.
  const bool want_blocks = ctx_->broker->scheduler().wants_prompt_blocks();
  openai::PromptBlocks blocks;
  auto inspected =
      openai::inspect_request(route ? route->api : openai::Api::openai, "application/json",
                              line.body, want_blocks ? &blocks : nullptr, ctx_->prompt_key);
  if (route == nullptr || std::holds_alternative<openai::InspectError>(inspected)) {
    record(false, error_line(result_id, line.custom_id, "invalid_request",
                             route ? std::get<openai::InspectError>(inspected).message
                                   : "unsupported endpoint"));
    co_return;
  }
  openai::RequestInfo info = std::get<openai::RequestInfo>(inspected);
  info.stream = false;
  info.include_usage = false;

  net::Request request{http::verb::post, batch.endpoint, 11};
  request.set(http::field::content_type, "application/json");
  request.body() = line.body;
  request.prepare_payload();

  proxy::UpstreamRequest up;
  up.client = &request;
  up.body = &line.body;
  up.info = &info;
  up.api = route->api;
  const auto& routing = config->routing;
  up.deadline = Clock::now() + routing.request_timeout;
  const std::string request_id = new_request_id(rng_);

  unsigned last_status = 0;
  std::string last_detail = "no replica answered";
  std::vector<proxy::ReplicaId> tried;
  unsigned retries_used = 0;
  std::optional<Captured> answer;
  while (!answer) {
    const auto left = up.deadline - Clock::now();
    if (left <= Clock::duration::zero() || stopped_) {
      break;
    }
    scheduling::Request sreq;
    sreq.exclude = tried;
    sreq.priority = kBatchPriority;
    sreq.sheddable = false;
    sreq.tenant = batch.owner;
    sreq.group = batch.id;
    if (want_blocks) {
      sreq.prompt_blocks = blocks.hashes;  // copied: a retry sends the same prompt
      sreq.prompt_bytes = blocks.bytes;
      sreq.max_tokens = info.max_tokens;
    }
    const auto window = std::chrono::milliseconds(std::max<UnixMs>(batch.expires_at - now_ms(), 1));
    auto acquired = co_await ctx_->broker->acquire(info.model, std::move(sreq),
                                                   std::min<Clock::duration>(left, window));
    if (acquired.error != proxy::AcquireError::none) {
      last_detail = acquired.error == proxy::AcquireError::unknown_model
                        ? "the model is no longer configured"
                        : "no slot became free in time";
      break;
    }
    proxy::SlotLease lease = std::move(acquired.lease);
    std::shared_ptr<fleet::Replica> replica = ctx_->registry->find(lease.replica());
    if (replica == nullptr) {
      tried.push_back(lease.replica());
      if (retries_used++ >= routing.retries) {
        break;
      }
      continue;
    }
    ++replica->requests;
    bool fresh_retry_used = false;
    bool next_replica = false;
    while (!answer && !next_replica) {
      CaptureConn capture(executor_, config->upstream.max_response_bytes + 64 * 1024);
      net::ResponseWriter writer(capture, request_id, false, std::chrono::seconds(60));
      auto result = co_await proxy::exchange(ctx_, config.get(), replica.get(), &up,
                                             !fresh_retry_used, &writer);
      if (result.kind != proxy::ExchangeResult::Kind::failed) {
        ctx_->fleet->traffic_success(replica->id);
        answer = parse_captured(capture.bytes());
        if (!answer) {
          last_detail = "the answer could not be read back";
          next_replica = true;
        }
        break;
      }
      proxy::FailedAttempt facts = result.failure;
      facts.content_sent = false;
      facts.fresh_retry_used = fresh_retry_used;
      facts.attempts_left = retries_used < routing.retries;
      facts.deadline_passed = Clock::now() >= up.deadline;
      const auto decision = proxy::retry_decision(facts);
      last_status = result.upstream_status;
      last_detail =
          result.detail.empty() ? std::string(proxy::to_string(facts.error)) : result.detail;
      if (decision.action == proxy::RetryAction::retry_fresh_connection) {
        fresh_retry_used = true;
        continue;
      }
      if (decision.counts_against_replica) {
        ++replica->failures;
        ctx_->fleet->traffic_failure(replica->id);
      }
      if (decision.action == proxy::RetryAction::fail) {
        break;
      }
      ++retries_used;
      tried.push_back(replica->id);
      next_replica = true;
    }
    if (!answer && !next_replica) {
      break;
    }
  }

  if (stopped_) {
    co_return;  // the lease lapses (or is released at the next start): the line runs again
  }
  const bool transient = !answer || answer->status == 429 || answer->status >= 500;
  if (transient && line.attempts < static_cast<int>(config->batch.max_attempts)) {
    metrics_.line_done("retried");
    try {
      db_->release_line(batch.id, line.line_no, instance_,
                        now_ms() + backoff_ms(config->batch, line.attempts));
    } catch (const std::exception& e) {
      log::error("batch line not released (its lease will lapse)", {{"error", e.what()}});
    }
    co_return;
  }
  if (answer) {
    const bool ok = answer->status >= 200 && answer->status < 300;
    record(ok, output_line(result_id, line.custom_id, answer->status, request_id, answer->body));
  } else {
    std::string message =
        "the request failed after " + std::to_string(line.attempts) + " run(s): " + last_detail;
    if (last_status != 0) {
      message += " (HTTP " + std::to_string(last_status) + ")";
    }
    record(false, error_line(result_id, line.custom_id, "upstream_error", message));
  }
}

asio::awaitable<void> BatchService::validate(BatchRecord batch) {
  struct Done {
    BatchService* self;
    std::string id;
    ~Done() {
      self->validating_.erase(id);
      self->wake();
    }
  } done{this, batch.id};
  try {
    auto config = ctx_->configs->snapshot();
    LineValidator validator(batch.endpoint, [&](const std::string& model) {
      return config->find_model(model) != nullptr;
    });
    LineSplitter splitter;
    std::vector<LineError> errors;
    std::vector<storage::LineInput> pending;
    std::int64_t file_line = 0;
    bool too_many = false;
    auto take = [&](const std::string& text) {
      ++file_line;
      auto checked = validator.check(text, file_line);
      if (auto* error = std::get_if<LineError>(&checked)) {
        if (errors.size() < kMaxReportedErrors) {
          errors.push_back(std::move(*error));
        }
      } else if (auto* input = std::get_if<storage::LineInput>(&checked)) {
        if (validator.accepted() > static_cast<std::int64_t>(config->batch.max_lines)) {
          too_many = true;
        } else if (errors.empty()) {
          pending.push_back(std::move(*input));
        }
      }
    };
    auto flush = [&] {
      if (!pending.empty() && errors.empty() && !too_many) {
        db_->add_lines(batch.id, pending);
      }
      pending.clear();
    };
    std::int64_t seq = -1;
    for (;;) {
      auto chunks = db_->read_chunks(batch.input_file_id, seq, 1);
      if (chunks.empty()) {
        break;
      }
      seq = chunks.back().seq;
      for (const auto& text : splitter.feed(chunks.back().data)) {
        take(text);
        if (pending.size() >= kLinesPerInsert) {
          flush();
        }
      }
      flush();
      // One piece at a time: the io thread serves other work between pieces.
      co_await asio::post(executor_, asio::use_awaitable);
      if (stopped_) {
        co_return;
      }
    }
    if (auto last = splitter.finish()) {
      take(*last);
    }
    flush();
    if (too_many) {
      errors.insert(errors.begin(),
                    LineError{"too_many_requests",
                              "The input file has more than batch.max_lines (" +
                                  std::to_string(config->batch.max_lines) + ") requests.",
                              "", 0});
    } else if (errors.empty() && validator.accepted() == 0) {
      errors.push_back({"empty_file", "The input file has no requests.", "", 0});
    }
    if (!errors.empty()) {
      db_->set_errors(batch.id, errors_json(errors).dump());
      db_->transition(batch.id, BatchStatus::validating, BatchStatus::failed, now_ms());
      log::info("batch failed validation", {{"batch", batch.id}, {"errors", errors.size()}});
      co_return;
    }
    if (config->batch.slots_per_batch > 0) {
      ctx_->broker->set_group_limit(batch.id, config->batch.slots_per_batch);
    }
    db_->transition(batch.id, BatchStatus::validating, BatchStatus::in_progress, now_ms());
    log::info("batch in progress", {{"batch", batch.id}, {"lines", validator.accepted()}});
  } catch (const std::exception& e) {
    log::error("batch validation failed on storage", {{"batch", batch.id}, {"error", e.what()}});
  }
}

void BatchService::expire(const BatchRecord& batch) {
  const UnixMs now = now_ms();
  std::int64_t after = -1;
  const std::string prefix = "batch_req_" + batch.id.substr(batch.id.find('_') + 1) + "_";
  for (;;) {
    auto lines = db_->unfinished_lines(batch.id, after, kResultsPerRead);
    if (lines.empty()) {
      break;
    }
    for (const auto& line : lines) {
      db_->record_result(
          batch.id,
          {line.line_no, false,
           error_line(prefix + std::to_string(line.line_no), line.custom_id, "batch_expired",
                      "This request could not be executed before the completion window "
                      "expired.")},
          now);
      after = line.line_no;
    }
  }
  finalize(batch, BatchStatus::in_progress, BatchStatus::expired);
}

void BatchService::finalize(const BatchRecord& batch, BatchStatus from, BatchStatus to) {
  const UnixMs now = now_ms();
  if (from == BatchStatus::in_progress && to == BatchStatus::completed) {
    if (!db_->transition(batch.id, from, BatchStatus::finalizing, now)) {
      return;  // cancelled meanwhile, or another gateway finalizes it
    }
    from = BatchStatus::finalizing;
  }
  // Output and error files: records over the results rows, sized by reading them once.
  std::string ids[2];
  for (int kind = 0; kind < 2; ++kind) {
    const bool ok = kind == 0;
    std::int64_t bytes = 0;
    std::int64_t rows = 0;
    std::int64_t after = -1;
    for (;;) {
      auto page = db_->read_results(batch.id, ok, after, kResultsPerRead);
      if (page.empty()) {
        break;
      }
      for (const auto& r : page) {
        bytes += static_cast<std::int64_t>(r.line_json.size()) + 1;
      }
      rows += static_cast<std::int64_t>(page.size());
      after = page.back().line_no;
    }
    if (rows == 0 && !ok) {
      continue;  // no error file without errors
    }
    const std::string id = "file-" + batch.id.substr(batch.id.find('_') + 1) + (ok ? "o" : "e");
    if (!db_->get_file("", id)) {
      storage::FileRecord file;
      file.id = id;
      file.owner = batch.owner;
      file.filename = batch.id + (ok ? "_output.jsonl" : "_error.jsonl");
      file.purpose = "batch_output";
      file.kind = ok ? storage::FileKind::batch_output : storage::FileKind::batch_error;
      file.state = storage::FileState::ready;
      file.batch_id = batch.id;
      file.bytes = bytes;
      file.created_at = now;
      db_->create_file(file);
    }
    ids[kind] = id;
  }
  db_->set_result_files(batch.id, ids[0], ids[1]);
  if (db_->transition(batch.id, from, to, now)) {
    // A removed cap may grant slots to this batch's waiting lines: wake them.
    ctx_->broker->set_group_limit(batch.id, std::nullopt);
    log::info("batch ended", {{"batch", batch.id}, {"status", storage::to_string(to)}});
  }
}

// ---- the API ----

json BatchService::batch_object(const BatchRecord& batch) {
  return batch_json(batch, db_->count_lines(batch.id, now_ms()));
}

asio::awaitable<bool> BatchService::handle(net::ServerRequest r, ApiRoute route,
                                           std::string owner) {
  auto& writer = *r.writer;
  try {
    if (route == ApiRoute::files) {
      co_return co_await files_api(r, owner);
    }
    co_return co_await batches_api(r, owner);
  } catch (const storage::Error& e) {
    log::error("batch API: storage failed", {{"error", e.what()}});
  }
  if (!writer.head_sent()) {
    if (r.body != nullptr && !r.body->complete()) {
      writer.refuse_keep_alive();  // the session closes after an unread body: say so
    }
    co_await writer.send_error(500, "the gateway's batch storage failed", "storage_error");
  }
  co_return writer.keep_alive() && writer.finished();
}

asio::awaitable<bool> BatchService::files_api(net::ServerRequest r, std::string owner) {
  auto& writer = *r.writer;
  const auto& req = *r.request;
  const std::string_view target(req.target().data(), req.target().size());
  const std::string path(proxy::target_path(target));
  const auto method = req.method();
  auto finish = [&] { return writer.keep_alive() && writer.finished(); };
  if (path == "/v1/files") {
    if (method == http::verb::post) {
      co_return co_await upload(r, owner);
    }
    if (method == http::verb::get) {
      auto limit = list_limit(target, 10000, 10000);
      if (!limit) {
        co_await writer.send_error(400, "limit must be a whole number from 1 to 10000",
                                   "invalid_request", {}, "limit");
        co_return finish();
      }
      auto files = db_->list_files(owner, query_param(target, "purpose"),
                                   query_param(target, "after"), *limit + 1);
      const bool more = files.size() > static_cast<std::size_t>(*limit);
      files.resize(std::min(files.size(), static_cast<std::size_t>(*limit)));
      co_await writer.send_full(200, "application/json", page_json(files, more, file_json).dump());
      co_return finish();
    }
    co_await writer.send_error(405, "use GET or POST for /v1/files", "method_not_allowed");
    co_return finish();
  }
  std::string id = path.substr(std::string_view("/v1/files/").size());
  bool content = false;
  if (auto slash = id.find('/'); slash != std::string::npos) {
    if (id.substr(slash) != "/content") {
      co_await writer.send_error(404, "no route for " + path, "not_found");
      co_return finish();
    }
    id.resize(slash);
    content = true;
  }
  auto file = db_->get_file(owner, id);
  if (!file) {
    co_await writer.send_error(404, "No such File object: " + id, "not_found", {}, "id");
    co_return finish();
  }
  if (content) {
    if (method != http::verb::get) {
      co_await writer.send_error(405, "use GET for " + path, "method_not_allowed");
      co_return finish();
    }
    co_return co_await send_content(r, *file);
  }
  if (method == http::verb::get) {
    co_await writer.send_full(200, "application/json", file_json(*file).dump());
    co_return finish();
  }
  if (method == http::verb::delete_) {
    db_->delete_file(owner, id);
    json deleted = {{"id", id}, {"object", "file"}, {"deleted", true}};
    co_await writer.send_full(200, "application/json", deleted.dump());
    co_return finish();
  }
  co_await writer.send_error(405, "use GET or DELETE for " + path, "method_not_allowed");
  co_return finish();
}

asio::awaitable<bool> BatchService::upload(net::ServerRequest r, std::string owner) {
  auto& writer = *r.writer;
  const auto& req = *r.request;
  auto finish = [&] { return writer.keep_alive() && writer.finished(); };
  // An answer before the whole body was read ends the connection (the session closes it).
  auto body_unread = [&] { return r.body != nullptr && !r.body->complete(); };
  auto config = ctx_->configs->snapshot();
  const auto boundary = multipart_boundary(std::string_view(req[http::field::content_type].data(),
                                                            req[http::field::content_type].size()));
  if (!boundary.boundary) {
    if (body_unread()) {
      writer.refuse_keep_alive();
    }
    co_await writer.send_error(400, boundary.error, "invalid_request");
    co_return finish();
  }
  storage::FileRecord file;
  file.id = new_id("file-");
  file.owner = owner;
  file.purpose = "batch";
  file.created_at = now_ms();
  bool created = false;
  std::int64_t seq = 0;
  // The record is created with the first chunk (once the file part's name is known), in state
  // uploading: invisible until finish_upload, removed if the upload does not complete.
  UploadReader reader(
      *boundary.boundary, {config->batch.max_file_bytes, config->batch.max_file_lines, kChunkBytes},
      [&](std::string chunk) {
        if (!created) {
          file.filename = reader.filename().empty() ? "upload.jsonl" : reader.filename();
          db_->create_file(file);
          created = true;
        }
        db_->append_chunk(file.id, seq++, chunk);
      });
  // Never throws: it runs on the way out of a storage failure too. What it cannot delete the
  // hourly sweep (sweep_abandoned_uploads) removes.
  auto discard = [&] {
    if (created) {
      created = false;
      try {
        db_->delete_file(owner, file.id);
      } catch (const std::exception& e) {
        log::error("an unfinished upload could not be removed; the sweep will",
                   {{"file", file.id}, {"error", e.what()}});
      }
    }
  };
  std::optional<UploadReader::Error> error;
  try {
    if (r.body == nullptr) {
      error = reader.feed(req.body());
      if (!error) {
        error = reader.finish();
      }
    } else {
      for (;;) {
        auto piece = co_await r.body->next();
        if (piece.failure) {
          // The client left, sent a malformed or over-long chunked body, or was too slow.
          discard();
          log::info("upload ended before its body did",
                    {{"file", file.id},
                     {"received_bytes", r.body->received()},
                     {"reason", std::string(net::failure_reason(*piece.failure))}});
          if (auto reply = r.body->failure_reply(*piece.failure)) {
            writer.refuse_keep_alive();
            co_await writer.send_reply(*reply);
          }
          co_return false;
        }
        const std::int64_t stored = seq;
        error = reader.feed(piece.data);
        if (error) {
          break;
        }
        if (piece.end) {
          error = reader.finish();
          break;
        }
        if (seq != stored) {
          // A chunk went to storage: let the io thread serve others before the next.
          co_await asio::post(executor_, asio::use_awaitable);
        }
      }
    }
    if (!error) {
      if (!created) {  // an empty file part: a record without chunks
        file.filename = reader.filename().empty() ? "upload.jsonl" : reader.filename();
        db_->create_file(file);
        created = true;
      }
      db_->finish_upload(file.id, static_cast<std::int64_t>(reader.bytes()));
    }
  } catch (...) {
    discard();
    throw;
  }
  if (error) {
    discard();
    if (body_unread()) {
      writer.refuse_keep_alive();
    }
    co_await writer.send_error(error->status, error->message, error->code, {}, error->param);
    co_return finish();
  }
  file.state = storage::FileState::ready;
  file.bytes = static_cast<std::int64_t>(reader.bytes());
  log::info("file uploaded", {{"file", file.id},
                              {"bytes", reader.bytes()},
                              {"lines", reader.lines()},
                              {"streamed", r.body != nullptr}});
  co_await writer.send_full(200, "application/json", file_json(file).dump());
  co_return finish();
}

asio::awaitable<bool> BatchService::send_content(net::ServerRequest r, storage::FileRecord file) {
  auto& writer = *r.writer;
  if (!co_await writer.begin_body(200, "application/octet-stream", std::nullopt)) {
    co_return false;
  }
  if (file.kind == storage::FileKind::upload) {
    std::int64_t seq = -1;
    for (;;) {
      auto chunks = db_->read_chunks(file.id, seq, 1);
      if (chunks.empty()) {
        break;
      }
      seq = chunks.back().seq;
      if (!co_await writer.send_chunk(std::move(chunks.back().data))) {
        co_return false;
      }
    }
  } else {
    const bool ok = file.kind == storage::FileKind::batch_output;
    std::int64_t after = -1;
    for (;;) {
      auto page = db_->read_results(file.batch_id, ok, after, kResultsPerRead);
      if (page.empty()) {
        break;
      }
      std::string piece;
      for (const auto& result : page) {
        piece += result.line_json;
        piece += '\n';
      }
      after = page.back().line_no;
      if (!co_await writer.send_chunk(std::move(piece))) {
        co_return false;
      }
    }
  }
  co_await writer.end_stream();
  co_return writer.keep_alive() && writer.finished();
}

asio::awaitable<bool> BatchService::batches_api(net::ServerRequest r, std::string owner) {
  auto& writer = *r.writer;
  const auto& req = *r.request;
  const std::string_view target(req.target().data(), req.target().size());
  const std::string path(proxy::target_path(target));
  const auto method = req.method();
  auto finish = [&] { return writer.keep_alive() && writer.finished(); };
  if (path == "/v1/batches") {
    if (method == http::verb::post) {
      co_return co_await create_batch(r, owner);
    }
    if (method == http::verb::get) {
      auto limit = list_limit(target, 20, 100);
      if (!limit) {
        co_await writer.send_error(400, "limit must be a whole number from 1 to 100",
                                   "invalid_request", {}, "limit");
        co_return finish();
      }
      auto batches = db_->list_batches(owner, query_param(target, "after"), *limit + 1);
      const bool more = batches.size() > static_cast<std::size_t>(*limit);
      batches.resize(std::min(batches.size(), static_cast<std::size_t>(*limit)));
      co_await writer.send_full(200, "application/json",
                                page_json(batches, more, [this](const BatchRecord& b) {
                                  return batch_object(b);
                                }).dump());
      co_return finish();
    }
    co_await writer.send_error(405, "use GET or POST for /v1/batches", "method_not_allowed");
    co_return finish();
  }
  std::string id = path.substr(std::string_view("/v1/batches/").size());
  bool cancel = false;
  if (auto slash = id.find('/'); slash != std::string::npos) {
    if (id.substr(slash) != "/cancel") {
      co_await writer.send_error(404, "no route for " + path, "not_found");
      co_return finish();
    }
    id.resize(slash);
    cancel = true;
  }
  auto batch = db_->get_batch(owner, id);
  if (!batch) {
    co_await writer.send_error(404, "No such Batch object: " + id, "not_found", {}, "id");
    co_return finish();
  }
  if (cancel) {
    if (method != http::verb::post) {
      co_await writer.send_error(405, "use POST for " + path, "method_not_allowed");
      co_return finish();
    }
    const UnixMs now = now_ms();
    if (!db_->transition(id, BatchStatus::in_progress, BatchStatus::cancelling, now) &&
        !db_->transition(id, BatchStatus::validating, BatchStatus::cancelling, now)) {
      batch = db_->get_batch(owner, id);
      if (batch->status != BatchStatus::cancelling && batch->status != BatchStatus::cancelled) {
        co_await writer.send_error(409,
                                   "Cannot cancel a batch with status " +
                                       std::string(storage::to_string(batch->status)) + ".",
                                   "invalid_request");
        co_return finish();
      }
    }
    wake();
    batch = db_->get_batch(owner, id);
  } else if (method != http::verb::get) {
    co_await writer.send_error(405, "use GET for " + path, "method_not_allowed");
    co_return finish();
  }
  co_await writer.send_full(200, "application/json", batch_object(*batch).dump());
  co_return finish();
}

asio::awaitable<bool> BatchService::create_batch(net::ServerRequest r, std::string owner) {
  auto& writer = *r.writer;
  auto finish = [&] { return writer.keep_alive() && writer.finished(); };
  json body = json::parse(r.request->body(), nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    co_await writer.send_error(400, "the body must be a JSON object", "invalid_request");
    co_return finish();
  }
  auto str = [&](const char* key) -> std::string {
    auto it = body.find(key);
    return it != body.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const std::string input_file_id = str("input_file_id");
  const std::string endpoint = str("endpoint");
  const std::string window = str("completion_window");
  if (input_file_id.empty()) {
    co_await writer.send_error(400, "input_file_id is required", "invalid_request", {},
                               "input_file_id");
    co_return finish();
  }
  if (!batch_endpoint_supported(endpoint)) {
    co_await writer.send_error(
        400,
        "endpoint must be one of /v1/chat/completions, /v1/completions, /v1/embeddings, "
        "/v1/responses",
        "invalid_request", {}, "endpoint");
    co_return finish();
  }
  auto window_ms = parse_completion_window(window);
  if (!window_ms) {
    co_await writer.send_error(400, "completion_window must be a duration such as 24h",
                               "invalid_request", {}, "completion_window");
    co_return finish();
  }
  auto metadata = body.find("metadata");
  if (metadata != body.end() && !metadata->is_null() && !metadata->is_object()) {
    co_await writer.send_error(400, "metadata must be an object", "invalid_request", {},
                               "metadata");
    co_return finish();
  }
  auto file = db_->get_file(owner, input_file_id);
  if (!file || file->kind != storage::FileKind::upload) {
    co_await writer.send_error(404, "No such File object: " + input_file_id, "not_found", {},
                               "input_file_id");
    co_return finish();
  }
  BatchRecord batch;
  batch.id = new_id("batch_");
  batch.owner = owner;
  batch.input_file_id = input_file_id;
  batch.endpoint = endpoint;
  batch.completion_window = window;
  batch.metadata_json = metadata == body.end() ? "null" : metadata->dump();
  batch.created_at = now_ms();
  batch.expires_at = batch.created_at + *window_ms;
  db_->create_batch(batch);
  wake();
  co_await writer.send_full(200, "application/json",
                            batch_json(batch, storage::LineCounts{}).dump());
  co_return finish();
}

}  // namespace fg::batch
