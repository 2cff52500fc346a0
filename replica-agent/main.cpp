// fleetgate-agent: the per-phone sidecar. Serves one phone's OpenAI-compatible API; for now with
// the `sim` engine, a phone simulator. Wiring only.
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "common/log/log.hpp"
#include "replica-agent/agent/agent.hpp"
#include "replica-agent/agent/options.hpp"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto parsed = fg::agent::parse_args(args);
  if (auto* exit = std::get_if<fg::agent::CliExit>(&parsed)) {
    (exit->code == 0 ? std::cout : std::cerr) << exit->text;
    return exit->code;
  }
  auto options = std::get<fg::agent::AgentOptions>(std::move(parsed));
  fg::log::set_level(options.log_level);
  try {
    fg::agent::Agent agent(std::move(options));
    return agent.run();
  } catch (const std::exception& e) {
    fg::log::error("cannot start", {{"error", e.what()}});
    return 1;
  }
}
