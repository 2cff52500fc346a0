#pragma once

// The durable state of the Files and Batches API (docs/batch.md), behind one backend-neutral
// interface: SQLite (sqlite_storage.*, embedded, one gateway) and PostgreSQL (postgres_storage.*,
// several gateways on one database). Pure: no Asio, no clock (every time is passed in, Unix
// milliseconds), no ids invented here (the caller names files and batches).
//
// Concurrency contract. One Storage object is used by one thread at a time. Several Storage
// objects (several gateways) may work on one database at once: every method is one transaction,
// and the only coordination between gateways is the line lease (claim_lines) and the unique
// result per line (record_result).
//
// File bodies live in the database in chunks (file_chunks), so that two gateways on one
// PostgreSQL share them and no second place needs backing up. Output and error files are not
// stored as bodies: their content is the batch's result rows, in line order (read_results).

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace fg::storage {

using UnixMs = std::int64_t;

// A backend failure (I/O error, corrupt database, lost connection): the caller answers 500 or
// retries later; it never means "not found" (that is an empty optional or false).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ---- files ----------------------------------------------------------------------------------

enum class FileKind {
  upload,        // bytes uploaded by a client, stored as chunks
  batch_output,  // generated: the successful results of batch `batch_id`
  batch_error,   // generated: the failed results of batch `batch_id`
};

enum class FileState {
  uploading,  // chunks being appended; invisible to get_file/list_files
  ready,
};

struct FileRecord {
  std::string id;     // "file-..."
  std::string owner;  // API key name
  std::string filename;
  std::string purpose;  // "batch" for uploads, "batch_output" for generated files
  FileKind kind = FileKind::upload;
  FileState state = FileState::uploading;
  std::string batch_id;  // for batch_output / batch_error
  std::int64_t bytes = 0;
  UnixMs created_at = 0;
};

struct Chunk {
  std::int64_t seq = 0;  // 0, 1, 2, ... within one file
  std::string data;
};

// ---- batches --------------------------------------------------------------------------------

enum class BatchStatus {
  validating,
  failed,
  in_progress,
  finalizing,
  completed,
  expired,
  cancelling,
  cancelled,
};
inline constexpr int kBatchStatusCount = 8;

// "validating", "in_progress", ... (OpenAI's spelling) and back; nullopt for an unknown name.
const char* to_string(BatchStatus status);
std::optional<BatchStatus> parse_batch_status(std::string_view name);
// completed, failed, expired, cancelled: nothing changes any more.
bool is_terminal(BatchStatus status);
// The batch column that holds the time `status` was entered ("in_progress_at", ...); nullptr for
// validating, which has none. Both backends' schemas use these names. Inline: the PostgreSQL
// backend's library uses only this header (CMakeLists.txt, fg_storage_postgres).
inline const char* status_time_column(BatchStatus status) {
  switch (status) {
    case BatchStatus::in_progress:
      return "in_progress_at";
    case BatchStatus::finalizing:
      return "finalizing_at";
    case BatchStatus::completed:
      return "completed_at";
    case BatchStatus::failed:
      return "failed_at";
    case BatchStatus::expired:
      return "expired_at";
    case BatchStatus::cancelling:
      return "cancelling_at";
    case BatchStatus::cancelled:
      return "cancelled_at";
    case BatchStatus::validating:
      break;
  }
  return nullptr;
}

struct BatchRecord {
  std::string id;     // "batch_..."
  std::string owner;  // API key name
  std::string input_file_id;
  std::string endpoint;           // "/v1/chat/completions", ...
  std::string completion_window;  // "24h" as the client sent it
  std::string metadata_json;      // "null" or a JSON object, as given
  BatchStatus status = BatchStatus::validating;
  std::string errors_json = "null";  // OpenAI's `errors` object ({"object":"list","data":[...]})
  std::string output_file_id;        // empty until finalized
  std::string error_file_id;         // empty until finalized (and when there are no errors)
  UnixMs created_at = 0;
  UnixMs expires_at = 0;  // created_at + completion window
  // The time each status was entered; 0 = not yet.
  UnixMs in_progress_at = 0;
  UnixMs finalizing_at = 0;
  UnixMs completed_at = 0;
  UnixMs failed_at = 0;
  UnixMs expired_at = 0;
  UnixMs cancelling_at = 0;
  UnixMs cancelled_at = 0;
};

// ---- lines ----------------------------------------------------------------------------------

// A line is pending (waiting to run, possibly not before `not_before`), leased (a gateway runs it
// until `lease_expires_at`; after that it is pending again for everybody), or done with exactly one
// result: succeeded (output file) or failed (error file).
enum class LineState { pending, leased, succeeded, failed };

struct LineInput {
  std::int64_t line_no = 0;  // 0-based position in the input file
  std::string custom_id;
  std::string model;
  std::string body;  // the request body to send (the line's `body`, as JSON text)
};

struct Line {
  std::string batch_id;
  std::int64_t line_no = 0;
  std::string custom_id;
  std::string model;
  std::string body;
  int attempts = 0;  // claims so far, this one included
  std::string lease_owner;
  UnixMs lease_expires_at = 0;
};

struct LineCounts {
  std::int64_t pending = 0;  // includes leases that have expired
  std::int64_t leased = 0;   // live leases only
  std::int64_t succeeded = 0;
  std::int64_t failed = 0;
  std::int64_t total() const { return pending + leased + succeeded + failed; }
  std::int64_t done() const { return succeeded + failed; }
};

struct Result {
  std::int64_t line_no = 0;
  bool ok = true;         // true: output file; false: error file
  std::string line_json;  // the whole output/error line (OpenAI's format), without the newline
};

enum class RecordOutcome {
  recorded,          // the line's one result is now this one
  already_recorded,  // the line had a result: nothing changed (another gateway won, or a retry)
  no_such_line,
};

// ---- the interface --------------------------------------------------------------------------

class Storage {
 public:
  virtual ~Storage() = default;

  // "sqlite", "postgres": for logs and metrics.
  virtual std::string backend() const = 0;
  // True when other gateways may use the same database at once (PostgreSQL). When false (SQLite,
  // one gateway per file), a gateway that starts may release every lease at once
  // (release_all_leases): whoever held them is gone.
  virtual bool shared() const = 0;

  // Files. create_file stores the record in state `uploading`; append_chunk adds chunk `seq`
  // (seq 0, 1, 2, ... in order; each call is its own transaction, so an upload never holds the
  // database for long); finish_upload makes it visible with its total size. An upload that fails
  // midway is removed with delete_file.
  virtual void create_file(const FileRecord& file) = 0;
  virtual void append_chunk(const std::string& file_id, std::int64_t seq,
                            const std::string& data) = 0;
  virtual bool finish_upload(const std::string& file_id, std::int64_t bytes) = 0;
  // A ready file, owned by `owner` (empty owner: anybody's, for the runner).
  virtual std::optional<FileRecord> get_file(const std::string& owner, const std::string& id) = 0;
  // Ready files of `owner`, newest first; `after` is a file id (the last of the previous page):
  // only files older than it. `purpose` empty: all purposes.
  virtual std::vector<FileRecord> list_files(const std::string& owner, const std::string& purpose,
                                             const std::string& after, int limit) = 0;
  // Removes the record and its chunks (any state). False when not found or not owner's.
  virtual bool delete_file(const std::string& owner, const std::string& id) = 0;
  // Removes every upload still `uploading` that was created before `created_before`, with its
  // chunks: what a gateway that died mid-upload left behind. Returns how many.
  virtual std::int64_t delete_abandoned_uploads(UnixMs created_before) = 0;
  // Chunks of an upload with seq > after_seq, in order, at most `limit`: a body is read in pieces.
  virtual std::vector<Chunk> read_chunks(const std::string& file_id, std::int64_t after_seq,
                                         int limit) = 0;

  // Batches.
  virtual void create_batch(const BatchRecord& batch) = 0;
  virtual std::optional<BatchRecord> get_batch(const std::string& owner, const std::string& id) = 0;
  // Newest first; `after` is a batch id: only batches older than it.
  virtual std::vector<BatchRecord> list_batches(const std::string& owner, const std::string& after,
                                                int limit) = 0;
  // Batches in a non-terminal status, any owner, oldest first: the runner's work list.
  virtual std::vector<BatchRecord> active_batches() = 0;
  // Compare-and-set: moves batch `id` from `from` to `to` and sets the time column of `to` to
  // `at`. False (nothing changed) when the batch is not in `from`: another gateway or the client
  // (cancel) got there first.
  virtual bool transition(const std::string& id, BatchStatus from, BatchStatus to, UnixMs at) = 0;
  virtual void set_errors(const std::string& id, const std::string& errors_json) = 0;
  virtual void set_result_files(const std::string& id, const std::string& output_file_id,
                                const std::string& error_file_id) = 0;
  // Number of batches in each status (index = static_cast<int>(BatchStatus)), for metrics.
  virtual std::vector<std::int64_t> count_batches_by_status() = 0;

  // Lines. add_lines appends validated lines (in pieces, during validation). Idempotent: a line
  // number the batch already has is kept as it is (a validation interrupted by a crash runs again
  // from the start).
  virtual void add_lines(const std::string& batch_id, const std::vector<LineInput>& lines) = 0;
  // Leases at most `limit` claimable lines of `batch_id` to `owner` until `lease_until`, lowest
  // line_no first: pending lines whose `not_before` has come, and leased lines whose lease expired
  // (their gateway died). Each claim increments the line's attempts. Two gateways never get the
  // same line from concurrent calls (PostgreSQL: FOR UPDATE SKIP LOCKED).
  virtual std::vector<Line> claim_lines(const std::string& batch_id, const std::string& owner,
                                        UnixMs now, UnixMs lease_until, int limit) = 0;
  // Extends a live lease held by `owner`; false when the lease is no longer owner's.
  virtual bool renew_lease(const std::string& batch_id, std::int64_t line_no,
                           const std::string& owner, UnixMs lease_until) = 0;
  // Gives a leased line back (a transient failure: try again not before `not_before`); false when
  // the lease is no longer owner's.
  virtual bool release_line(const std::string& batch_id, std::int64_t line_no,
                            const std::string& owner, UnixMs not_before) = 0;
  // Every lease of every batch back to pending (see shared()); returns how many.
  virtual std::int64_t release_all_leases() = 0;
  // Records the line's one result. Whoever records first wins, whatever the lease says: results
  // are exactly once per line (a unique key), runs on phones at least once.
  virtual RecordOutcome record_result(const std::string& batch_id, const Result& result,
                                      UnixMs at) = 0;
  // Lines without a result yet (pending or leased, by anybody) with line_no > after, in order, at
  // most `limit`: what expiry turns into error lines.
  virtual std::vector<Line> unfinished_lines(const std::string& batch_id, std::int64_t after,
                                             int limit) = 0;
  virtual LineCounts count_lines(const std::string& batch_id, UnixMs now) = 0;
  // Results of one kind (ok = output file, !ok = error file) with line_no > after, in line order.
  virtual std::vector<Result> read_results(const std::string& batch_id, bool ok, std::int64_t after,
                                           int limit) = 0;
  // Lines by state over every active batch, for metrics (index = static_cast<int>(LineState)).
  virtual std::vector<std::int64_t> count_lines_by_state(UnixMs now) = 0;
};

}  // namespace fg::storage
