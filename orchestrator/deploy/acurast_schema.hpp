#pragma once

// The Acurast CLI's acurast.json schema, encoded: every field's type and allowed values, so that
// `fleetgate deploy acurast --check` refuses what `acurast deploy` would refuse. Sources
// (docs/deploy-acurast.md#the-schema-checked): the zod schema of acurast-cli v0.6.0
// (src/util/validateConfig.ts: types, minimums, numberOfReplicas 1..64, strict execution) and
// the newer CLI/SDK types (v1.2.x: runtime Shell, requiredModules Shell, image {url, sha256},
// benchmarkFilters, enableDevtools). Pure.

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fg::deploy {

// Problems with one acurast.json document ({"projects": {name: config}}), each as
// "projects.<name>.<field>: <why>". Empty: valid. now: for startAt.timestamp (not in the past).
std::vector<std::string> check_acurast_json(const nlohmann::json& doc,
                                            std::chrono::system_clock::time_point now);

// Problems with a Shell runtime folder's manifest.json ({"version": "1", "entrypoint",
// "image": {url, sha256}}).
std::vector<std::string> check_shell_manifest(const nlohmann::json& manifest);

}  // namespace fg::deploy
