#pragma once

#include <memory>

#include "orchestrator/config/config.hpp"
#include "orchestrator/storage/storage.hpp"

namespace fg::storage {

// The backend storage.backend names, opened (schema created or checked). Throws Error naming
// the key and the path or variable when it cannot.
std::unique_ptr<Storage> open_storage(const config::StorageConfig& config);

}  // namespace fg::storage
