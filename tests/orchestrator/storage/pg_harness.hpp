#pragma once

#include <string>

// A real PostgreSQL server for the GoogleTest suites (tests/postgres/pg_server.sh: initdb in a temp
// dir, its own port, a non-root user when run as root, stopped by PID). One server per test
// binary, started by the first test that asks for it and stopped when the binary exits.
namespace fg::test {

struct PgServer {
  std::string url;          // postgresql://postgres@127.0.0.1:PORT/fleetgate
  std::string skip_reason;  // non-empty: the binaries are missing, the test must GTEST_SKIP
};

// The shared server. Fails the calling test (ADD_FAILURE) and returns an empty url when the
// binaries are there but the server does not start: only missing binaries skip.
const PgServer& shared_pg_server();

}  // namespace fg::test

// In a test body: skips with the reason when the binaries are missing, fails when the server does
// not start; else the string `var` is the server's URL.
#define FG_REQUIRE_PG(var)                                               \
  const auto& fg_pg_server_ = ::fg::test::shared_pg_server();            \
  if (!fg_pg_server_.skip_reason.empty()) {                              \
    GTEST_SKIP() << fg_pg_server_.skip_reason;                           \
  }                                                                      \
  ASSERT_FALSE(fg_pg_server_.url.empty()) << "PostgreSQL did not start"; \
  const std::string var = fg_pg_server_.url
