#include "orchestrator/storage/open_storage.hpp"

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
  throw Error("storage.backend: '" + config.backend + "' is not built into this gateway");
}

}  // namespace fg::storage
