#include "orchestrator/storage/open_storage.hpp"

#include <cstdlib>

#include "orchestrator/storage/postgres_storage.hpp"
#include "orchestrator/storage/sqlite_storage.hpp"

namespace fg::storage {

std::unique_ptr<Storage> open_storage(const config::StorageConfig& config) {
  if (config.backend == "sqlite") {
    try {
      return std::make_unique<SqliteStorage>(config.path);
    } catch (const Error& e) {
      throw Error(std::string("storage.path: ") + e.what());
    }
  }
  if (config.backend == "postgres") {
    const char* url = std::getenv(config.url_env.c_str());
    if (url == nullptr || *url == '\0') {
      throw Error("storage.url_env: the environment variable " + config.url_env +
                  " is not set (it holds the PostgreSQL URL, e.g. postgresql://user:pw@host/db)");
    }
    try {
      return std::make_unique<PostgresStorage>(url);
    } catch (const Error& e) {
      throw Error("storage (postgres, URL from $" + config.url_env + "): " + e.what());
    }
  }
  throw Error("storage.backend: '" + config.backend + "' is not built into this gateway");
}

}  // namespace fg::storage
