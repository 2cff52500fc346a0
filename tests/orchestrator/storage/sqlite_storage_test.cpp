#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include "orchestrator/storage/sqlite_storage.hpp"
#include "tests/orchestrator/storage/storage_conformance.hpp"

namespace fg::storage::testing {
namespace {

// A fresh directory per test under the system temp dir; removed at exit of the process.
std::string fresh_path() {
  static int counter = 0;
  auto dir = std::filesystem::temp_directory_path() /
             ("fg-storage-" + std::to_string(::getpid()) + "-" + std::to_string(++counter));
  std::filesystem::remove_all(dir);
  static struct Cleanup {
    std::vector<std::filesystem::path> dirs;
    ~Cleanup() {
      for (auto& d : dirs) {
        std::error_code ec;
        std::filesystem::remove_all(d, ec);
      }
    }
  } cleanup;
  cleanup.dirs.push_back(dir);
  return (dir / "nested" / "fleetgate.db").string();
}

Opener fresh_sqlite() {
  std::string path = fresh_path();
  return [path] { return std::make_unique<SqliteStorage>(path); };
}

INSTANTIATE_TEST_SUITE_P(Sqlite, StorageConformance,
                         ::testing::Values(Backend{"sqlite", fresh_sqlite}), backend_name);

TEST(SqliteStorage, UsesWalAndRefusesANewerSchema) {
  std::string path = fresh_path();
  { SqliteStorage db(path); }
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(raw, "PRAGMA journal_mode", -1, &stmt, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)), "wal");
  sqlite3_finalize(stmt);
  ASSERT_EQ(sqlite3_exec(raw, "PRAGMA user_version=99", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  try {
    SqliteStorage again(path);
    FAIL() << "opened a newer schema";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("newer"), std::string::npos) << e.what();
  }
}

TEST(SqliteStorage, NamesThePathWhenItCannotOpen) {
  try {
    SqliteStorage db("/proc/definitely/not/here.db");
    FAIL() << "opened";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/definitely/not"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fg::storage::testing
