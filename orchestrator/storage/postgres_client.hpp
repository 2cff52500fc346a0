#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

// A small RAII layer over libpq: a connection from a URL, parameterised queries (text or binary
// parameters, never SQL built from values), results read by row and column, transactions that
// roll back unless committed, and errors that carry the SQLSTATE. Every call blocks until the
// server answers: call it off the io thread (the PostgreSQL backend does; docs/batch.md).
// No Asio here. A Connection is used by one thread at a time.

struct pg_conn;
struct pg_result;

namespace fg::storage::pg {

// A failed connection or statement. sqlstate() is the five-character code ("23505"
// unique_violation, "40001" serialization_failure, "40P01" deadlock, "57P01" admin shutdown, ...)
// ("08006" when the connection broke; "" for other libpq errors without one).
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, std::string sqlstate)
      : std::runtime_error(message), sqlstate_(std::move(sqlstate)) {}
  const std::string& sqlstate() const { return sqlstate_; }
  bool unique_violation() const { return sqlstate_ == "23505"; }
  // Worth running the whole transaction again: serialization failure or deadlock.
  bool retryable() const { return sqlstate_ == "40001" || sqlstate_ == "40P01"; }
  // The connection is gone (class 08, or the server shutting down: 57P0x): reconnect.
  bool connection_lost() const;

 private:
  std::string sqlstate_;
};

// One query parameter: NULL, text (any PostgreSQL type's text form) or binary bytes (bytea).
struct Param {
  enum class Kind { kNull, kText, kBytes };
  Kind kind = Kind::kNull;
  std::string value;

  static Param null() { return {}; }
  static Param text(std::string v) { return {Kind::kText, std::move(v)}; }
  static Param bytes(std::string v) { return {Kind::kBytes, std::move(v)}; }
  static Param integer(std::int64_t v) { return {Kind::kText, std::to_string(v)}; }
  static Param boolean(bool v) { return {Kind::kText, v ? "true" : "false"}; }
  static Param optional_text(const std::optional<std::string>& v) { return v ? text(*v) : null(); }
};

// The answer to one statement (owns the PGresult).
class Result {
 public:
  Result() = default;
  explicit Result(pg_result* r) : res_(r) {}
  Result(Result&& o) noexcept : res_(o.res_) { o.res_ = nullptr; }
  Result& operator=(Result&& o) noexcept;
  Result(const Result&) = delete;
  Result& operator=(const Result&) = delete;
  ~Result();

  int rows() const;
  int columns() const;
  bool is_null(int row, int col) const;
  // The text form of a value ("" for NULL; check is_null). Valid while the Result lives.
  std::string_view text(int row, int col) const;
  std::optional<std::string> optional_text(int row, int col) const;
  // Integer, boolean and bytea values. Throw Error on a NULL or a malformed value.
  std::int64_t integer(int row, int col) const;
  std::optional<std::int64_t> optional_integer(int row, int col) const;
  bool boolean(int row, int col) const;
  std::string bytes(int row, int col) const;  // a bytea column (text form, hex decoded)
  // Rows an INSERT/UPDATE/DELETE touched.
  std::int64_t affected() const;

 private:
  pg_result* res_ = nullptr;
};

class Connection {
 public:
  // Connects (blocking) with a libpq URL or keyword string: postgresql://user:pass@host:port/db.
  // Throws Error naming the server (never the password) when it cannot.
  explicit Connection(const std::string& url);
  Connection(Connection&& o) noexcept : conn_(o.conn_) { o.conn_ = nullptr; }
  Connection& operator=(Connection&& o) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  // One statement with $1, $2, ... parameters. Throws Error (with the SQLSTATE) on failure.
  Result exec(std::string_view sql, const std::vector<Param>& params = {});
  // Several statements without parameters (schema scripts).
  void exec_script(std::string_view sql);

  // False once libpq has seen the connection break.
  bool ok() const;
  // The server's process id for this session (pg_backend_pid()), for tests and logs.
  int backend_pid() const;

 private:
  pg_conn* conn_ = nullptr;
};

// BEGIN on construction; ROLLBACK on destruction unless commit() ran. Not nested.
class Transaction {
 public:
  // isolation: "" (the server's default, READ COMMITTED) or "REPEATABLE READ", "SERIALIZABLE".
  explicit Transaction(Connection& conn, std::string_view isolation = "");
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();

  Result exec(std::string_view sql, const std::vector<Param>& params = {}) {
    return conn_.exec(sql, params);
  }
  void commit();

 private:
  Connection& conn_;
  bool open_ = true;
};

// Redacts the password from a libpq URL for messages: postgresql://u:***@host/db.
std::string redact_url(std::string_view url);

}  // namespace fg::storage::pg
