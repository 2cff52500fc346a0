#pragma once

#include <string>
#include <vector>

namespace fg::cli {

// `fleetgate status ...`: args are those after "status". Returns the exit code (status_report.hpp).
int run_status_command(const std::vector<std::string>& args);

}  // namespace fg::cli
