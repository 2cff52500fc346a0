#include "orchestrator/storage/postgres_client.hpp"

#include <string>

#include <gtest/gtest.h>

#include "tests/orchestrator/storage/pg_harness.hpp"

namespace fg::storage::pg {
namespace {

TEST(PgClient, ParameterisedQueryKeepsValuesOutOfTheSql) {
  FG_REQUIRE_PG(url);
  Connection conn(url);
  const std::string hostile = "it's'); DROP TABLE x; --";
  auto r =
      conn.exec("SELECT $1::bigint + 1, $2::text, $3::text IS NULL, $4::boolean",
                {Param::integer(41), Param::text(hostile), Param::null(), Param::boolean(true)});
  ASSERT_EQ(r.rows(), 1);
  EXPECT_EQ(r.integer(0, 0), 42);
  EXPECT_EQ(r.text(0, 1), hostile);
  EXPECT_TRUE(r.boolean(0, 2));
  EXPECT_TRUE(r.boolean(0, 3));
  EXPECT_GT(conn.backend_pid(), 0);
}

TEST(PgClient, BytesRoundTripWithZeros) {
  FG_REQUIRE_PG(url);
  Connection conn(url);
  std::string data("a\0b\xff\n\\x", 7);
  auto r = conn.exec("SELECT $1::bytea, length($1::bytea)", {Param::bytes(data)});
  EXPECT_EQ(r.bytes(0, 0), data);
  EXPECT_EQ(r.integer(0, 1), 7);
}

TEST(PgClient, NullsReadAsOptionals) {
  FG_REQUIRE_PG(url);
  Connection conn(url);
  auto r = conn.exec("SELECT NULL::text, NULL::bigint, 'x'::text, 7::bigint");
  EXPECT_TRUE(r.is_null(0, 0));
  EXPECT_EQ(r.optional_text(0, 0), std::nullopt);
  EXPECT_EQ(r.optional_integer(0, 1), std::nullopt);
  EXPECT_EQ(r.optional_text(0, 2), "x");
  EXPECT_EQ(r.optional_integer(0, 3), 7);
  EXPECT_THROW(r.integer(0, 1), Error);
}

TEST(PgClient, ErrorsCarryTheSqlstate) {
  FG_REQUIRE_PG(url);
  Connection conn(url);
  conn.exec_script(
      "DROP TABLE IF EXISTS pg_client_t; CREATE TABLE pg_client_t (k text PRIMARY KEY);");
  conn.exec("INSERT INTO pg_client_t VALUES ($1)", {Param::text("a")});
  try {
    conn.exec("INSERT INTO pg_client_t VALUES ($1)", {Param::text("a")});
    FAIL() << "a duplicate key was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.sqlstate(), "23505");
    EXPECT_TRUE(e.unique_violation());
    EXPECT_FALSE(e.connection_lost());
    EXPECT_NE(std::string(e.what()).find("pg_client_t"), std::string::npos) << e.what();
  }
  try {
    conn.exec("SELEC 1");
    FAIL() << "a syntax error was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.sqlstate(), "42601");
  }
  // The connection is still usable after a failed statement.
  EXPECT_EQ(conn.exec("SELECT 1").integer(0, 0), 1);
}

TEST(PgClient, TransactionRollsBackUnlessCommitted) {
  FG_REQUIRE_PG(url);
  Connection conn(url);
  conn.exec_script(
      "DROP TABLE IF EXISTS pg_client_tx; CREATE TABLE pg_client_tx (v bigint NOT NULL);");
  {
    Transaction tx(conn);
    tx.exec("INSERT INTO pg_client_tx VALUES (1)");
  }
  EXPECT_EQ(conn.exec("SELECT count(*) FROM pg_client_tx").integer(0, 0), 0);
  {
    Transaction tx(conn, "REPEATABLE READ");
    tx.exec("INSERT INTO pg_client_tx VALUES (2)");
    tx.commit();
  }
  EXPECT_EQ(conn.exec("SELECT count(*) FROM pg_client_tx").integer(0, 0), 1);
  // A failed statement aborts the transaction; the destructor's ROLLBACK ends it.
  {
    Transaction tx(conn);
    tx.exec("INSERT INTO pg_client_tx VALUES (3)");
    EXPECT_THROW(tx.exec("INSERT INTO pg_client_tx VALUES (NULL)"), Error);
  }
  EXPECT_EQ(conn.exec("SELECT count(*) FROM pg_client_tx").integer(0, 0), 1);
}

TEST(PgClient, SkipLockedLetsTwoConnectionsClaimDifferentRows) {
  FG_REQUIRE_PG(url);
  Connection a(url);
  Connection b(url);
  a.exec_script(
      "DROP TABLE IF EXISTS pg_client_q; CREATE TABLE pg_client_q (id bigint PRIMARY KEY);"
      "INSERT INTO pg_client_q VALUES (1), (2);");
  const char* claim = "SELECT id FROM pg_client_q ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED";
  Transaction ta(a);
  auto ra = ta.exec(claim);
  ASSERT_EQ(ra.rows(), 1);
  EXPECT_EQ(ra.integer(0, 0), 1);
  Transaction tb(b);
  auto rb = tb.exec(claim);
  ASSERT_EQ(rb.rows(), 1);
  EXPECT_EQ(rb.integer(0, 0), 2);
}

TEST(PgClient, ALostConnectionIsReportedAsSuch) {
  FG_REQUIRE_PG(url);
  Connection victim(url);
  Connection killer(url);
  killer.exec("SELECT pg_terminate_backend($1::int)", {Param::integer(victim.backend_pid())});
  try {
    victim.exec("SELECT 1");
    FAIL() << "a terminated session answered";
  } catch (const Error& e) {
    EXPECT_TRUE(e.connection_lost()) << e.sqlstate() << " " << e.what();
  }
  EXPECT_FALSE(victim.ok());
}

TEST(PgClient, ConnectFailureNamesTheServerNotThePassword) {
  // Port 1 on loopback: nothing listens there.
  try {
    Connection conn("postgresql://fleet:s3cret-pw@127.0.0.1:1/db?connect_timeout=2");
    FAIL() << "connected to port 1";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.sqlstate(), "08001");
    EXPECT_TRUE(e.connection_lost());
    EXPECT_NE(message.find("127.0.0.1"), std::string::npos) << message;
    EXPECT_EQ(message.find("s3cret-pw"), std::string::npos) << message;
  }
}

TEST(PgClient, RedactUrl) {
  EXPECT_EQ(redact_url("postgresql://u:pw@h:5432/db"), "postgresql://u:***@h:5432/db");
  EXPECT_EQ(redact_url("postgresql://u@h/db"), "postgresql://u@h/db");
  EXPECT_EQ(redact_url("postgresql://h/db?user=u&password=pw&sslmode=require"),
            "postgresql://h/db?user=u&password=***&sslmode=require");
  EXPECT_EQ(redact_url("host=h password=pw dbname=d"), "host=h password=*** dbname=d");
  EXPECT_EQ(redact_url("postgresql://u:p@ss@h/db"), "postgresql://u:***@h/db");
}

}  // namespace
}  // namespace fg::storage::pg
