#include "orchestrator/deploy/acurast_schema.hpp"

#include <gtest/gtest.h>

#include <string>

#include "orchestrator/fleet/deployment.hpp"

namespace fg::deploy {
namespace {

using nlohmann::json;

const auto kNow = fleet::parse_rfc3339("2026-12-03T18:00:00Z").value();

// A valid Shell project, as the CLI's schema accepts it.
json project() {
  return {{"projectName", "p"},
          {"fileUrl", "app"},
          {"entrypoint", "start.sh"},
          {"runtime", "Shell"},
          {"image", {{"url", "https://img/d.tar.xz"}, {"sha256", std::string(64, 'c')}}},
          {"network", "mainnet"},
          {"onlyAttestedDevices", true},
          {"startAt", {{"msFromNow", 600000}}},
          {"assignmentStrategy", {{"type", "Single"}}},
          {"execution", {{"type", "onetime"}, {"maxExecutionTimeInMs", 86400000}}},
          {"maxAllowedStartDelayInMs", 600000},
          {"usageLimit", {{"maxMemory", 0}, {"maxNetworkRequests", 0}, {"maxStorage", 0}}},
          {"numberOfReplicas", 10},
          {"requiredModules", {"Shell"}},
          {"minProcessorReputation", 0},
          {"maxCostPerExecution", 1000000000},
          {"includeEnvironmentVariables", {"FLEETGATE_REGISTRATION_TOKEN"}},
          {"restartPolicy", "onFailure"}};
}

std::vector<std::string> check(const json& p) {
  return check_acurast_json({{"projects", {{"p", p}}}}, kNow);
}

// The first problem, or "" when valid.
std::string first(const json& p) {
  const auto problems = check(p);
  return problems.empty() ? "" : problems.front();
}

TEST(AcurastSchema, AValidProjectPasses) {
  EXPECT_EQ(check(project()), std::vector<std::string>{});
  // The optional fields in their other allowed forms.
  json p = project();
  p["startAt"] = {{"timestamp", "2026-12-04T18:00:00Z"}};
  p["assignmentStrategy"] = {
      {"type", "Single"},
      {"instantMatch", {{{"processor", "5Gx"}, {"maxAllowedStartDelayInMs", 0}}}}};
  p["execution"] = {{"type", "interval"},
                    {"intervalInMs", 3600000},
                    {"numberOfExecutions", 24},
                    {"maxExecutionTimeInMs", 3500000}};
  p["minProcessorVersions"] = {{"android", "1.26.0"}};
  p["mutability"] = "Mutable";
  p["reuseKeysFrom"] = {"Acurast", "5Gx", 17};
  p["benchmarkFilters"] = {{"minRamTotalBytes", 12000000000}, {"poolIds", {{"ramTotal", 3}}}};
  p["processorWhitelist"] = {"5Gx"};
  p["enableDevtools"] = false;
  EXPECT_EQ(check(p), std::vector<std::string>{});
}

TEST(AcurastSchema, EveryFieldsTypeAndValuesAreChecked) {
  struct Case {
    std::string field;
    json value;
    std::string problem;
  };
  const Case cases[] = {
      {"projectName", 7, "projects.p.projectName: expected a string"},
      {"projectName", "other", "projects.p.projectName: should equal the project's key"},
      {"fileUrl", nullptr, "projects.p.fileUrl: expected a string"},
      {"network", "testnet", "projects.p.network: must be one of \"mainnet\", \"canary\""},
      {"onlyAttestedDevices", "yes", "projects.p.onlyAttestedDevices: expected true or false"},
      {"startAt", {{"msFromNow", -1}}, "projects.p.startAt.msFromNow: must be at least 0"},
      {"startAt", {{"timestamp", 1000}}, "projects.p.startAt.timestamp: cannot be in the past"},
      {"startAt", {{"timestamp", "tomorrow"}}, "projects.p.startAt.timestamp: expected an ISO"},
      {"startAt", {{"when", 1}}, "projects.p.startAt: expected {msFromNow"},
      {"assignmentStrategy",
       {{"type", "Random"}},
       "projects.p.assignmentStrategy.type: must be one of"},
      {"execution",
       {{"type", "onetime"}, {"maxExecutionTimeInMs", 0}},
       "projects.p.execution.maxExecutionTimeInMs: must be at least 1"},
      {"execution",
       {{"type", "onetime"}, {"maxExecutionTimeInMs", 5}, {"extra", 1}},
       "projects.p.execution.extra: not allowed here"},
      {"execution",
       {{"type", "interval"},
        {"intervalInMs", 10},
        {"numberOfExecutions", 1},
        {"maxExecutionTimeInMs", 10}},
       "projects.p.execution.maxExecutionTimeInMs: must be less than intervalInMs"},
      {"execution",
       {{"type", "interval"}, {"intervalInMs", 10}},
       "projects.p.execution.numberOfExecutions: required"},
      {"maxAllowedStartDelayInMs", "10m", "projects.p.maxAllowedStartDelayInMs: expected a number"},
      {"usageLimit",
       {{"maxMemory", 0}, {"maxStorage", 0}},
       "projects.p.usageLimit.maxNetworkRequests: required"},
      {"numberOfReplicas", 0, "projects.p.numberOfReplicas: must be at least 1"},
      {"numberOfReplicas", 65, "projects.p.numberOfReplicas: must be at most 64"},
      {"requiredModules", {"Shell", "GPU"}, "projects.p.requiredModules[1]: must be one of"},
      {"requiredModules", {"DataEncryption"}, "projects.p.requiredModules: must list \"Shell\""},
      {"minProcessorReputation", -5, "projects.p.minProcessorReputation: must be at least 0"},
      {"maxCostPerExecution", true, "projects.p.maxCostPerExecution: expected a number"},
      {"includeEnvironmentVariables",
       {"A", 1},
       "projects.p.includeEnvironmentVariables[1]: expected a string"},
      {"minProcessorVersions", json::object(),
       "projects.p.minProcessorVersions: expected {android?, ios?}"},
      {"restartPolicy", "sometimes",
       "projects.p.restartPolicy: must be one of \"no\", \"onFailure\", \"always\""},
      {"runtime", "Python", "projects.p.runtime: must be one of"},
      {"mutability", "Frozen", "projects.p.mutability: must be one of"},
      {"reuseKeysFrom", {"Acurast", "x"}, "projects.p.reuseKeysFrom: expected"},
      {"image",
       {{"url", "https://x"}, {"sha256", "abc"}},
       "projects.p.image.sha256: expected 64 hex"},
      {"image", nullptr, "projects.p.image: expected an object"},
      {"benchmarkFilters",
       {{"minRamTotalBytes", "12GB"}},
       "projects.p.benchmarkFilters.minRamTotalBytes: expected a number"},
      {"enableDevtools", 1, "projects.p.enableDevtools: expected true or false"},
      {"maxCostPerExecutoin", 5, "projects.p.maxCostPerExecutoin: unknown field"},
  };
  for (const auto& c : cases) {
    json p = project();
    p[c.field] = c.value;
    EXPECT_EQ(first(p).rfind(c.problem, 0), 0u)
        << c.field << " = " << c.value.dump() << ": got " << first(p);
  }
}

TEST(AcurastSchema, RequiredFieldsAndTheirAbsence) {
  for (const char* field :
       {"projectName", "fileUrl", "network", "onlyAttestedDevices", "assignmentStrategy",
        "execution", "maxAllowedStartDelayInMs", "usageLimit", "numberOfReplicas",
        "minProcessorReputation", "maxCostPerExecution"}) {
    json p = project();
    p.erase(field);
    EXPECT_EQ(first(p).rfind(std::string("projects.p.") + field + ": required", 0), 0u)
        << field << ": " << first(p);
  }
  // The Shell runtime needs its image.
  json p = project();
  p.erase("image");
  EXPECT_EQ(first(p).rfind("projects.p.image: required", 0), 0u) << first(p);
  // Optional ones may go.
  for (const char* field : {"entrypoint", "startAt", "requiredModules", "restartPolicy",
                            "includeEnvironmentVariables"}) {
    json q = project();
    q.erase(field);
    if (std::string(field) == "requiredModules") {
      q["runtime"] = "NodeJS";
      q.erase("image");
    }
    EXPECT_EQ(check(q), std::vector<std::string>{}) << field;
  }
}

TEST(AcurastSchema, CompetingTakesNoEnvironment) {
  json p = project();
  p["assignmentStrategy"] = {{"type", "Competing"}};
  EXPECT_EQ(first(p).rfind("projects.p.includeEnvironmentVariables: environment variables are not "
                           "supported with the Competing",
                           0),
            0u)
      << first(p);
  p["includeEnvironmentVariables"] = json::array();
  EXPECT_EQ(check(p), std::vector<std::string>{});
}

TEST(AcurastSchema, TheDocumentAndTheManifest) {
  EXPECT_FALSE(check_acurast_json(json::array(), kNow).empty());
  EXPECT_FALSE(check_acurast_json({{"projects", json::object()}}, kNow).empty());
  const json ok = {{"version", "1"},
                   {"entrypoint", "start.sh"},
                   {"image", {{"url", "https://img"}, {"sha256", std::string(64, 'd')}}}};
  EXPECT_TRUE(check_shell_manifest(ok).empty());
  json bad = ok;
  bad["version"] = 1;
  EXPECT_FALSE(check_shell_manifest(bad).empty());
  bad = ok;
  bad.erase("image");
  EXPECT_FALSE(check_shell_manifest(bad).empty());
  bad = ok;
  bad["image"]["sha256"] = "x";
  EXPECT_FALSE(check_shell_manifest(bad).empty());
}

}  // namespace
}  // namespace fg::deploy
