// Fuzz target: the agent's YAML configuration, loaded from a string and validated
// (replica-agent/config: load_agent_config_string, validate_agent_config). Any input must either
// load or be refused with an AgentConfigError naming the file and a line.

#include <cstddef>
#include <cstdint>
#include <string>

#include "replica-agent/config/agent_config.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fg::agent::AgentConfig config;
  fg::agent::Origins origins;
  try {
    fg::agent::load_agent_config_string(text, "fuzz.yaml", config, &origins);
  } catch (const fg::agent::AgentConfigError& e) {
    const std::string what = e.what();
    FUZZ_CHECK(what.rfind("fuzz.yaml:", 0) == 0, "a refusal names the file and the line");
    return 0;
  }
  try {
    fg::agent::validate_agent_config(config, origins);
  } catch (const fg::agent::AgentConfigError&) {
    // Checks across keys name the keys' origins (or the flags); any message will do.
  }
  return 0;
}
