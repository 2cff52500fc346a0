#include <gtest/gtest.h>

#include "orchestrator/config/config.hpp"

namespace fg::config {
namespace {

const std::string kModels = "models:\n  - name: m\n    endpoints: [\"http://127.0.0.1:1\"]\n";

std::string error_of(const std::string& text) {
  try {
    load_config_string(text, "t.yaml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigBatch, DefaultsAreTheEmbeddedOnes) {
  Config c = load_config_string(kModels, "t.yaml");
  EXPECT_EQ(c.storage.backend, "sqlite");
  EXPECT_EQ(c.storage.path, ".fleetgate/fleetgate.db");
  EXPECT_TRUE(c.batch.enabled);
  EXPECT_EQ(c.batch.max_lines, 50'000u);
  EXPECT_EQ(c.batch.max_file_bytes, 200ull * 1024 * 1024);
  EXPECT_EQ(c.batch.max_file_lines, 1'000'000u);
  EXPECT_EQ(c.batch.max_in_flight, 64u);
  EXPECT_EQ(c.batch.slots_per_batch, 0u);
  EXPECT_EQ(c.batch.max_attempts, 3u);
}

TEST(ConfigBatch, ReadsEveryKey) {
  Config c =
      load_config_string(kModels +
                             "storage:\n  path: /tmp/x.db\n"
                             "batch:\n  enabled: false\n  max_lines: 10\n"
                             "  max_in_flight: 4\n  slots_per_batch: 2\n  max_attempts: 5\n"
                             "  retry_backoff: 250ms\n  lease_timeout: 1m\n"
                             "  poll_interval: 2s\n  max_file_bytes: 1000\n  max_file_lines: 7\n",
                         "t.yaml");
  EXPECT_EQ(c.storage.path, "/tmp/x.db");
  EXPECT_FALSE(c.batch.enabled);
  EXPECT_EQ(c.batch.max_lines, 10u);
  EXPECT_EQ(c.batch.max_in_flight, 4u);
  EXPECT_EQ(c.batch.slots_per_batch, 2u);
  EXPECT_EQ(c.batch.max_attempts, 5u);
  EXPECT_EQ(c.batch.retry_backoff.count(), 250);
  EXPECT_EQ(c.batch.lease_timeout.count(), 60'000);
  EXPECT_EQ(c.batch.poll_interval.count(), 2'000);
  EXPECT_EQ(c.batch.max_file_bytes, 1000u);
  EXPECT_EQ(c.batch.max_file_lines, 7u);
}

TEST(ConfigBatch, NamesTheKeyOfABadValue) {
  EXPECT_NE(error_of(kModels + "batch:\n  max_in_flight: 0\n").find("batch.max_in_flight"),
            std::string::npos);
  EXPECT_NE(error_of(kModels + "batch:\n  max_inflight: 3\n").find("max_in_flight"),
            std::string::npos);  // did you mean
  EXPECT_NE(error_of(kModels + "storage:\n  backend: mysql\n").find("storage.backend"),
            std::string::npos);
  EXPECT_NE(error_of(kModels + "storage:\n  backend: postgres\n").find("url_env"),
            std::string::npos);
  EXPECT_NE(error_of(kModels + "storage:\n  path: \"\"\n").find("storage.path"), std::string::npos);
}

}  // namespace
}  // namespace fg::config
