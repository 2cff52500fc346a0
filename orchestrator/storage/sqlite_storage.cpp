#include "orchestrator/storage/sqlite_storage.hpp"

#include <sqlite3.h>

#include <algorithm>
#include <filesystem>

namespace fg::storage {

namespace {

// Version 1: the schema below. A later version migrates in open_schema.
constexpr int kSchemaVersion = 1;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS files (
  n INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  owner TEXT NOT NULL,
  filename TEXT NOT NULL,
  purpose TEXT NOT NULL,
  kind INTEGER NOT NULL,
  state INTEGER NOT NULL,
  batch_id TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS files_owner ON files (owner, n);
CREATE TABLE IF NOT EXISTS file_chunks (
  file_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  data BLOB NOT NULL,
  PRIMARY KEY (file_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batches (
  n INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  owner TEXT NOT NULL,
  input_file_id TEXT NOT NULL,
  endpoint TEXT NOT NULL,
  completion_window TEXT NOT NULL,
  metadata_json TEXT NOT NULL,
  status INTEGER NOT NULL,
  errors_json TEXT NOT NULL,
  output_file_id TEXT NOT NULL,
  error_file_id TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  in_progress_at INTEGER NOT NULL DEFAULT 0,
  finalizing_at INTEGER NOT NULL DEFAULT 0,
  completed_at INTEGER NOT NULL DEFAULT 0,
  failed_at INTEGER NOT NULL DEFAULT 0,
  expired_at INTEGER NOT NULL DEFAULT 0,
  cancelling_at INTEGER NOT NULL DEFAULT 0,
  cancelled_at INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS batches_owner ON batches (owner, n);
CREATE INDEX IF NOT EXISTS batches_status ON batches (status, n);
CREATE TABLE IF NOT EXISTS lines (
  batch_id TEXT NOT NULL,
  line_no INTEGER NOT NULL,
  custom_id TEXT NOT NULL,
  model TEXT NOT NULL,
  body TEXT NOT NULL,
  state INTEGER NOT NULL DEFAULT 0,
  attempts INTEGER NOT NULL DEFAULT 0,
  lease_owner TEXT NOT NULL DEFAULT '',
  lease_expires_at INTEGER NOT NULL DEFAULT 0,
  not_before INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (batch_id, line_no)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS lines_state ON lines (batch_id, state, line_no);
CREATE TABLE IF NOT EXISTS results (
  batch_id TEXT NOT NULL,
  line_no INTEGER NOT NULL,
  ok INTEGER NOT NULL,
  line_json TEXT NOT NULL,
  recorded_at INTEGER NOT NULL,
  PRIMARY KEY (batch_id, line_no)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS results_kind ON results (batch_id, ok, line_no);
)sql";

constexpr const char* kBatchColumns =
    "id, owner, input_file_id, endpoint, completion_window, metadata_json, status, errors_json, "
    "output_file_id, error_file_id, created_at, expires_at, in_progress_at, finalizing_at, "
    "completed_at, failed_at, expired_at, cancelling_at, cancelled_at";

constexpr const char* kFileColumns =
    "id, owner, filename, purpose, kind, state, batch_id, bytes, created_at";

constexpr const char* kLineColumns =
    "batch_id, line_no, custom_id, model, body, attempts, lease_owner, lease_expires_at";

}  // namespace

// A prepared statement from the cache, reset and unbound when it goes out of scope.
class SqliteStorage::Stmt {
 public:
  Stmt(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

  Stmt& bind(const std::string& value) {
    check(sqlite3_bind_text(stmt_, ++index_, value.data(), static_cast<int>(value.size()),
                            SQLITE_TRANSIENT));
    return *this;
  }
  Stmt& bind_blob(const std::string& value) {
    check(sqlite3_bind_blob(stmt_, ++index_, value.data(), static_cast<int>(value.size()),
                            SQLITE_TRANSIENT));
    return *this;
  }
  Stmt& bind(std::int64_t value) {
    check(sqlite3_bind_int64(stmt_, ++index_, value));
    return *this;
  }
  Stmt& bind(int value) { return bind(static_cast<std::int64_t>(value)); }

  // True while there is a row.
  bool step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) {
      return true;
    }
    if (rc != SQLITE_DONE) {
      throw Error(std::string("sqlite: ") + sqlite3_errmsg(db_));
    }
    return false;
  }
  void run() {
    while (step()) {
    }
  }
  std::int64_t changes() const { return sqlite3_changes64(db_); }

  std::int64_t integer(int col) const { return sqlite3_column_int64(stmt_, col); }
  std::string text(int col) const {
    const void* data = sqlite3_column_blob(stmt_, col);
    int size = sqlite3_column_bytes(stmt_, col);
    return data ? std::string(static_cast<const char*>(data), static_cast<size_t>(size))
                : std::string();
  }

 private:
  void check(int rc) {
    if (rc != SQLITE_OK) {
      throw Error(std::string("sqlite bind: ") + sqlite3_errmsg(db_));
    }
  }

  sqlite3* db_;
  sqlite3_stmt* stmt_;
  int index_ = 0;
};

namespace {

FileRecord read_file(const auto& s) {
  FileRecord f;
  f.id = s.text(0);
  f.owner = s.text(1);
  f.filename = s.text(2);
  f.purpose = s.text(3);
  f.kind = static_cast<FileKind>(s.integer(4));
  f.state = static_cast<FileState>(s.integer(5));
  f.batch_id = s.text(6);
  f.bytes = s.integer(7);
  f.created_at = s.integer(8);
  return f;
}

BatchRecord read_batch(const auto& s) {
  BatchRecord b;
  b.id = s.text(0);
  b.owner = s.text(1);
  b.input_file_id = s.text(2);
  b.endpoint = s.text(3);
  b.completion_window = s.text(4);
  b.metadata_json = s.text(5);
  b.status = static_cast<BatchStatus>(s.integer(6));
  b.errors_json = s.text(7);
  b.output_file_id = s.text(8);
  b.error_file_id = s.text(9);
  b.created_at = s.integer(10);
  b.expires_at = s.integer(11);
  b.in_progress_at = s.integer(12);
  b.finalizing_at = s.integer(13);
  b.completed_at = s.integer(14);
  b.failed_at = s.integer(15);
  b.expired_at = s.integer(16);
  b.cancelling_at = s.integer(17);
  b.cancelled_at = s.integer(18);
  return b;
}

Line read_line(const auto& s) {
  Line l;
  l.batch_id = s.text(0);
  l.line_no = s.integer(1);
  l.custom_id = s.text(2);
  l.model = s.text(3);
  l.body = s.text(4);
  l.attempts = static_cast<int>(s.integer(5));
  l.lease_owner = s.text(6);
  l.lease_expires_at = s.integer(7);
  return l;
}

}  // namespace

SqliteStorage::SqliteStorage(const std::string& path, int busy_timeout_ms) {
  std::filesystem::path file(path);
  if (file.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(file.parent_path(), ec);
    if (ec) {
      throw Error("cannot create the directory of " + path + ": " + ec.message());
    }
  }
  int rc =
      sqlite3_open_v2(path.c_str(), &db_,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw Error("cannot open " + path + ": " + message);
  }
  try {
    sqlite3_busy_timeout(db_, busy_timeout_ms);
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=NORMAL");
    int version = 0;
    {
      auto s = prepare("PRAGMA user_version");
      if (s.step()) {
        version = static_cast<int>(s.integer(0));
      }
    }
    if (version > kSchemaVersion) {
      throw Error(path + " was written by a newer fleetgate (schema " + std::to_string(version) +
                  ")");
    }
    exec("BEGIN IMMEDIATE");
    exec(kSchema);
    exec(("PRAGMA user_version=" + std::to_string(kSchemaVersion)).c_str());
    exec("COMMIT");
  } catch (...) {
    close();
    throw;
  }
}

SqliteStorage::~SqliteStorage() {
  close();
}

void SqliteStorage::close() {
  for (auto& [sql, stmt] : statements_) {
    sqlite3_finalize(stmt);
  }
  statements_.clear();
  if (db_) {
    sqlite3_close(db_);
    db_ = nullptr;
  }
}

void SqliteStorage::exec(const char* sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = error ? error : sqlite3_errmsg(db_);
    sqlite3_free(error);
    throw Error("sqlite: " + message);
  }
}

SqliteStorage::Stmt SqliteStorage::prepare(const char* sql) {
  auto it = statements_.find(sql);
  if (it == statements_.end()) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr) != SQLITE_OK) {
      throw Error(std::string("sqlite prepare: ") + sqlite3_errmsg(db_));
    }
    it = statements_.emplace(sql, stmt).first;
  }
  return Stmt(db_, it->second);
}

namespace {
// BEGIN IMMEDIATE ... COMMIT, rolled back when an exception leaves the scope.
class Transaction {
 public:
  explicit Transaction(sqlite3* db) : db_(db) { run("BEGIN IMMEDIATE"); }
  ~Transaction() {
    if (!done_) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    }
  }
  void commit() {
    run("COMMIT");
    done_ = true;
  }

 private:
  void run(const char* sql) {
    if (sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) != SQLITE_OK) {
      throw Error(std::string("sqlite: ") + sqlite3_errmsg(db_));
    }
  }
  sqlite3* db_;
  bool done_ = false;
};
}  // namespace

// ---- files ----

void SqliteStorage::create_file(const FileRecord& f) {
  prepare(
      "INSERT INTO files (id, owner, filename, purpose, kind, state, batch_id, bytes, created_at)"
      " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
      .bind(f.id)
      .bind(f.owner)
      .bind(f.filename)
      .bind(f.purpose)
      .bind(static_cast<int>(f.kind))
      .bind(static_cast<int>(f.state))
      .bind(f.batch_id)
      .bind(f.bytes)
      .bind(f.created_at)
      .run();
}

void SqliteStorage::append_chunk(const std::string& file_id, std::int64_t seq,
                                 const std::string& data) {
  prepare("INSERT INTO file_chunks (file_id, seq, data) VALUES (?, ?, ?)")
      .bind(file_id)
      .bind(seq)
      .bind_blob(data)
      .run();
}

bool SqliteStorage::finish_upload(const std::string& file_id, std::int64_t bytes) {
  auto s = prepare("UPDATE files SET state = 1, bytes = ? WHERE id = ? AND state = 0");
  s.bind(bytes).bind(file_id).run();
  return s.changes() == 1;
}

std::optional<FileRecord> SqliteStorage::get_file(const std::string& owner, const std::string& id) {
  static const std::string sql = std::string("SELECT ") + kFileColumns +
                                 " FROM files WHERE id = ? AND state = 1 AND (? = '' OR owner = ?)";
  auto s = prepare(sql.c_str());
  s.bind(id).bind(owner).bind(owner);
  if (s.step()) {
    return read_file(s);
  }
  return std::nullopt;
}

std::vector<FileRecord> SqliteStorage::list_files(const std::string& owner,
                                                  const std::string& purpose,
                                                  const std::string& after, int limit) {
  static const std::string sql =
      std::string("SELECT ") + kFileColumns +
      " FROM files WHERE owner = ? AND state = 1 AND (? = '' OR purpose = ?)"
      " AND (? = '' OR n < COALESCE((SELECT n FROM files WHERE id = ?), -1))"
      " ORDER BY n DESC LIMIT ?";
  auto s = prepare(sql.c_str());
  s.bind(owner).bind(purpose).bind(purpose).bind(after).bind(after).bind(limit);
  std::vector<FileRecord> out;
  while (s.step()) {
    out.push_back(read_file(s));
  }
  return out;
}

bool SqliteStorage::delete_file(const std::string& owner, const std::string& id) {
  Transaction tx(db_);
  auto s = prepare("DELETE FROM files WHERE id = ? AND owner = ?");
  s.bind(id).bind(owner).run();
  bool deleted = s.changes() == 1;
  if (deleted) {
    prepare("DELETE FROM file_chunks WHERE file_id = ?").bind(id).run();
  }
  tx.commit();
  return deleted;
}

std::int64_t SqliteStorage::delete_abandoned_uploads(UnixMs created_before) {
  Transaction tx(db_);
  prepare(
      "DELETE FROM file_chunks WHERE file_id IN"
      " (SELECT id FROM files WHERE state = 0 AND created_at < ?)")
      .bind(created_before)
      .run();
  auto s = prepare("DELETE FROM files WHERE state = 0 AND created_at < ?");
  s.bind(created_before).run();
  const std::int64_t n = s.changes();
  tx.commit();
  return n;
}

std::vector<Chunk> SqliteStorage::read_chunks(const std::string& file_id, std::int64_t after_seq,
                                              int limit) {
  auto s = prepare(
      "SELECT seq, data FROM file_chunks WHERE file_id = ? AND seq > ? ORDER BY seq LIMIT ?");
  s.bind(file_id).bind(after_seq).bind(limit);
  std::vector<Chunk> out;
  while (s.step()) {
    out.push_back({s.integer(0), s.text(1)});
  }
  return out;
}

// ---- batches ----

void SqliteStorage::create_batch(const BatchRecord& b) {
  static const std::string sql =
      std::string("INSERT INTO batches (") + kBatchColumns +
      ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
  prepare(sql.c_str())
      .bind(b.id)
      .bind(b.owner)
      .bind(b.input_file_id)
      .bind(b.endpoint)
      .bind(b.completion_window)
      .bind(b.metadata_json)
      .bind(static_cast<int>(b.status))
      .bind(b.errors_json)
      .bind(b.output_file_id)
      .bind(b.error_file_id)
      .bind(b.created_at)
      .bind(b.expires_at)
      .bind(b.in_progress_at)
      .bind(b.finalizing_at)
      .bind(b.completed_at)
      .bind(b.failed_at)
      .bind(b.expired_at)
      .bind(b.cancelling_at)
      .bind(b.cancelled_at)
      .run();
}

std::optional<BatchRecord> SqliteStorage::get_batch(const std::string& owner,
                                                    const std::string& id) {
  static const std::string sql = std::string("SELECT ") + kBatchColumns +
                                 " FROM batches WHERE id = ? AND (? = '' OR owner = ?)";
  auto s = prepare(sql.c_str());
  s.bind(id).bind(owner).bind(owner);
  if (s.step()) {
    return read_batch(s);
  }
  return std::nullopt;
}

std::vector<BatchRecord> SqliteStorage::list_batches(const std::string& owner,
                                                     const std::string& after, int limit) {
  static const std::string sql =
      std::string("SELECT ") + kBatchColumns +
      " FROM batches WHERE owner = ?"
      " AND (? = '' OR n < COALESCE((SELECT n FROM batches WHERE id = ?), -1))"
      " ORDER BY n DESC LIMIT ?";
  auto s = prepare(sql.c_str());
  s.bind(owner).bind(after).bind(after).bind(limit);
  std::vector<BatchRecord> out;
  while (s.step()) {
    out.push_back(read_batch(s));
  }
  return out;
}

std::vector<BatchRecord> SqliteStorage::active_batches() {
  static const std::string sql = std::string("SELECT ") + kBatchColumns +
                                 " FROM batches WHERE status IN (?, ?, ?, ?) ORDER BY n";
  auto s = prepare(sql.c_str());
  s.bind(static_cast<int>(BatchStatus::validating))
      .bind(static_cast<int>(BatchStatus::in_progress))
      .bind(static_cast<int>(BatchStatus::finalizing))
      .bind(static_cast<int>(BatchStatus::cancelling));
  std::vector<BatchRecord> out;
  while (s.step()) {
    out.push_back(read_batch(s));
  }
  return out;
}

bool SqliteStorage::transition(const std::string& id, BatchStatus from, BatchStatus to, UnixMs at) {
  const char* column = status_time_column(to);
  if (!column) {
    return false;  // nothing goes back to validating
  }
  // One cached statement per target status: the column name is part of the SQL text.
  std::string sql =
      std::string("UPDATE batches SET status = ?, ") + column + " = ? WHERE id = ? AND status = ?";
  auto s = prepare(sql.c_str());
  s.bind(static_cast<int>(to)).bind(at).bind(id).bind(static_cast<int>(from)).run();
  return s.changes() == 1;
}

void SqliteStorage::set_errors(const std::string& id, const std::string& errors_json) {
  prepare("UPDATE batches SET errors_json = ? WHERE id = ?").bind(errors_json).bind(id).run();
}

void SqliteStorage::set_result_files(const std::string& id, const std::string& output_file_id,
                                     const std::string& error_file_id) {
  prepare("UPDATE batches SET output_file_id = ?, error_file_id = ? WHERE id = ?")
      .bind(output_file_id)
      .bind(error_file_id)
      .bind(id)
      .run();
}

std::vector<std::int64_t> SqliteStorage::count_batches_by_status() {
  std::vector<std::int64_t> out(kBatchStatusCount, 0);
  auto s = prepare("SELECT status, COUNT(*) FROM batches GROUP BY status");
  while (s.step()) {
    auto status = s.integer(0);
    if (status >= 0 && status < kBatchStatusCount) {
      out[static_cast<size_t>(status)] = s.integer(1);
    }
  }
  return out;
}

// ---- lines ----

void SqliteStorage::add_lines(const std::string& batch_id, const std::vector<LineInput>& lines) {
  Transaction tx(db_);
  for (const auto& line : lines) {
    prepare(
        "INSERT OR IGNORE INTO lines (batch_id, line_no, custom_id, model, body)"
        " VALUES (?, ?, ?, ?, ?)")
        .bind(batch_id)
        .bind(line.line_no)
        .bind(line.custom_id)
        .bind(line.model)
        .bind(line.body)
        .run();
  }
  tx.commit();
}

std::vector<Line> SqliteStorage::claim_lines(const std::string& batch_id, const std::string& owner,
                                             UnixMs now, UnixMs lease_until, int limit) {
  static const std::string sql =
      std::string(
          "UPDATE lines SET state = 1, lease_owner = ?, lease_expires_at = ?,"
          " attempts = attempts + 1"
          " WHERE batch_id = ? AND line_no IN ("
          "  SELECT line_no FROM lines WHERE batch_id = ? AND"
          "  ((state = 0 AND not_before <= ?) OR (state = 1 AND lease_expires_at <= ?))"
          "  ORDER BY line_no LIMIT ?)"
          " RETURNING ") +
      kLineColumns;
  Transaction tx(db_);
  auto s = prepare(sql.c_str());
  s.bind(owner).bind(lease_until).bind(batch_id).bind(batch_id).bind(now).bind(now).bind(limit);
  std::vector<Line> out;
  while (s.step()) {
    out.push_back(read_line(s));
  }
  tx.commit();
  std::sort(out.begin(), out.end(),
            [](const Line& a, const Line& b) { return a.line_no < b.line_no; });
  return out;
}

bool SqliteStorage::renew_lease(const std::string& batch_id, std::int64_t line_no,
                                const std::string& owner, UnixMs lease_until) {
  auto s = prepare(
      "UPDATE lines SET lease_expires_at = ?"
      " WHERE batch_id = ? AND line_no = ? AND state = 1 AND lease_owner = ?");
  s.bind(lease_until).bind(batch_id).bind(line_no).bind(owner).run();
  return s.changes() == 1;
}

bool SqliteStorage::release_line(const std::string& batch_id, std::int64_t line_no,
                                 const std::string& owner, UnixMs not_before) {
  auto s = prepare(
      "UPDATE lines SET state = 0, lease_owner = '', lease_expires_at = 0, not_before = ?"
      " WHERE batch_id = ? AND line_no = ? AND state = 1 AND lease_owner = ?");
  s.bind(not_before).bind(batch_id).bind(line_no).bind(owner).run();
  return s.changes() == 1;
}

std::int64_t SqliteStorage::release_all_leases() {
  auto s =
      prepare("UPDATE lines SET state = 0, lease_owner = '', lease_expires_at = 0 WHERE state = 1");
  s.run();
  return s.changes();
}

RecordOutcome SqliteStorage::record_result(const std::string& batch_id, const Result& result,
                                           UnixMs at) {
  Transaction tx(db_);
  {
    auto s = prepare("SELECT 1 FROM lines WHERE batch_id = ? AND line_no = ?");
    s.bind(batch_id).bind(result.line_no);
    if (!s.step()) {
      return RecordOutcome::no_such_line;
    }
  }
  auto insert = prepare(
      "INSERT OR IGNORE INTO results (batch_id, line_no, ok, line_json, recorded_at)"
      " VALUES (?, ?, ?, ?, ?)");
  insert.bind(batch_id)
      .bind(result.line_no)
      .bind(result.ok ? 1 : 0)
      .bind(result.line_json)
      .bind(at);
  insert.run();
  if (insert.changes() == 0) {
    return RecordOutcome::already_recorded;
  }
  prepare(
      "UPDATE lines SET state = ?, lease_owner = '', lease_expires_at = 0"
      " WHERE batch_id = ? AND line_no = ?")
      .bind(result.ok ? 2 : 3)
      .bind(batch_id)
      .bind(result.line_no)
      .run();
  tx.commit();
  return RecordOutcome::recorded;
}

std::vector<Line> SqliteStorage::unfinished_lines(const std::string& batch_id, std::int64_t after,
                                                  int limit) {
  static const std::string sql =
      std::string("SELECT ") + kLineColumns +
      " FROM lines WHERE batch_id = ? AND state IN (0, 1) AND line_no > ? ORDER BY line_no LIMIT ?";
  auto s = prepare(sql.c_str());
  s.bind(batch_id).bind(after).bind(limit);
  std::vector<Line> out;
  while (s.step()) {
    out.push_back(read_line(s));
  }
  return out;
}

LineCounts SqliteStorage::count_lines(const std::string& batch_id, UnixMs now) {
  auto s = prepare(
      "SELECT state, state = 1 AND lease_expires_at <= ?, COUNT(*) FROM lines"
      " WHERE batch_id = ? GROUP BY 1, 2");
  s.bind(now).bind(batch_id);
  LineCounts counts;
  while (s.step()) {
    auto state = s.integer(0);
    bool expired = s.integer(1) != 0;
    auto n = s.integer(2);
    if (state == 0 || (state == 1 && expired)) {
      counts.pending += n;
    } else if (state == 1) {
      counts.leased += n;
    } else if (state == 2) {
      counts.succeeded += n;
    } else {
      counts.failed += n;
    }
  }
  return counts;
}

std::vector<Result> SqliteStorage::read_results(const std::string& batch_id, bool ok,
                                                std::int64_t after, int limit) {
  auto s = prepare(
      "SELECT line_no, line_json FROM results WHERE batch_id = ? AND ok = ? AND line_no > ?"
      " ORDER BY line_no LIMIT ?");
  s.bind(batch_id).bind(ok ? 1 : 0).bind(after).bind(limit);
  std::vector<Result> out;
  while (s.step()) {
    out.push_back({s.integer(0), ok, s.text(1)});
  }
  return out;
}

std::vector<std::int64_t> SqliteStorage::count_lines_by_state(UnixMs now) {
  auto s = prepare(
      "SELECT l.state, l.state = 1 AND l.lease_expires_at <= ?, COUNT(*) FROM lines l"
      " JOIN batches b ON b.id = l.batch_id WHERE b.status IN (0, 2, 3, 6) GROUP BY 1, 2");
  s.bind(now);
  std::vector<std::int64_t> out(4, 0);
  while (s.step()) {
    auto state = s.integer(0);
    bool expired = s.integer(1) != 0;
    if (state == 1 && expired) {
      state = 0;
    }
    if (state >= 0 && state < 4) {
      out[static_cast<size_t>(state)] += s.integer(2);
    }
  }
  return out;
}

}  // namespace fg::storage
