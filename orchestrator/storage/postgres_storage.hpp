#pragma once

#include <memory>
#include <optional>
#include <string>

#include "orchestrator/storage/postgres_client.hpp"
#include "orchestrator/storage/storage.hpp"

namespace fg::storage {

// The shared backend: one PostgreSQL database for any number of gateways (shared() is true).
// Lines are leased with `FOR UPDATE SKIP LOCKED` (two gateways never claim the same line at once,
// and neither waits for the other's claim) and a lease expiry (a dead gateway's lines are claimed
// again by the others once it passes); each line's one result is a primary key, so a result
// recorded twice (two gateways, or a retry after a lost answer) is kept once.
//
// The schema is created on the first start and checked on later ones (a version row; a newer
// one is refused), under an advisory lock so that gateways starting together do not race. Every
// method is one transaction, most of them one statement. A lost connection fails that call with
// Error and the next call connects again (a statement whose answer was lost may or may not have
// committed: the interface's compare-and-set and unique results make a repeat harmless).
// Blocking calls, by one thread at a time (storage.hpp). Each is a round trip to the server; when
// the caller is the io thread, every statement is capped at `statement_timeout_ms` (a lock or a
// stalled server fails the call instead of freezing the gateway), connects at 10 s, a vanished
// server is noticed within 30 s (keep-alives, TCP user timeout: postgres_client.cpp).
class PostgresStorage final : public Storage {
 public:
  // Connects and creates or checks the schema. Throws Error (the URL's password never in it).
  explicit PostgresStorage(std::string url, int statement_timeout_ms = 10'000);
  ~PostgresStorage() override;
  PostgresStorage(const PostgresStorage&) = delete;
  PostgresStorage& operator=(const PostgresStorage&) = delete;

  std::string backend() const override { return "postgres"; }
  bool shared() const override { return true; }

  void create_file(const FileRecord& file) override;
  void append_chunk(const std::string& file_id, std::int64_t seq, const std::string& data) override;
  bool finish_upload(const std::string& file_id, std::int64_t bytes) override;
  std::optional<FileRecord> get_file(const std::string& owner, const std::string& id) override;
  std::vector<FileRecord> list_files(const std::string& owner, const std::string& purpose,
                                     const std::string& after, int limit) override;
  bool delete_file(const std::string& owner, const std::string& id) override;
  std::int64_t delete_abandoned_uploads(UnixMs created_before) override;
  std::vector<Chunk> read_chunks(const std::string& file_id, std::int64_t after_seq,
                                 int limit) override;

  void create_batch(const BatchRecord& batch) override;
  std::optional<BatchRecord> get_batch(const std::string& owner, const std::string& id) override;
  std::vector<BatchRecord> list_batches(const std::string& owner, const std::string& after,
                                        int limit) override;
  std::vector<BatchRecord> active_batches() override;
  bool transition(const std::string& id, BatchStatus from, BatchStatus to, UnixMs at) override;
  void set_errors(const std::string& id, const std::string& errors_json) override;
  void set_result_files(const std::string& id, const std::string& output_file_id,
                        const std::string& error_file_id) override;
  std::vector<std::int64_t> count_batches_by_status() override;

  void add_lines(const std::string& batch_id, const std::vector<LineInput>& lines) override;
  std::vector<Line> claim_lines(const std::string& batch_id, const std::string& owner, UnixMs now,
                                UnixMs lease_until, int limit) override;
  bool renew_lease(const std::string& batch_id, std::int64_t line_no, const std::string& owner,
                   UnixMs lease_until) override;
  bool release_line(const std::string& batch_id, std::int64_t line_no, const std::string& owner,
                    UnixMs not_before) override;
  std::int64_t release_all_leases() override;
  RecordOutcome record_result(const std::string& batch_id, const Result& result,
                              UnixMs at) override;
  std::vector<Line> unfinished_lines(const std::string& batch_id, std::int64_t after,
                                     int limit) override;
  LineCounts count_lines(const std::string& batch_id, UnixMs now) override;
  std::vector<Result> read_results(const std::string& batch_id, bool ok, std::int64_t after,
                                   int limit) override;
  std::vector<std::int64_t> count_lines_by_state(UnixMs now) override;

  // The schema version this build writes.
  static constexpr int kSchemaVersion = 1;

 private:
  // The connection, opened again after a loss.
  pg::Connection& conn();
  // Runs f(conn) and turns pg::Error into storage::Error (dropping a lost connection).
  template <class F>
  auto run(F&& f);
  void migrate();

  std::string url_;
  int statement_timeout_ms_;
  std::optional<pg::Connection> conn_;
};

}  // namespace fg::storage
