#include "orchestrator/deploy/acurast_schema.hpp"

#include <algorithm>
#include <cctype>
#include <set>

#include "orchestrator/fleet/deployment.hpp"

namespace fg::deploy {

namespace {

using nlohmann::json;

// Collects the problems under one path prefix.
class Checker {
 public:
  explicit Checker(std::vector<std::string>* out) : out_(out) {}

  void fail(const std::string& path, const std::string& why) { out_->push_back(path + ": " + why); }

  bool is_number(const json& v) { return v.is_number() && !v.is_boolean(); }

  // A number >= min (zod: z.number().min(min)); false when absent or wrong.
  bool number(const json& obj, const std::string& path, const char* key, double min,
              bool required = true, double max = -1) {
    auto it = obj.find(key);
    if (it == obj.end()) {
      if (required) {
        fail(path + "." + key, "required (a number)");
      }
      return false;
    }
    if (!is_number(*it)) {
      fail(path + "." + key, "expected a number, got " + it->dump());
      return false;
    }
    const double v = it->get<double>();
    if (v < min) {
      fail(path + "." + key, "must be at least " + trim(min) + ", got " + it->dump());
      return false;
    }
    if (max >= 0 && v > max) {
      fail(path + "." + key, "must be at most " + trim(max) + ", got " + it->dump());
      return false;
    }
    return true;
  }

  bool string(const json& obj, const std::string& path, const char* key, bool required = true) {
    auto it = obj.find(key);
    if (it == obj.end()) {
      if (required) {
        fail(path + "." + key, "required (a string)");
      }
      return false;
    }
    if (!it->is_string()) {
      fail(path + "." + key, "expected a string, got " + it->dump());
      return false;
    }
    return true;
  }

  bool boolean(const json& obj, const std::string& path, const char* key, bool required = true) {
    auto it = obj.find(key);
    if (it == obj.end()) {
      if (required) {
        fail(path + "." + key, "required (true or false)");
      }
      return false;
    }
    if (!it->is_boolean()) {
      fail(path + "." + key, "expected true or false, got " + it->dump());
      return false;
    }
    return true;
  }

  bool one_of(const json& obj, const std::string& path, const char* key,
              const std::vector<std::string>& allowed, bool required = true) {
    if (!string(obj, path, key, required)) {
      return false;
    }
    const auto& v = obj.at(key).get_ref<const std::string&>();
    if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
      fail(path + "." + key, "must be one of " + join(allowed) + ", got \"" + v + "\"");
      return false;
    }
    return true;
  }

  bool object(const json& obj, const std::string& path, const char* key, bool required = true) {
    auto it = obj.find(key);
    if (it == obj.end()) {
      if (required) {
        fail(path + "." + key, "required (an object)");
      }
      return false;
    }
    if (!it->is_object()) {
      fail(path + "." + key, "expected an object, got " + it->dump());
      return false;
    }
    return true;
  }

  bool string_array(const json& obj, const std::string& path, const char* key) {
    auto it = obj.find(key);
    if (it == obj.end()) {
      return false;
    }
    if (!it->is_array()) {
      fail(path + "." + key, "expected a list of strings, got " + it->dump());
      return false;
    }
    bool ok = true;
    for (std::size_t i = 0; i < it->size(); ++i) {
      if (!(*it)[i].is_string()) {
        fail(path + "." + key + "[" + std::to_string(i) + "]",
             "expected a string, got " + (*it)[i].dump());
        ok = false;
      }
    }
    return ok;
  }

  // Keys the schema does not know: the CLI drops them silently, so a typo would go unnoticed.
  void known_keys(const json& obj, const std::string& path, const std::set<std::string>& known) {
    for (const auto& [k, v] : obj.items()) {
      if (known.count(k) == 0) {
        fail(path + "." + k, "unknown field (the Acurast CLI ignores it)");
      }
    }
  }

  // zod .strict(): unknown keys are errors in the CLI itself.
  void strict_keys(const json& obj, const std::string& path, const std::set<std::string>& known) {
    for (const auto& [k, v] : obj.items()) {
      if (known.count(k) == 0) {
        fail(path + "." + k, "not allowed here (the Acurast CLI refuses unknown keys in it)");
      }
    }
  }

  static std::string join(const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v) {
      out += (out.empty() ? "" : ", ") + ("\"" + s + "\"");
    }
    return out;
  }

  static std::string trim(double v) {
    std::string s = std::to_string(v);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') {
      s.pop_back();
    }
    return s;
  }

 private:
  std::vector<std::string>* out_;
};

bool is_hex64(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return std::isxdigit(static_cast<unsigned char>(c)) != 0;
         });
}

const std::vector<std::string> kNetworks = {"mainnet", "canary"};
const std::vector<std::string> kModules = {"DataEncryption", "LLM", "Shell"};
const std::vector<std::string> kRestart = {"no", "onFailure", "always"};
const std::vector<std::string> kRuntimes = {"NodeJS", "NodeJSWithBundle", "Shell"};
const std::vector<std::string> kMutability = {"Immutable", "Mutable"};

const std::set<std::string> kProjectKeys = {"projectName",
                                            "fileUrl",
                                            "entrypoint",
                                            "image",
                                            "network",
                                            "onlyAttestedDevices",
                                            "startAt",
                                            "assignmentStrategy",
                                            "execution",
                                            "maxAllowedStartDelayInMs",
                                            "usageLimit",
                                            "numberOfReplicas",
                                            "requiredModules",
                                            "minProcessorReputation",
                                            "maxCostPerExecution",
                                            "includeEnvironmentVariables",
                                            "processorWhitelist",
                                            "minProcessorVersions",
                                            "restartPolicy",
                                            "runtime",
                                            "mutability",
                                            "reuseKeysFrom",
                                            "enableDevtools",
                                            "benchmarkFilters"};

void check_start_at(Checker& c, const json& p, const std::string& path,
                    std::chrono::system_clock::time_point now) {
  auto it = p.find("startAt");
  if (it == p.end()) {
    return;
  }
  const std::string sp = path + ".startAt";
  if (!it->is_object()) {
    c.fail(sp, "expected {msFromNow} or {timestamp}, got " + it->dump());
    return;
  }
  if (it->contains("msFromNow")) {
    c.number(*it, sp, "msFromNow", 0);
    return;
  }
  auto ts = it->find("timestamp");
  if (ts == it->end()) {
    c.fail(sp, "expected {msFromNow: number} or {timestamp: number | ISO string}");
    return;
  }
  if (c.is_number(*ts)) {
    const auto when = std::chrono::system_clock::time_point(
        std::chrono::milliseconds(static_cast<long long>(ts->get<double>())));
    if (when < now) {
      c.fail(sp + ".timestamp", "cannot be in the past");
    }
  } else if (ts->is_string()) {
    // zod's z.string().datetime(): ISO 8601 in UTC with a Z.
    const auto& text = ts->get_ref<const std::string&>();
    if (text.empty() || (text.back() != 'Z') || !fleet::parse_rfc3339(text)) {
      c.fail(sp + ".timestamp",
             "expected an ISO date-time in UTC such as \"2026-12-04T18:00:00Z\", got \"" + text +
                 "\"");
    }
  } else {
    c.fail(sp + ".timestamp", "expected a number (ms since 1970) or an ISO string");
  }
}

void check_assignment(Checker& c, const json& p, const std::string& path) {
  if (!c.object(p, path, "assignmentStrategy")) {
    return;
  }
  const json& a = p.at("assignmentStrategy");
  const std::string ap = path + ".assignmentStrategy";
  if (!c.one_of(a, ap, "type", {"Single", "Competing"})) {
    return;
  }
  if (a.at("type") == "Single") {
    c.known_keys(a, ap, {"type", "instantMatch"});
    if (auto im = a.find("instantMatch"); im != a.end()) {
      if (!im->is_array()) {
        c.fail(ap + ".instantMatch", "expected a list of {processor, maxAllowedStartDelayInMs}");
        return;
      }
      for (std::size_t i = 0; i < im->size(); ++i) {
        const std::string ip = ap + ".instantMatch[" + std::to_string(i) + "]";
        if (!(*im)[i].is_object()) {
          c.fail(ip, "expected {processor, maxAllowedStartDelayInMs}");
          continue;
        }
        c.string((*im)[i], ip, "processor");
        c.number((*im)[i], ip, "maxAllowedStartDelayInMs", 0);
      }
    }
  } else {
    c.known_keys(a, ap, {"type"});
    if (auto env = p.find("includeEnvironmentVariables");
        env != p.end() && env->is_array() && !env->empty()) {
      c.fail(path + ".includeEnvironmentVariables",
             "environment variables are not supported with the Competing assignment strategy");
    }
  }
}

void check_execution(Checker& c, const json& p, const std::string& path) {
  if (!c.object(p, path, "execution")) {
    return;
  }
  const json& e = p.at("execution");
  const std::string ep = path + ".execution";
  if (!c.one_of(e, ep, "type", {"onetime", "interval"})) {
    return;
  }
  if (e.at("type") == "onetime") {
    c.strict_keys(e, ep, {"type", "maxExecutionTimeInMs"});
    c.number(e, ep, "maxExecutionTimeInMs", 1);
    return;
  }
  c.strict_keys(e, ep, {"type", "intervalInMs", "numberOfExecutions", "maxExecutionTimeInMs"});
  const bool interval = c.number(e, ep, "intervalInMs", 1);
  c.number(e, ep, "numberOfExecutions", 1);
  if (c.number(e, ep, "maxExecutionTimeInMs", 1, false) && interval &&
      e.at("maxExecutionTimeInMs").get<double>() >= e.at("intervalInMs").get<double>()) {
    c.fail(ep + ".maxExecutionTimeInMs", "must be less than intervalInMs");
  }
}

void check_project(Checker& c, const std::string& name, const json& p,
                   std::chrono::system_clock::time_point now) {
  const std::string path = "projects." + name;
  if (!p.is_object()) {
    c.fail(path, "expected an object");
    return;
  }
  c.known_keys(p, path, kProjectKeys);
  if (c.string(p, path, "projectName") && p.at("projectName") != name) {
    c.fail(path + ".projectName", "should equal the project's key \"" + name + "\"");
  }
  c.string(p, path, "fileUrl");
  c.string(p, path, "entrypoint", false);
  c.one_of(p, path, "network", kNetworks);
  c.boolean(p, path, "onlyAttestedDevices");
  check_start_at(c, p, path, now);
  check_assignment(c, p, path);
  check_execution(c, p, path);
  c.number(p, path, "maxAllowedStartDelayInMs", 0);
  if (c.object(p, path, "usageLimit")) {
    const json& u = p.at("usageLimit");
    const std::string up = path + ".usageLimit";
    c.known_keys(u, up, {"maxMemory", "maxNetworkRequests", "maxStorage"});
    c.number(u, up, "maxMemory", 0);
    c.number(u, up, "maxNetworkRequests", 0);
    c.number(u, up, "maxStorage", 0);
  }
  c.number(p, path, "numberOfReplicas", 1, true, 64);
  if (auto m = p.find("requiredModules"); m != p.end()) {
    if (!m->is_array()) {
      c.fail(path + ".requiredModules", "expected a list of module names");
    } else {
      for (std::size_t i = 0; i < m->size(); ++i) {
        const json& v = (*m)[i];
        if (!v.is_string() ||
            std::find(kModules.begin(), kModules.end(), v.get<std::string>()) == kModules.end()) {
          c.fail(path + ".requiredModules[" + std::to_string(i) + "]",
                 "must be one of " + Checker::join(kModules) + ", got " + v.dump());
        }
      }
    }
  }
  c.number(p, path, "minProcessorReputation", 0);
  c.number(p, path, "maxCostPerExecution", 0);
  c.string_array(p, path, "includeEnvironmentVariables");
  c.string_array(p, path, "processorWhitelist");
  if (auto v = p.find("minProcessorVersions"); v != p.end()) {
    const std::string vp = path + ".minProcessorVersions";
    if (!v->is_object() || (!v->contains("android") && !v->contains("ios"))) {
      c.fail(vp, "expected {android?, ios?} with at least one of them");
    } else {
      c.known_keys(*v, vp, {"android", "ios"});
      for (const char* k : {"android", "ios"}) {
        if (auto x = v->find(k); x != v->end() && !x->is_string() && !c.is_number(*x)) {
          c.fail(vp + "." + k, "expected a version string or a build number");
        }
      }
    }
  }
  c.one_of(p, path, "restartPolicy", kRestart, false);
  const bool has_runtime = c.one_of(p, path, "runtime", kRuntimes, false);
  c.one_of(p, path, "mutability", kMutability, false);
  if (auto r = p.find("reuseKeysFrom"); r != p.end()) {
    if (!r->is_array() || r->size() != 3 || (*r)[0] != "Acurast" || !(*r)[1].is_string() ||
        !c.is_number((*r)[2])) {
      c.fail(path + ".reuseKeysFrom", "expected [\"Acurast\", deployer address, deployment id]");
    }
  }
  c.boolean(p, path, "enableDevtools", false);
  const bool shell = has_runtime && p.at("runtime") == "Shell";
  if (c.object(p, path, "image", shell)) {
    const json& img = p.at("image");
    const std::string ip = path + ".image";
    c.known_keys(img, ip, {"url", "sha256"});
    c.string(img, ip, "url");
    if (c.string(img, ip, "sha256") && !is_hex64(img.at("sha256").get<std::string>())) {
      c.fail(ip + ".sha256", "expected 64 hex characters");
    }
  }
  if (shell) {
    const auto m = p.find("requiredModules");
    const bool has_shell =
        m != p.end() && m->is_array() && std::find(m->begin(), m->end(), json("Shell")) != m->end();
    if (!has_shell) {
      c.fail(path + ".requiredModules", "must list \"Shell\" for the Shell runtime");
    }
  }
  if (c.object(p, path, "benchmarkFilters", false)) {
    const json& b = p.at("benchmarkFilters");
    const std::string bp = path + ".benchmarkFilters";
    c.known_keys(b, bp,
                 {"minRamTotalBytes", "minCpuSingleCoreScore", "minCpuMultiCoreScore",
                  "minStorageAvailBytes", "poolIds"});
    for (const char* k : {"minRamTotalBytes", "minCpuSingleCoreScore", "minCpuMultiCoreScore",
                          "minStorageAvailBytes"}) {
      c.number(b, bp, k, 0, false);
    }
    if (c.object(b, bp, "poolIds", false)) {
      const json& ids = b.at("poolIds");
      c.known_keys(ids, bp + ".poolIds",
                   {"cpuSingleCore", "cpuMultiCore", "ramTotal", "storageAvail"});
      for (const char* k : {"cpuSingleCore", "cpuMultiCore", "ramTotal", "storageAvail"}) {
        c.number(ids, bp + ".poolIds", k, 0, false, 255);
      }
    }
  }
}

}  // namespace

std::vector<std::string> check_acurast_json(const json& doc,
                                            std::chrono::system_clock::time_point now) {
  std::vector<std::string> problems;
  Checker c(&problems);
  if (!doc.is_object()) {
    c.fail("(document)", "expected an object with \"projects\"");
    return problems;
  }
  auto projects = doc.find("projects");
  if (projects == doc.end() || !projects->is_object() || projects->empty()) {
    c.fail("projects", "expected an object with at least one project");
    return problems;
  }
  for (const auto& [name, project] : projects->items()) {
    check_project(c, name, project, now);
  }
  return problems;
}

std::vector<std::string> check_shell_manifest(const json& m) {
  std::vector<std::string> problems;
  Checker c(&problems);
  if (!m.is_object()) {
    c.fail("manifest.json", "expected an object");
    return problems;
  }
  const std::string path = "manifest.json";
  c.known_keys(m, path, {"version", "entrypoint", "image", "name", "restartPolicy"});
  if (c.string(m, path, "version") && m.at("version") != "1") {
    c.fail(path + ".version", "must be \"1\"");
  }
  c.string(m, path, "entrypoint");
  if (c.object(m, path, "image")) {
    const json& img = m.at("image");
    c.string(img, path + ".image", "url");
    if (c.string(img, path + ".image", "sha256") &&
        !is_hex64(img.at("sha256").get<std::string>())) {
      c.fail(path + ".image.sha256", "expected 64 hex characters");
    }
  }
  return problems;
}

}  // namespace fg::deploy
