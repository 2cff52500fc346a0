#pragma once

// The Files and Batches API on the public listener and the batch runner (docs/batch.md): an
// asynchronous shell over the storage interface and the pure parts in batch_format.hpp. Batch
// lines run through the same slot broker, scheduler and upstream exchange as interactive
// requests, in the lowest priority band (never shed), tenant = the owner, group = the batch id.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/net/http_session.hpp"
#include "orchestrator/metrics/batch_metrics.hpp"
#include "orchestrator/proxy/context.hpp"
#include "orchestrator/storage/storage.hpp"

namespace fg::batch {

// The band batch lines wait in: below every interactive request (parse_priority's lowest).
inline constexpr std::int32_t kBatchPriority = -1000;

enum class ApiRoute { files, batches };

class BatchService {
 public:
  // ctx and db outlive the service; instance names this gateway in line leases.
  BatchService(boost::asio::any_io_executor executor, proxy::ProxyContext* ctx,
               std::unique_ptr<storage::Storage> db, std::string instance);
  ~BatchService();

  // Starts the runner (releases the previous run's leases first when the database is not shared).
  void start();
  // Stops claiming and wakes the runner so that it ends; in-flight lines end with the io_context.
  void stop();

  // Destroys the runner's timer while the io_context still exists (the owner's destructor).
  void close_timer() {
    stopped_ = true;
    timer_.reset();
  }

  // Serves one request under /v1/files or /v1/batches for the key's owner name.
  boost::asio::awaitable<bool> handle(net::ServerRequest r, ApiRoute route, std::string owner);

  storage::Storage& storage() { return *db_; }
  // Refreshes the batch gauges from the storage (before a scrape).
  void update_metrics();
  // Lines running now (bounded by batch.max_in_flight).
  std::size_t in_flight() const { return running_.size(); }

 private:
  struct Running {
    storage::UnixMs lease_until = 0;
  };
  using LineKey = std::pair<std::string, std::int64_t>;

  boost::asio::awaitable<void> run_loop();
  void tick();
  void wake();
  void fill(const storage::BatchRecord& batch, const config::Config& config);
  boost::asio::awaitable<void> validate(storage::BatchRecord batch);
  boost::asio::awaitable<void> run_line(storage::BatchRecord batch, storage::Line line,
                                        std::shared_ptr<const config::Config> config);
  void finalize(const storage::BatchRecord& batch, storage::BatchStatus from,
                storage::BatchStatus to);
  void expire(const storage::BatchRecord& batch);
  void renew_leases(const config::Config& config);
  void sweep_abandoned_uploads(bool at_start);
  std::size_t running_of(const std::string& batch_id) const;

  // API
  boost::asio::awaitable<bool> files_api(net::ServerRequest r, std::string owner);
  boost::asio::awaitable<bool> batches_api(net::ServerRequest r, std::string owner);
  boost::asio::awaitable<bool> upload(net::ServerRequest r, std::string owner);
  boost::asio::awaitable<bool> send_content(net::ServerRequest r, storage::FileRecord file);
  boost::asio::awaitable<bool> create_batch(net::ServerRequest r, std::string owner);
  nlohmann::json batch_object(const storage::BatchRecord& batch);

  std::string new_id(const char* prefix);
  storage::UnixMs now_ms() const;

  boost::asio::any_io_executor executor_;
  proxy::ProxyContext* ctx_;
  std::unique_ptr<storage::Storage> db_;
  std::string instance_;
  std::mt19937_64 rng_;
  metrics::BatchMetrics metrics_;
  std::map<LineKey, Running> running_;
  std::set<std::string> validating_;
  std::unique_ptr<boost::asio::steady_timer> timer_;
  bool woken_ = false;
  bool stopped_ = false;
  std::chrono::steady_clock::time_point last_renew_{};
  std::chrono::steady_clock::time_point last_sweep_{};
};

// The most bytes an upload's body (POST /v1/files, multipart) may have: batch.max_file_bytes and
// room for the multipart framing and the other fields. The file part is held to
// batch.max_file_bytes itself while it streams.
inline std::uint64_t upload_body_limit(const config::BatchConfig& batch) {
  return batch.max_file_bytes + 64 * 1024;
}

// The owner name of a request's key: "key-" and 16 hex digits of its SHA-256 (never the key);
// "default" when the listener has no keys.
std::string owner_name(const net::Request& head, bool keys_configured);

}  // namespace fg::batch
