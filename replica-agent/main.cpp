// fleetgate-agent: the per-phone sidecar. Serves one phone's OpenAI-compatible API (a simulated
// phone, or a local llama.cpp / OpenAI-compatible engine), enforces its slots and registers it
// with a gateway. Wiring only.
#include <unistd.h>

#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "common/log/log.hpp"
#include "replica-agent/agent/agent.hpp"
#include "replica-agent/config/agent_config.hpp"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto parsed = fg::agent::parse_command_line(args, FLEETGATE_VERSION);
  if (auto* exit = std::get_if<fg::agent::CliExit>(&parsed)) {
    (exit->code == 0 ? std::cout : std::cerr) << exit->text;
    return exit->code;
  }
  auto invocation = std::get<fg::agent::Invocation>(std::move(parsed));
  fg::log::set_level(invocation.config.log_level);
  fg::log::Format format;
  fg::log::parse_format(invocation.config.log_format, &format, ::isatty(STDERR_FILENO) == 1);
  fg::log::set_format(format);
  try {
    fg::agent::Agent agent(std::move(invocation.config));
    return agent.run();
  } catch (const std::exception& e) {
    fg::log::error("cannot start", {{"error", e.what()}});
    return 1;
  }
}
