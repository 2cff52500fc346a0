// fleetgate: one OpenAI-compatible URL over a fleet of phone replicas. Wiring only.
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "common/log/log.hpp"
#include "orchestrator/app/gateway.hpp"
#include "orchestrator/cli/batch_command.hpp"
#include "orchestrator/cli/status_command.hpp"
#include "orchestrator/config/config.hpp"
#include "orchestrator/deploy/deploy_command.hpp"
#include "orchestrator/embedded_config.hpp"

namespace {

void usage(std::ostream& out) {
  out << "usage: fleetgate [--config FILE] [--check] [--log-level LEVEL] [--version]\n"
         "       fleetgate status [--admin URL] [--token TOKEN] [--watch] (--help for more)\n"
         "       fleetgate batch submit|status|list|cancel|wait|download ... (--help for more)\n"
         "       fleetgate deploy acurast --config FILE --out DIR [--check] [--renew] (--help)\n"
         "  --config FILE     YAML configuration (default: the embedded config/local.yaml)\n"
         "  --check           validate the configuration and exit (0 valid, 1 invalid)\n"
         "  --log-level LEVEL debug, info, warn or error (overrides log.level)\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "status") == 0) {
    return fg::cli::run_status_command(std::vector<std::string>(argv + 2, argv + argc));
  }
  if (argc >= 2 && std::strcmp(argv[1], "batch") == 0) {
    return fg::cli::run_batch_command(std::vector<std::string>(argv + 2, argv + argc));
  }
  if (argc >= 2 && std::strcmp(argv[1], "deploy") == 0) {
    return fg::deploy::run_deploy_command(std::vector<std::string>(argv + 2, argv + argc));
  }
  std::string config_path;
  std::string log_level;
  bool check = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--config" && i + 1 < argc) {
      config_path = argv[++i];
    } else if (arg == "--check") {
      check = true;
    } else if (arg == "--log-level" && i + 1 < argc) {
      log_level = argv[++i];
    } else if (arg == "--version") {
      std::cout << "fleetgate " FLEETGATE_VERSION "\n";
      return 0;
    } else if (arg == "--help" || arg == "-h") {
      usage(std::cout);
      return 0;
    } else {
      std::cerr << "fleetgate: unknown or incomplete argument '" << arg << "'\n";
      usage(std::cerr);
      return 2;
    }
  }

  fg::config::Config config;
  try {
    config = config_path.empty() ? fg::config::load_config_string(fg::embedded_local_yaml(),
                                                                  "config/local.yaml (embedded)")
                                 : fg::config::load_config_file(config_path);
  } catch (const fg::config::ConfigError& e) {
    std::cerr << "fleetgate: invalid configuration: " << e.what() << "\n";
    return 1;
  }
  if (check) {
    std::cout << "fleetgate: " << (config_path.empty() ? "embedded config" : config_path)
              << " is valid\n";
    return 0;
  }

  fg::log::Level level;
  const std::string& wanted = log_level.empty() ? config.log.level : log_level;
  if (!fg::log::parse_level(wanted, &level)) {
    std::cerr << "fleetgate: unknown log level '" << wanted << "'\n";
    return 2;
  }
  fg::log::set_level(level);
  fg::log::Format format;
  fg::log::parse_format(config.log.format, &format, ::isatty(STDERR_FILENO) == 1);
  fg::log::set_format(format);

  try {
    fg::app::Gateway gateway(std::move(config), config_path);
    return gateway.run();
  } catch (const std::exception& e) {
    fg::log::error("cannot start", {{"error", e.what()}});
    return 1;
  }
}
