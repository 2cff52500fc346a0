#include "orchestrator/storage/storage.hpp"

#include <array>

namespace fg::storage {

namespace {
constexpr std::array<const char*, kBatchStatusCount> kStatusNames = {
    "validating", "failed",  "in_progress", "finalizing",
    "completed",  "expired", "cancelling",  "cancelled"};
}  // namespace

const char* to_string(BatchStatus status) {
  return kStatusNames[static_cast<int>(status)];
}

std::optional<BatchStatus> parse_batch_status(std::string_view name) {
  for (int i = 0; i < kBatchStatusCount; ++i) {
    if (name == kStatusNames[i]) {
      return static_cast<BatchStatus>(i);
    }
  }
  return std::nullopt;
}

bool is_terminal(BatchStatus status) {
  return status == BatchStatus::completed || status == BatchStatus::failed ||
         status == BatchStatus::expired || status == BatchStatus::cancelled;
}

}  // namespace fg::storage
