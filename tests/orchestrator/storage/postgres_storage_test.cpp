// The PostgreSQL backend: the backend-neutral conformance suite on a real server
// (tests/postgres/pg_server.sh), and what only a shared database has: gateways starting together,
// concurrent claims and results from several connections, a gateway process SIGKILLed with lines
// leased, a lost connection.
#include "orchestrator/storage/postgres_storage.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "tests/orchestrator/storage/pg_harness.hpp"
#include "tests/orchestrator/storage/storage_conformance.hpp"

namespace fg::storage::testing {
namespace {

// A URL whose tables live in a schema of their own: a fresh, empty database for each test on the
// one shared server (CREATE DATABASE would cost a second each).
std::string fresh_schema_url(const std::string& server_url) {
  static int counter = 0;
  const std::string schema = "t_" + std::to_string(::getpid()) + "_" + std::to_string(++counter);
  pg::Connection admin(server_url);
  admin.exec("CREATE SCHEMA " + schema);
  return server_url + "?options=-csearch_path%3D" + schema;
}

Opener fresh_postgres() {
  const auto& server = fg::test::shared_pg_server();
  if (!server.skip_reason.empty()) {
    std::cerr << "skipping the PostgreSQL conformance suite: " << server.skip_reason << "\n";
    return {};
  }
  if (server.url.empty()) {
    return []() -> std::unique_ptr<Storage> { throw Error("PostgreSQL did not start"); };
  }
  const std::string url = fresh_schema_url(server.url);
  return [url] { return std::make_unique<PostgresStorage>(url); };
}

INSTANTIATE_TEST_SUITE_P(Postgres, StorageConformance,
                         ::testing::Values(Backend{"postgres", fresh_postgres}), backend_name);

BatchRecord running_batch(const std::string& id) {
  BatchRecord b;
  b.id = id;
  b.owner = "alice";
  b.input_file_id = "file-in";
  b.endpoint = "/v1/chat/completions";
  b.completion_window = "24h";
  b.metadata_json = "null";
  b.status = BatchStatus::in_progress;
  b.created_at = 1;
  b.expires_at = 86'400'001;
  return b;
}

std::vector<LineInput> lines(int n) {
  std::vector<LineInput> out;
  for (int i = 0; i < n; ++i) {
    out.push_back({i, "req-" + std::to_string(i), "m", R"({"n":)" + std::to_string(i) + "}"});
  }
  return out;
}

Result result_for(std::int64_t line_no, const std::string& who) {
  return {line_no, true,
          R"({"custom_id":"req-)" + std::to_string(line_no) + R"(","by":")" + who + R"("})"};
}

TEST(PgStorage, RefusesANewerSchemaAndNamesTheDatabaseWithoutPassword) {
  FG_REQUIRE_PG(server_url);
  const std::string url = fresh_schema_url(server_url);
  { PostgresStorage db(url); }
  pg::Connection c(url);
  c.exec("UPDATE fleetgate_schema SET version = 99");
  try {
    PostgresStorage again(url);
    FAIL() << "opened a newer schema";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("newer fleetgate (schema 99"), std::string::npos) << message;
    EXPECT_NE(message.find("127.0.0.1"), std::string::npos) << message;
  }
}

TEST(PgStorage, CannotConnectIsAStorageError) {
  try {
    PostgresStorage db("postgresql://fleet:pw-not-shown@127.0.0.1:1/db?connect_timeout=2");
    FAIL() << "connected";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("pw-not-shown"), std::string::npos) << e.what();
  }
}

TEST(PgStorage, GatewaysStartingTogetherCreateTheSchemaOnce) {
  FG_REQUIRE_PG(server_url);
  const std::string url = fresh_schema_url(server_url);
  constexpr int kGateways = 4;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kGateways; ++i) {
    threads.emplace_back([&] {
      try {
        PostgresStorage db(url);
      } catch (const std::exception& e) {
        std::cerr << e.what() << "\n";
        ++failures;
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_EQ(failures.load(), 0);
  pg::Connection c(url);
  EXPECT_EQ(c.exec("SELECT count(*), max(version) FROM fleetgate_schema").integer(0, 0), 1);
}

// Two gateways claim from one batch at the same time until it is empty: every line is claimed by
// exactly one of them (FOR UPDATE SKIP LOCKED), and each records its lines' results.
TEST(PgStorage, ConcurrentClaimsAreDisjointAndCoverTheBatch) {
  FG_REQUIRE_PG(server_url);
  const std::string url = fresh_schema_url(server_url);
  constexpr int kLines = 600;
  {
    PostgresStorage db(url);
    db.create_batch(running_batch("batch_c"));
    db.add_lines("batch_c", lines(kLines));
  }
  std::vector<std::vector<std::int64_t>> claimed(2);
  std::vector<std::thread> gateways;
  for (int g = 0; g < 2; ++g) {
    gateways.emplace_back([&, g] {
      PostgresStorage db(url);
      const std::string owner = "gw-" + std::to_string(g);
      for (;;) {
        const auto got = db.claim_lines("batch_c", owner, 1000, 61'000, 7);
        if (got.empty()) {
          return;
        }
        for (const auto& line : got) {
          EXPECT_EQ(line.lease_owner, owner);
          EXPECT_EQ(line.attempts, 1);
          claimed[g].push_back(line.line_no);
          EXPECT_EQ(db.record_result("batch_c", result_for(line.line_no, owner), 1001),
                    RecordOutcome::recorded);
        }
      }
    });
  }
  for (auto& t : gateways) {
    t.join();
  }
  std::set<std::int64_t> all;
  for (const auto& c : claimed) {
    for (auto n : c) {
      EXPECT_TRUE(all.insert(n).second) << "line " << n << " claimed twice";
    }
  }
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kLines));
  // Both took part (each claim is a round trip; neither can drain 600 lines before the other
  // starts unless the other never ran at all).
  EXPECT_GT(claimed[0].size(), 0u);
  EXPECT_GT(claimed[1].size(), 0u);
  PostgresStorage db(url);
  const auto counts = db.count_lines("batch_c", 2000);
  EXPECT_EQ(counts.succeeded, kLines);
  EXPECT_EQ(counts.pending + counts.leased + counts.failed, 0);
}

// The same results recorded by two connections at once (a line run twice: a lease that expired
// while its phone was still answering): one result per line, and exactly one of the two callers
// hears `recorded`.
TEST(PgStorage, ConcurrentRecordsKeepOneResultPerLine) {
  FG_REQUIRE_PG(server_url);
  const std::string url = fresh_schema_url(server_url);
  constexpr int kLines = 300;
  {
    PostgresStorage db(url);
    db.create_batch(running_batch("batch_r"));
    db.add_lines("batch_r", lines(kLines));
  }
  std::vector<std::vector<RecordOutcome>> outcomes(2, std::vector<RecordOutcome>(kLines));
  std::vector<std::thread> writers;
  for (int g = 0; g < 2; ++g) {
    writers.emplace_back([&, g] {
      PostgresStorage db(url);
      for (int i = 0; i < kLines; ++i) {
        outcomes[g][i] = db.record_result("batch_r", result_for(i, "gw-" + std::to_string(g)), 5);
      }
    });
  }
  for (auto& t : writers) {
    t.join();
  }
  for (int i = 0; i < kLines; ++i) {
    const int recorded =
        (outcomes[0][i] == RecordOutcome::recorded) + (outcomes[1][i] == RecordOutcome::recorded);
    EXPECT_EQ(recorded, 1) << "line " << i;
  }
  PostgresStorage db(url);
  const auto results = db.read_results("batch_r", true, -1, kLines + 10);
  EXPECT_EQ(results.size(), static_cast<std::size_t>(kLines));
}

// A gateway process holds leases and is SIGKILLed (its connection dies with it): the other
// gateway does not get those lines while the leases live, gets them once they expire, and every
// line ends with exactly one result.
TEST(PgStorage, ASigkilledGatewaysLeasesGoToTheOtherAfterExpiry) {
  FG_REQUIRE_PG(server_url);
  const std::string url = fresh_schema_url(server_url);
  constexpr int kLines = 40;
  constexpr UnixMs kNow = 10'000;
  constexpr UnixMs kLease = 30'000;
  {
    PostgresStorage db(url);
    db.create_batch(running_batch("batch_k"));
    db.add_lines("batch_k", lines(kLines));
  }
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The doomed gateway: claims 10 lines, finishes 4 of them, then hangs until killed.
    ::close(ready[0]);
    int code = 0;
    try {
      PostgresStorage db(url);
      const auto got = db.claim_lines("batch_k", "gw-doomed", kNow, kNow + kLease, 10);
      for (std::size_t i = 0; i < 4 && i < got.size(); ++i) {
        db.record_result("batch_k", result_for(got[i].line_no, "gw-doomed"), kNow);
      }
      code = got.size() == 10 ? 0 : 1;
    } catch (...) {
      code = 2;
    }
    const char c = static_cast<char>('0' + code);
    (void)!::write(ready[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(c, '0') << "the child gateway failed before its crash";
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));

  PostgresStorage survivor(url);
  // While the dead gateway's leases live, only the other 30 lines are claimable.
  std::set<std::int64_t> done;
  auto first = survivor.claim_lines("batch_k", "gw-survivor", kNow + 1, kNow + 1 + kLease, 100);
  EXPECT_EQ(first.size(), 30u);
  for (const auto& l : first) {
    EXPECT_GE(l.line_no, 10);
    EXPECT_EQ(survivor.record_result("batch_k", result_for(l.line_no, "gw-survivor"), kNow + 1),
              RecordOutcome::recorded);
  }
  auto counts = survivor.count_lines("batch_k", kNow + 2);
  EXPECT_EQ(counts.leased, 6);
  EXPECT_EQ(counts.succeeded, 34);
  EXPECT_TRUE(
      survivor.claim_lines("batch_k", "gw-survivor", kNow + kLease - 1, kNow + 2 * kLease, 100)
          .empty());
  // After expiry the 6 unfinished lines of the dead gateway are the survivor's, second attempt.
  auto orphans =
      survivor.claim_lines("batch_k", "gw-survivor", kNow + kLease, kNow + 2 * kLease, 100);
  ASSERT_EQ(orphans.size(), 6u);
  for (const auto& l : orphans) {
    EXPECT_LT(l.line_no, 10);
    EXPECT_EQ(l.attempts, 2);
    EXPECT_EQ(
        survivor.record_result("batch_k", result_for(l.line_no, "gw-survivor"), kNow + kLease),
        RecordOutcome::recorded);
  }
  counts = survivor.count_lines("batch_k", kNow + kLease + 1);
  EXPECT_EQ(counts.succeeded, kLines);
  EXPECT_EQ(counts.pending + counts.leased + counts.failed, 0);
  std::map<std::int64_t, int> per_line;
  for (const auto& r : survivor.read_results("batch_k", true, -1, 1000)) {
    ++per_line[r.line_no];
  }
  ASSERT_EQ(per_line.size(), static_cast<std::size_t>(kLines));
  for (const auto& [line, n] : per_line) {
    EXPECT_EQ(n, 1) << "line " << line;
  }
}

TEST(PgStorage, ALostConnectionFailsOneCallAndTheNextReconnects) {
  FG_REQUIRE_PG(server_url);
  const std::string url = fresh_schema_url(server_url);
  PostgresStorage db(url);
  db.create_batch(running_batch("batch_l"));
  pg::Connection admin(server_url);
  // Every other session of this database: the storage's (no other test holds one now).
  admin.exec(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
      " WHERE datname = current_database() AND pid <> pg_backend_pid()"
      " AND application_name = 'fleetgate'");
  EXPECT_THROW(db.get_batch("alice", "batch_l"), Error);
  const auto again = db.get_batch("alice", "batch_l");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, BatchStatus::in_progress);
}

// A statement that waits (here for a lock another session holds) fails at the statement timeout
// instead of holding its caller, which may be the gateway's io thread.
TEST(PgStorage, AStatementWaitsAtMostTheStatementTimeout) {
  FG_REQUIRE_PG(server_url);
  const std::string url = fresh_schema_url(server_url);
  PostgresStorage db(url, 300);
  db.create_batch(running_batch("batch_w"));
  pg::Connection other(url);
  pg::Transaction hold(other);
  hold.exec("LOCK TABLE batches IN ACCESS EXCLUSIVE MODE");
  try {
    db.get_batch("alice", "batch_w");
    FAIL() << "read through an exclusive lock";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("statement timeout"), std::string::npos) << e.what();
  }
  hold.commit();
  EXPECT_TRUE(db.get_batch("alice", "batch_w"));
}

TEST(PgStorage, AddLinesKeepsAwkwardTextExactly) {
  FG_REQUIRE_PG(server_url);
  const std::string url = fresh_schema_url(server_url);
  PostgresStorage db(url);
  db.create_batch(running_batch("batch_t"));
  const std::string body = R"({"q":"a \"quoted\", {braced} NULL \\ back\\slash","e":"é€"})";
  db.add_lines("batch_t", {{0, "NULL", "m,1", body}, {1, "", "{}", "\"\""}});
  const auto got = db.claim_lines("batch_t", "gw", 1, 2, 10);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].custom_id, "NULL");
  EXPECT_EQ(got[0].model, "m,1");
  EXPECT_EQ(got[0].body, body);
  EXPECT_EQ(got[1].custom_id, "");
  EXPECT_EQ(got[1].model, "{}");
  EXPECT_EQ(got[1].body, "\"\"");
}

}  // namespace
}  // namespace fg::storage::testing
