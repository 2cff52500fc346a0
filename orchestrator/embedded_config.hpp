#pragma once

#include <string>

namespace fg {
// The text of config/local.yaml, compiled in so that `fleetgate` runs with no arguments.
const std::string& embedded_local_yaml();
}  // namespace fg
