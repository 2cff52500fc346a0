#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include "replica-agent/core/context.hpp"
#include "replica-agent/model/download.hpp"

namespace fg::agent {

// Fetches model_file before the engine starts. A file already at path whose SHA-256 matches is
// used as it is. Otherwise it downloads into path + ".part", resuming from the part's size with
// a Range request after a dropped connection or a restart of the agent (a server that ignores
// Range sends the whole file, which then replaces the part), follows redirects (at most 5), and
// retries transient failures (connection errors, 5xx, 408, 429) with back-off (1 s doubling to
// 30 s). Once complete it checks the SHA-256 (state verifying) and renames the part to path
// (done), or deletes the part and fails naming both digests. A 4xx fails at once. Progress is
// in progress() for /health. Nothing blocks the io thread for long: the hash yields between
// 4 MiB pieces.
class ModelFetcher {
 public:
  ModelFetcher(boost::asio::any_io_executor executor, AgentContext* ctx);
  ~ModelFetcher();

  // done(true) once the file is in place, done(false) when it failed for good; on the io thread.
  void start(std::function<void(bool)> done);
  void stop();
  const model::Progress& progress() const { return progress_; }

 private:
  static boost::asio::awaitable<void> run(ModelFetcher* self);
  // One GET (following redirects) from the part's current size; returns whether the part is
  // now complete (then verify), or sets *failed for good.
  static boost::asio::awaitable<bool> fetch_once(ModelFetcher* self, bool* failed);
  static boost::asio::awaitable<std::string> hash_file(ModelFetcher* self, std::string path);
  void finish(bool ok);

  boost::asio::any_io_executor executor_;
  AgentContext* ctx_;
  model::Progress progress_;
  std::function<void(bool)> done_;
  boost::asio::cancellation_signal stop_;
  std::uint32_t failures_ = 0;
  bool stopped_ = false;
  std::mt19937_64 rng_;
};

}  // namespace fg::agent
