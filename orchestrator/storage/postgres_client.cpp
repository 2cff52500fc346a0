#include "orchestrator/storage/postgres_client.hpp"

#include <libpq-fe.h>

#include <charconv>
#include <memory>

namespace fg::storage::pg {
namespace {

std::string trimmed(const char* message) {
  std::string s = message ? message : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) {
    s.pop_back();
  }
  return s;
}

// Throws unless r is a success; takes ownership of r either way.
Result checked(PGconn* conn, PGresult* r) {
  Result owned(r);
  if (r == nullptr) {
    throw Error("PostgreSQL: " + trimmed(PQerrorMessage(conn)),
                PQstatus(conn) == CONNECTION_OK ? "" : "08006");
  }
  const auto status = PQresultStatus(r);
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) {
    return owned;
  }
  const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
  // A result without a SQLSTATE is libpq's own: the connection broke under the statement.
  throw Error("PostgreSQL: " + trimmed(PQresultErrorMessage(r)),
              state ? state : (PQstatus(conn) == CONNECTION_OK ? "" : "08006"));
}

}  // namespace

bool Error::connection_lost() const {
  return sqlstate_.starts_with("08") || sqlstate_ == "57P01" || sqlstate_ == "57P02" ||
         sqlstate_ == "57P03";
}

Result& Result::operator=(Result&& o) noexcept {
  if (this != &o) {
    PQclear(res_);
    res_ = o.res_;
    o.res_ = nullptr;
  }
  return *this;
}

Result::~Result() {
  PQclear(res_);
}

int Result::rows() const {
  return res_ ? PQntuples(res_) : 0;
}
int Result::columns() const {
  return res_ ? PQnfields(res_) : 0;
}
bool Result::is_null(int row, int col) const {
  return PQgetisnull(res_, row, col) == 1;
}

std::string_view Result::text(int row, int col) const {
  return {PQgetvalue(res_, row, col), static_cast<std::size_t>(PQgetlength(res_, row, col))};
}

std::optional<std::string> Result::optional_text(int row, int col) const {
  if (is_null(row, col)) {
    return std::nullopt;
  }
  return std::string(text(row, col));
}

std::int64_t Result::integer(int row, int col) const {
  if (is_null(row, col)) {
    throw Error("PostgreSQL: unexpected NULL in column " + std::to_string(col), "22004");
  }
  const auto t = text(row, col);
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size()) {
    throw Error("PostgreSQL: not an integer in column " + std::to_string(col), "22P02");
  }
  return v;
}

std::optional<std::int64_t> Result::optional_integer(int row, int col) const {
  if (is_null(row, col)) {
    return std::nullopt;
  }
  return integer(row, col);
}

bool Result::boolean(int row, int col) const {
  if (is_null(row, col)) {
    throw Error("PostgreSQL: unexpected NULL in column " + std::to_string(col), "22004");
  }
  return text(row, col) == "t";
}

std::string Result::bytes(int row, int col) const {
  if (is_null(row, col)) {
    throw Error("PostgreSQL: unexpected NULL in column " + std::to_string(col), "22004");
  }
  std::size_t n = 0;
  std::unique_ptr<unsigned char, decltype(&PQfreemem)> raw(
      PQunescapeBytea(reinterpret_cast<const unsigned char*>(PQgetvalue(res_, row, col)), &n),
      &PQfreemem);
  if (!raw) {
    throw Error("PostgreSQL: cannot decode a bytea value (out of memory)", "53200");
  }
  return {reinterpret_cast<const char*>(raw.get()), n};
}

std::int64_t Result::affected() const {
  const char* n = res_ ? PQcmdTuples(res_) : "";
  std::int64_t v = 0;
  std::from_chars(n, n + std::char_traits<char>::length(n), v);
  return v;
}

Connection::Connection(const std::string& url) {
  // Defaults the URL may override (expand_dbname: later keywords win, the URL's included): a
  // bounded connect, and keep-alives so a vanished server fails a call instead of hanging it.
  const char* keys[] = {"connect_timeout",     "keepalives",       "keepalives_idle",
                        "keepalives_interval", "keepalives_count", "tcp_user_timeout",
                        "application_name",    "dbname",           nullptr};
  const char* values[] = {"10", "1", "10", "5", "3", "30000", "fleetgate", url.c_str(), nullptr};
  conn_ = PQconnectdbParams(keys, values, 1);
  if (conn_ == nullptr) {
    throw Error("PostgreSQL: out of memory connecting to " + redact_url(url), "08000");
  }
  if (PQstatus(conn_) != CONNECTION_OK) {
    std::string message = trimmed(PQerrorMessage(conn_));
    PQfinish(conn_);
    conn_ = nullptr;
    throw Error("PostgreSQL: cannot connect to " + redact_url(url) + ": " + message, "08001");
  }
  // Notices (e.g. "relation already exists, skipping") are not errors; keep them off stderr.
  PQsetNoticeProcessor(
      conn_, [](void*, const char*) {}, nullptr);
}

Connection& Connection::operator=(Connection&& o) noexcept {
  if (this != &o) {
    PQfinish(conn_);
    conn_ = o.conn_;
    o.conn_ = nullptr;
  }
  return *this;
}

Connection::~Connection() {
  PQfinish(conn_);
}

Result Connection::exec(std::string_view sql, const std::vector<Param>& params) {
  if (conn_ == nullptr) {
    throw Error("PostgreSQL: no connection", "08003");
  }
  const std::string query(sql);
  std::vector<const char*> values(params.size());
  std::vector<int> lengths(params.size());
  std::vector<int> formats(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Param& p = params[i];
    values[i] = p.kind == Param::Kind::kNull ? nullptr : p.value.data();
    lengths[i] = static_cast<int>(p.value.size());
    formats[i] = p.kind == Param::Kind::kBytes ? 1 : 0;
  }
  return checked(conn_, PQexecParams(conn_, query.c_str(), static_cast<int>(params.size()), nullptr,
                                     values.data(), lengths.data(), formats.data(), 0));
}

void Connection::exec_script(std::string_view sql) {
  if (conn_ == nullptr) {
    throw Error("PostgreSQL: no connection", "08003");
  }
  const std::string script(sql);
  checked(conn_, PQexec(conn_, script.c_str()));
}

bool Connection::ok() const {
  return conn_ != nullptr && PQstatus(conn_) == CONNECTION_OK;
}

int Connection::backend_pid() const {
  return conn_ ? PQbackendPID(conn_) : 0;
}

Transaction::Transaction(Connection& conn, std::string_view isolation) : conn_(conn) {
  std::string begin = "BEGIN";
  if (!isolation.empty()) {
    begin += " ISOLATION LEVEL ";
    begin += isolation;
  }
  conn_.exec(begin);
}

Transaction::~Transaction() {
  if (!open_) {
    return;
  }
  try {
    conn_.exec("ROLLBACK");
  } catch (const Error&) {
    // A broken connection has no transaction left to end.
  }
}

void Transaction::commit() {
  open_ = false;
  conn_.exec("COMMIT");
}

std::string redact_url(std::string_view url) {
  std::string out(url);
  // user:password@ in a URL's authority.
  const auto scheme = out.find("://");
  if (scheme != std::string::npos) {
    const auto authority = scheme + 3;
    const auto end = out.find_first_of("/?#", authority);
    const auto at = out.rfind('@', end == std::string::npos ? std::string::npos : end);
    if (at != std::string::npos && at >= authority) {
      const auto colon = out.find(':', authority);
      if (colon != std::string::npos && colon < at) {
        out.replace(colon + 1, at - colon - 1, "***");
      }
    }
  }
  // password=... in a URL's query or a keyword string.
  for (auto at = out.find("password="); at != std::string::npos;
       at = out.find("password=", at + 1)) {
    const auto value = at + 9;
    const auto end = out.find_first_of("& ", value);
    out.replace(value, end == std::string::npos ? std::string::npos : end - value, "***");
  }
  return out;
}

}  // namespace fg::storage::pg
