#pragma once

#include <string>
#include <vector>

namespace fg::deploy {

// `fleetgate deploy acurast --config FILE [--model NAME] --out DIR [--check] [--renew]
// [--no-binaries] [--source DIR]`: the thin shell around render_acurast and the schema checks
// (reads the YAML and the previous deployment.json, writes the files, copies the binaries).
// Exit codes: 0 done, 1 invalid configuration / schema / missing binaries, 2 usage.
int run_deploy_command(const std::vector<std::string>& args);

}  // namespace fg::deploy
