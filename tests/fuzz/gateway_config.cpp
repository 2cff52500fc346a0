// Fuzz target: the gateway's YAML configuration, loaded and validated from a string
// (orchestrator/config: load_config_string). Any input must either load or be refused with a
// ConfigError naming the file and a line; anything else (another exception, a crash, a hang, a
// deep recursion) is a finding.

#include <cstddef>
#include <cstdint>
#include <string>

#include "orchestrator/config/config.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const fg::config::Config config = fg::config::load_config_string(text, "fuzz.yaml");
    FUZZ_CHECK(!config.models.empty(), "an accepted configuration serves a model");
  } catch (const fg::config::ConfigError& e) {
    const std::string what = e.what();
    FUZZ_CHECK(what.rfind("fuzz.yaml:", 0) == 0, "a refusal names the file and the line");
  }
  return 0;
}
