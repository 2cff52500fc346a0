#pragma once

#include <string>
#include <vector>

namespace fg::cli {

// `fleetgate batch ...`: args are those after "batch". Returns the exit code (batch_report.hpp).
int run_batch_command(const std::vector<std::string>& args);

}  // namespace fg::cli
