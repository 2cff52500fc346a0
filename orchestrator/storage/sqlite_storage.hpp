#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "orchestrator/storage/storage.hpp"

struct sqlite3;
struct sqlite3_stmt;

namespace fg::storage {

// The embedded backend: one SQLite file (WAL, a busy timeout, synchronous=NORMAL: a committed
// transaction survives the process being killed; a power cut may lose the last ones). Meant for one
// gateway per file (shared() is false); a second connection to the same file works (tests, tools)
// and is serialized by SQLite's lock.
class SqliteStorage final : public Storage {
 public:
  // Opens (creating it and its directory if needed) the database at `path`. Throws Error.
  explicit SqliteStorage(const std::string& path, int busy_timeout_ms = 5000);
  ~SqliteStorage() override;
  SqliteStorage(const SqliteStorage&) = delete;
  SqliteStorage& operator=(const SqliteStorage&) = delete;

  std::string backend() const override { return "sqlite"; }
  bool shared() const override { return false; }

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

 private:
  class Stmt;
  Stmt prepare(const char* sql);
  void exec(const char* sql);
  void close();

  sqlite3* db_ = nullptr;
  std::unordered_map<std::string, sqlite3_stmt*> statements_;
};

}  // namespace fg::storage
