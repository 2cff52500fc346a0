#include "orchestrator/storage/postgres_storage.hpp"

#include <algorithm>
#include <utility>

namespace fg::storage {
namespace {

using pg::Param;

// Two gateways starting at once create the schema one after the other (the key is arbitrary,
// fixed: "fleetgate" in ASCII).
constexpr const char* kSchemaLock = "SELECT pg_advisory_xact_lock(7308604897068083557)";

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS fleetgate_schema (version integer NOT NULL);
CREATE TABLE IF NOT EXISTS files (
  n bigserial PRIMARY KEY,
  id text NOT NULL UNIQUE,
  owner text NOT NULL,
  filename text NOT NULL,
  purpose text NOT NULL,
  kind integer NOT NULL,
  state integer NOT NULL,
  batch_id text NOT NULL,
  bytes bigint NOT NULL,
  created_at bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS files_owner ON files (owner, n);
CREATE TABLE IF NOT EXISTS file_chunks (
  file_id text NOT NULL,
  seq bigint NOT NULL,
  data bytea NOT NULL,
  PRIMARY KEY (file_id, seq)
);
CREATE TABLE IF NOT EXISTS batches (
  n bigserial PRIMARY KEY,
  id text NOT NULL UNIQUE,
  owner text NOT NULL,
  input_file_id text NOT NULL,
  endpoint text NOT NULL,
  completion_window text NOT NULL,
  metadata_json text NOT NULL,
  status integer NOT NULL,
  errors_json text NOT NULL,
  output_file_id text NOT NULL,
  error_file_id text NOT NULL,
  created_at bigint NOT NULL,
  expires_at bigint NOT NULL,
  in_progress_at bigint NOT NULL DEFAULT 0,
  finalizing_at bigint NOT NULL DEFAULT 0,
  completed_at bigint NOT NULL DEFAULT 0,
  failed_at bigint NOT NULL DEFAULT 0,
  expired_at bigint NOT NULL DEFAULT 0,
  cancelling_at bigint NOT NULL DEFAULT 0,
  cancelled_at bigint NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS batches_owner ON batches (owner, n);
CREATE INDEX IF NOT EXISTS batches_status ON batches (status, n);
CREATE TABLE IF NOT EXISTS lines (
  batch_id text NOT NULL,
  line_no bigint NOT NULL,
  custom_id text NOT NULL,
  model text NOT NULL,
  body text NOT NULL,
  state integer NOT NULL DEFAULT 0,
  attempts integer NOT NULL DEFAULT 0,
  lease_owner text NOT NULL DEFAULT '',
  lease_expires_at bigint NOT NULL DEFAULT 0,
  not_before bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (batch_id, line_no)
);
CREATE INDEX IF NOT EXISTS lines_state ON lines (batch_id, state, line_no);
CREATE TABLE IF NOT EXISTS results (
  batch_id text NOT NULL,
  line_no bigint NOT NULL,
  ok boolean NOT NULL,
  line_json text NOT NULL,
  recorded_at bigint NOT NULL,
  PRIMARY KEY (batch_id, line_no)
);
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

// The status numbers are the enum's, as in the SQLite backend (one meaning in both databases).
constexpr const char* kActiveStatuses = "(0, 2, 3, 6)";  // validating, in_progress, finalizing,
                                                         // cancelling

Param status_param(BatchStatus s) {
  return Param::integer(static_cast<int>(s));
}

FileRecord read_file(const pg::Result& r, int row) {
  FileRecord f;
  f.id = r.text(row, 0);
  f.owner = r.text(row, 1);
  f.filename = r.text(row, 2);
  f.purpose = r.text(row, 3);
  f.kind = static_cast<FileKind>(r.integer(row, 4));
  f.state = static_cast<FileState>(r.integer(row, 5));
  f.batch_id = r.text(row, 6);
  f.bytes = r.integer(row, 7);
  f.created_at = r.integer(row, 8);
  return f;
}

BatchRecord read_batch(const pg::Result& r, int row) {
  BatchRecord b;
  b.id = r.text(row, 0);
  b.owner = r.text(row, 1);
  b.input_file_id = r.text(row, 2);
  b.endpoint = r.text(row, 3);
  b.completion_window = r.text(row, 4);
  b.metadata_json = r.text(row, 5);
  b.status = static_cast<BatchStatus>(r.integer(row, 6));
  b.errors_json = r.text(row, 7);
  b.output_file_id = r.text(row, 8);
  b.error_file_id = r.text(row, 9);
  b.created_at = r.integer(row, 10);
  b.expires_at = r.integer(row, 11);
  b.in_progress_at = r.integer(row, 12);
  b.finalizing_at = r.integer(row, 13);
  b.completed_at = r.integer(row, 14);
  b.failed_at = r.integer(row, 15);
  b.expired_at = r.integer(row, 16);
  b.cancelling_at = r.integer(row, 17);
  b.cancelled_at = r.integer(row, 18);
  return b;
}

Line read_line(const pg::Result& r, int row) {
  Line l;
  l.batch_id = r.text(row, 0);
  l.line_no = r.integer(row, 1);
  l.custom_id = r.text(row, 2);
  l.model = r.text(row, 3);
  l.body = r.text(row, 4);
  l.attempts = static_cast<int>(r.integer(row, 5));
  l.lease_owner = r.text(row, 6);
  l.lease_expires_at = r.integer(row, 7);
  return l;
}

std::vector<Line> read_lines(const pg::Result& r) {
  std::vector<Line> out;
  out.reserve(static_cast<std::size_t>(r.rows()));
  for (int i = 0; i < r.rows(); ++i) {
    out.push_back(read_line(r, i));
  }
  return out;
}

// A PostgreSQL array literal of text values: {"a","b\"c"} (every element quoted, so commas,
// braces, spaces and NULL spelled as text stay values).
std::string text_array(const std::vector<std::string>& values) {
  std::string out = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) {
      out += ',';
    }
    out += '"';
    for (char c : values[i]) {
      if (c == '"' || c == '\\') {
        out += '\\';
      }
      out += c;
    }
    out += '"';
  }
  out += '}';
  return out;
}

}  // namespace

template <class F>
auto PostgresStorage::run(F&& f) {
  try {
    return f(conn());
  } catch (const pg::Error& e) {
    if (e.connection_lost() || (conn_ && !conn_->ok())) {
      conn_.reset();
    }
    throw Error(e.what());
  }
}

PostgresStorage::PostgresStorage(std::string url, int statement_timeout_ms)
    : url_(std::move(url)), statement_timeout_ms_(statement_timeout_ms) {
  run([this](pg::Connection&) {
    migrate();
    return 0;
  });
}

PostgresStorage::~PostgresStorage() = default;

pg::Connection& PostgresStorage::conn() {
  if (!conn_ || !conn_->ok()) {
    conn_.reset();
    conn_.emplace(url_);
    // The caller may be the gateway's io thread (storage.hpp): no statement holds it longer than
    // this, whatever the database is waiting for (a lock, a slow disk).
    conn_->exec("SET statement_timeout = " + std::to_string(statement_timeout_ms_));
  }
  return *conn_;
}

void PostgresStorage::migrate() {
  auto& c = conn();
  pg::Transaction tx(c);
  tx.exec(kSchemaLock);
  const bool fresh = !tx.exec("SELECT to_regclass('fleetgate_schema') IS NOT NULL").boolean(0, 0);
  int version = 0;
  if (!fresh) {
    auto r = tx.exec("SELECT max(version) FROM fleetgate_schema");
    version = static_cast<int>(r.optional_integer(0, 0).value_or(0));
  }
  if (version > kSchemaVersion) {
    throw pg::Error("PostgreSQL: the database " + pg::redact_url(url_) +
                        " was written by a newer fleetgate (schema " + std::to_string(version) +
                        ", this one knows " + std::to_string(kSchemaVersion) + ")",
                    "");
  }
  if (version < kSchemaVersion) {
    // Version 1 is the whole schema above; a later version adds its steps here, in order.
    c.exec_script(kSchema);
    tx.exec("DELETE FROM fleetgate_schema");
    tx.exec("INSERT INTO fleetgate_schema (version) VALUES ($1::integer)",
            {Param::integer(kSchemaVersion)});
  }
  tx.commit();
}

// ---- files ----

void PostgresStorage::create_file(const FileRecord& f) {
  run([&](pg::Connection& c) {
    c.exec(
        "INSERT INTO files (id, owner, filename, purpose, kind, state, batch_id, bytes, "
        "created_at) VALUES ($1, $2, $3, $4, $5::integer, $6::integer, $7, $8::bigint, "
        "$9::bigint)",
        {Param::text(f.id), Param::text(f.owner), Param::text(f.filename), Param::text(f.purpose),
         Param::integer(static_cast<int>(f.kind)), Param::integer(static_cast<int>(f.state)),
         Param::text(f.batch_id), Param::integer(f.bytes), Param::integer(f.created_at)});
    return 0;
  });
}

void PostgresStorage::append_chunk(const std::string& file_id, std::int64_t seq,
                                   const std::string& data) {
  run([&](pg::Connection& c) {
    c.exec("INSERT INTO file_chunks (file_id, seq, data) VALUES ($1, $2::bigint, $3::bytea)",
           {Param::text(file_id), Param::integer(seq), Param::bytes(data)});
    return 0;
  });
}

bool PostgresStorage::finish_upload(const std::string& file_id, std::int64_t bytes) {
  return run([&](pg::Connection& c) {
    return c.exec("UPDATE files SET state = 1, bytes = $1::bigint WHERE id = $2 AND state = 0",
                  {Param::integer(bytes), Param::text(file_id)})
               .affected() == 1;
  });
}

std::optional<FileRecord> PostgresStorage::get_file(const std::string& owner,
                                                    const std::string& id) {
  return run([&](pg::Connection& c) -> std::optional<FileRecord> {
    auto r = c.exec(std::string("SELECT ") + kFileColumns +
                        " FROM files WHERE id = $1 AND state = 1 AND ($2::text = '' OR owner = $2)",
                    {Param::text(id), Param::text(owner)});
    if (r.rows() == 0) {
      return std::nullopt;
    }
    return read_file(r, 0);
  });
}

std::vector<FileRecord> PostgresStorage::list_files(const std::string& owner,
                                                    const std::string& purpose,
                                                    const std::string& after, int limit) {
  return run([&](pg::Connection& c) {
    auto r = c.exec(
        std::string("SELECT ") + kFileColumns +
            " FROM files WHERE owner = $1 AND state = 1 AND ($2::text = '' OR purpose = $2)"
            " AND ($3::text = '' OR n < COALESCE((SELECT n FROM files WHERE id = $3), -1))"
            " ORDER BY n DESC LIMIT $4::bigint",
        {Param::text(owner), Param::text(purpose), Param::text(after), Param::integer(limit)});
    std::vector<FileRecord> out;
    for (int i = 0; i < r.rows(); ++i) {
      out.push_back(read_file(r, i));
    }
    return out;
  });
}

bool PostgresStorage::delete_file(const std::string& owner, const std::string& id) {
  return run([&](pg::Connection& c) {
    // One statement: the record and its chunks go together.
    auto r = c.exec(
        "WITH gone AS (DELETE FROM files WHERE id = $1 AND owner = $2 RETURNING id),"
        " chunks AS (DELETE FROM file_chunks WHERE file_id IN (SELECT id FROM gone))"
        " SELECT count(*) FROM gone",
        {Param::text(id), Param::text(owner)});
    return r.integer(0, 0) == 1;
  });
}

std::int64_t PostgresStorage::delete_abandoned_uploads(UnixMs created_before) {
  return run([&](pg::Connection& c) {
    auto r = c.exec(
        "WITH gone AS (DELETE FROM files WHERE state = 0 AND created_at < $1::bigint RETURNING id),"
        " chunks AS (DELETE FROM file_chunks WHERE file_id IN (SELECT id FROM gone))"
        " SELECT count(*) FROM gone",
        {Param::integer(created_before)});
    return r.integer(0, 0);
  });
}

std::vector<Chunk> PostgresStorage::read_chunks(const std::string& file_id, std::int64_t after_seq,
                                                int limit) {
  return run([&](pg::Connection& c) {
    auto r = c.exec(
        "SELECT seq, data FROM file_chunks WHERE file_id = $1 AND seq > $2::bigint"
        " ORDER BY seq LIMIT $3::bigint",
        {Param::text(file_id), Param::integer(after_seq), Param::integer(limit)});
    std::vector<Chunk> out;
    for (int i = 0; i < r.rows(); ++i) {
      out.push_back({r.integer(i, 0), r.bytes(i, 1)});
    }
    return out;
  });
}

// ---- batches ----

void PostgresStorage::create_batch(const BatchRecord& b) {
  run([&](pg::Connection& c) {
    c.exec(
        std::string("INSERT INTO batches (") + kBatchColumns +
            ") VALUES ($1, $2, $3, $4, $5, $6, $7::integer, $8, $9, $10, $11::bigint,"
            " $12::bigint, $13::bigint, $14::bigint, $15::bigint, $16::bigint, $17::bigint,"
            " $18::bigint, $19::bigint)",
        {Param::text(b.id), Param::text(b.owner), Param::text(b.input_file_id),
         Param::text(b.endpoint), Param::text(b.completion_window), Param::text(b.metadata_json),
         status_param(b.status), Param::text(b.errors_json), Param::text(b.output_file_id),
         Param::text(b.error_file_id), Param::integer(b.created_at), Param::integer(b.expires_at),
         Param::integer(b.in_progress_at), Param::integer(b.finalizing_at),
         Param::integer(b.completed_at), Param::integer(b.failed_at), Param::integer(b.expired_at),
         Param::integer(b.cancelling_at), Param::integer(b.cancelled_at)});
    return 0;
  });
}

std::optional<BatchRecord> PostgresStorage::get_batch(const std::string& owner,
                                                      const std::string& id) {
  return run([&](pg::Connection& c) -> std::optional<BatchRecord> {
    auto r = c.exec(std::string("SELECT ") + kBatchColumns +
                        " FROM batches WHERE id = $1 AND ($2::text = '' OR owner = $2)",
                    {Param::text(id), Param::text(owner)});
    if (r.rows() == 0) {
      return std::nullopt;
    }
    return read_batch(r, 0);
  });
}

std::vector<BatchRecord> PostgresStorage::list_batches(const std::string& owner,
                                                       const std::string& after, int limit) {
  return run([&](pg::Connection& c) {
    auto r =
        c.exec(std::string("SELECT ") + kBatchColumns +
                   " FROM batches WHERE owner = $1"
                   " AND ($2::text = '' OR n < COALESCE((SELECT n FROM batches WHERE id = $2), -1))"
                   " ORDER BY n DESC LIMIT $3::bigint",
               {Param::text(owner), Param::text(after), Param::integer(limit)});
    std::vector<BatchRecord> out;
    for (int i = 0; i < r.rows(); ++i) {
      out.push_back(read_batch(r, i));
    }
    return out;
  });
}

std::vector<BatchRecord> PostgresStorage::active_batches() {
  return run([&](pg::Connection& c) {
    auto r = c.exec(std::string("SELECT ") + kBatchColumns + " FROM batches WHERE status IN " +
                    kActiveStatuses + " ORDER BY n");
    std::vector<BatchRecord> out;
    for (int i = 0; i < r.rows(); ++i) {
      out.push_back(read_batch(r, i));
    }
    return out;
  });
}

bool PostgresStorage::transition(const std::string& id, BatchStatus from, BatchStatus to,
                                 UnixMs at) {
  const char* column = status_time_column(to);
  if (column == nullptr) {
    return false;  // nothing goes back to validating
  }
  return run([&](pg::Connection& c) {
    return c.exec(std::string("UPDATE batches SET status = $1::integer, ") + column +
                      " = $2::bigint WHERE id = $3 AND status = $4::integer",
                  {status_param(to), Param::integer(at), Param::text(id), status_param(from)})
               .affected() == 1;
  });
}

void PostgresStorage::set_errors(const std::string& id, const std::string& errors_json) {
  run([&](pg::Connection& c) {
    c.exec("UPDATE batches SET errors_json = $1 WHERE id = $2",
           {Param::text(errors_json), Param::text(id)});
    return 0;
  });
}

void PostgresStorage::set_result_files(const std::string& id, const std::string& output_file_id,
                                       const std::string& error_file_id) {
  run([&](pg::Connection& c) {
    c.exec("UPDATE batches SET output_file_id = $1, error_file_id = $2 WHERE id = $3",
           {Param::text(output_file_id), Param::text(error_file_id), Param::text(id)});
    return 0;
  });
}

std::vector<std::int64_t> PostgresStorage::count_batches_by_status() {
  return run([&](pg::Connection& c) {
    std::vector<std::int64_t> out(kBatchStatusCount, 0);
    auto r = c.exec("SELECT status, count(*) FROM batches GROUP BY status");
    for (int i = 0; i < r.rows(); ++i) {
      const auto status = r.integer(i, 0);
      if (status >= 0 && status < kBatchStatusCount) {
        out[static_cast<std::size_t>(status)] = r.integer(i, 1);
      }
    }
    return out;
  });
}

// ---- lines ----

void PostgresStorage::add_lines(const std::string& batch_id, const std::vector<LineInput>& lines) {
  if (lines.empty()) {
    return;
  }
  std::vector<std::string> numbers, custom_ids, models, bodies;
  numbers.reserve(lines.size());
  custom_ids.reserve(lines.size());
  models.reserve(lines.size());
  bodies.reserve(lines.size());
  for (const auto& l : lines) {
    numbers.push_back(std::to_string(l.line_no));
    custom_ids.push_back(l.custom_id);
    models.push_back(l.model);
    bodies.push_back(l.body);
  }
  run([&](pg::Connection& c) {
    // One statement for the whole piece; a line number the batch has is kept (a validation that
    // a crash interrupted runs again from the start).
    c.exec(
        "INSERT INTO lines (batch_id, line_no, custom_id, model, body)"
        " SELECT $1, u.line_no, u.custom_id, u.model, u.body"
        " FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[])"
        " AS u(line_no, custom_id, model, body)"
        " ON CONFLICT (batch_id, line_no) DO NOTHING",
        {Param::text(batch_id), Param::text(text_array(numbers)),
         Param::text(text_array(custom_ids)), Param::text(text_array(models)),
         Param::text(text_array(bodies))});
    return 0;
  });
}

std::vector<Line> PostgresStorage::claim_lines(const std::string& batch_id,
                                               const std::string& owner, UnixMs now,
                                               UnixMs lease_until, int limit) {
  return run([&](pg::Connection& c) {
    // SKIP LOCKED: lines another gateway is claiming at this moment are passed over, not waited
    // for, so concurrent claims get disjoint lines at once.
    auto r =
        c.exec(std::string("WITH picked AS (SELECT line_no FROM lines"
                           " WHERE batch_id = $1 AND ((state = 0 AND not_before <= $2::bigint)"
                           " OR (state = 1 AND lease_expires_at <= $2::bigint))"
                           " ORDER BY line_no LIMIT $3::bigint FOR UPDATE SKIP LOCKED)"
                           " UPDATE lines l SET state = 1, lease_owner = $4,"
                           " lease_expires_at = $5::bigint, attempts = l.attempts + 1"
                           " FROM picked WHERE l.batch_id = $1 AND l.line_no = picked.line_no"
                           " RETURNING ") +
                   "l.batch_id, l.line_no, l.custom_id, l.model, l.body, l.attempts, l.lease_owner,"
                   " l.lease_expires_at",
               {Param::text(batch_id), Param::integer(now), Param::integer(limit),
                Param::text(owner), Param::integer(lease_until)});
    auto out = read_lines(r);
    std::sort(out.begin(), out.end(),
              [](const Line& a, const Line& b) { return a.line_no < b.line_no; });
    return out;
  });
}

bool PostgresStorage::renew_lease(const std::string& batch_id, std::int64_t line_no,
                                  const std::string& owner, UnixMs lease_until) {
  return run([&](pg::Connection& c) {
    return c.exec(
                "UPDATE lines SET lease_expires_at = $1::bigint"
                " WHERE batch_id = $2 AND line_no = $3::bigint AND state = 1 AND lease_owner = $4",
                {Param::integer(lease_until), Param::text(batch_id), Param::integer(line_no),
                 Param::text(owner)})
               .affected() == 1;
  });
}

bool PostgresStorage::release_line(const std::string& batch_id, std::int64_t line_no,
                                   const std::string& owner, UnixMs not_before) {
  return run([&](pg::Connection& c) {
    return c.exec(
                "UPDATE lines SET state = 0, lease_owner = '', lease_expires_at = 0,"
                " not_before = $1::bigint"
                " WHERE batch_id = $2 AND line_no = $3::bigint AND state = 1 AND lease_owner = $4",
                {Param::integer(not_before), Param::text(batch_id), Param::integer(line_no),
                 Param::text(owner)})
               .affected() == 1;
  });
}

std::int64_t PostgresStorage::release_all_leases() {
  return run([&](pg::Connection& c) {
    return c
        .exec(
            "UPDATE lines SET state = 0, lease_owner = '', lease_expires_at = 0"
            " WHERE state = 1")
        .affected();
  });
}

RecordOutcome PostgresStorage::record_result(const std::string& batch_id, const Result& result,
                                             UnixMs at) {
  return run([&](pg::Connection& c) {
    // One statement, so one transaction: the result row (the primary key makes it the line's
    // only one; a concurrent second insert waits for the first and then does nothing) and the
    // line's final state.
    auto r = c.exec(
        "WITH line AS (SELECT 1 FROM lines WHERE batch_id = $1 AND line_no = $2::bigint),"
        " ins AS (INSERT INTO results (batch_id, line_no, ok, line_json, recorded_at)"
        "  SELECT $1, $2::bigint, $3::boolean, $4, $5::bigint WHERE EXISTS (SELECT 1 FROM line)"
        "  ON CONFLICT (batch_id, line_no) DO NOTHING RETURNING 1),"
        " upd AS (UPDATE lines SET state = $6::integer, lease_owner = '', lease_expires_at = 0"
        "  WHERE batch_id = $1 AND line_no = $2::bigint AND EXISTS (SELECT 1 FROM ins))"
        " SELECT (SELECT count(*) FROM line), (SELECT count(*) FROM ins)",
        {Param::text(batch_id), Param::integer(result.line_no), Param::boolean(result.ok),
         Param::text(result.line_json), Param::integer(at),
         Param::integer(static_cast<int>(result.ok ? LineState::succeeded : LineState::failed))});
    if (r.integer(0, 0) == 0) {
      return RecordOutcome::no_such_line;
    }
    return r.integer(0, 1) == 1 ? RecordOutcome::recorded : RecordOutcome::already_recorded;
  });
}

std::vector<Line> PostgresStorage::unfinished_lines(const std::string& batch_id, std::int64_t after,
                                                    int limit) {
  return run([&](pg::Connection& c) {
    return read_lines(
        c.exec(std::string("SELECT ") + kLineColumns +
                   " FROM lines WHERE batch_id = $1 AND state IN (0, 1)"
                   " AND line_no > $2::bigint ORDER BY line_no LIMIT $3::bigint",
               {Param::text(batch_id), Param::integer(after), Param::integer(limit)}));
  });
}

LineCounts PostgresStorage::count_lines(const std::string& batch_id, UnixMs now) {
  return run([&](pg::Connection& c) {
    auto r = c.exec(
        "SELECT state, state = 1 AND lease_expires_at <= $2::bigint, count(*) FROM lines"
        " WHERE batch_id = $1 GROUP BY 1, 2",
        {Param::text(batch_id), Param::integer(now)});
    LineCounts counts;
    for (int i = 0; i < r.rows(); ++i) {
      const auto state = r.integer(i, 0);
      const bool expired = r.boolean(i, 1);
      const auto n = r.integer(i, 2);
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
  });
}

std::vector<Result> PostgresStorage::read_results(const std::string& batch_id, bool ok,
                                                  std::int64_t after, int limit) {
  return run([&](pg::Connection& c) {
    auto r = c.exec(
        "SELECT line_no, line_json FROM results WHERE batch_id = $1 AND ok = $2::boolean"
        " AND line_no > $3::bigint ORDER BY line_no LIMIT $4::bigint",
        {Param::text(batch_id), Param::boolean(ok), Param::integer(after), Param::integer(limit)});
    std::vector<Result> out;
    for (int i = 0; i < r.rows(); ++i) {
      out.push_back({r.integer(i, 0), ok, std::string(r.text(i, 1))});
    }
    return out;
  });
}

std::vector<std::int64_t> PostgresStorage::count_lines_by_state(UnixMs now) {
  return run([&](pg::Connection& c) {
    auto r = c.exec(
        std::string("SELECT l.state, l.state = 1 AND l.lease_expires_at <= $1::bigint, count(*)"
                    " FROM lines l JOIN batches b ON b.id = l.batch_id WHERE b.status IN ") +
            kActiveStatuses + " GROUP BY 1, 2",
        {Param::integer(now)});
    std::vector<std::int64_t> out(4, 0);
    for (int i = 0; i < r.rows(); ++i) {
      auto state = r.integer(i, 0);
      if (state == 1 && r.boolean(i, 1)) {
        state = 0;
      }
      if (state >= 0 && state < 4) {
        out[static_cast<std::size_t>(state)] += r.integer(i, 2);
      }
    }
    return out;
  });
}

}  // namespace fg::storage
