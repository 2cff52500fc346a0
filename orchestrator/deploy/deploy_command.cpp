#include "orchestrator/deploy/deploy_command.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/util/json.hpp"
#include "orchestrator/config/config.hpp"
#include "orchestrator/deploy/acurast_render.hpp"
#include "orchestrator/deploy/acurast_schema.hpp"

namespace fg::deploy {

namespace fs = std::filesystem;

namespace {

constexpr const char* kUsage =
    "usage: fleetgate deploy acurast --config FILE --out DIR [--model NAME] [--check] [--renew]\n"
    "                                [--no-binaries] [--source DIR]\n"
    "  renders an Acurast project for each model with a deploy.acurast section\n"
    "  (docs/deploy-acurast.md) into DIR/<model>/\n"
    "  --model NAME    only this model\n"
    "  --check         render and validate against the Acurast CLI's schema; write nothing\n"
    "  --renew         the next deployment of DIR/<model>/deployment.json, starting\n"
    "                  renew_overlap before it ends (new project names and times)\n"
    "  --no-binaries   do not copy the aarch64 fleetgate-agent and llama-server\n"
    "  --source DIR    where build-aarch64/ and .cache/ are (default: the current directory)\n";

struct Options {
  std::string config;
  std::string out;
  std::string model;
  std::string source = ".";
  bool check = false;
  bool renew = false;
  bool binaries = true;
};

int usage_error(const std::string& why) {
  std::cerr << "fleetgate deploy: " << why << "\n" << kUsage;
  return 2;
}

bool read_file(const fs::path& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// A secret value present here must not be in any rendered file (belt and braces: the renderer
// only ever writes variable names).
std::vector<std::string> leaked_secrets(const RenderedDeployment& d) {
  std::vector<std::string> leaks;
  for (const auto& name : d.secret_env) {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr || std::string_view(value).size() < 8) {
      continue;
    }
    for (const auto& f : d.files) {
      if (f.content.find(value) != std::string::npos) {
        leaks.push_back(f.path + " contains the value of " + name);
      }
    }
  }
  return leaks;
}

}  // namespace

int run_deploy_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  if (args[0] != "acurast") {
    return usage_error("unknown deploy target '" + args[0] + "' (only 'acurast')");
  }
  Options o;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_value = i + 1 < args.size();
    if (a == "--config" && has_value) {
      o.config = args[++i];
    } else if (a == "--out" && has_value) {
      o.out = args[++i];
    } else if (a == "--model" && has_value) {
      o.model = args[++i];
    } else if (a == "--source" && has_value) {
      o.source = args[++i];
    } else if (a == "--check") {
      o.check = true;
    } else if (a == "--renew") {
      o.renew = true;
    } else if (a == "--no-binaries") {
      o.binaries = false;
    } else if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    } else {
      return usage_error("unknown or incomplete argument '" + a + "'");
    }
  }
  if (o.config.empty()) {
    return usage_error("--config FILE is required");
  }
  if (o.out.empty() && !o.check) {
    return usage_error("--out DIR is required");
  }
  if (o.renew && o.out.empty()) {
    return usage_error("--renew needs --out DIR (where the deployment being renewed is)");
  }

  config::Config config;
  try {
    config = config::load_config_file(o.config);
  } catch (const config::ConfigError& e) {
    std::cerr << "fleetgate deploy: invalid configuration: " << e.what() << "\n";
    return 1;
  }
  std::vector<const config::ModelConfig*> models;
  for (const auto& m : config.models) {
    if (!o.model.empty() && m.name != o.model) {
      continue;
    }
    if (!m.acurast) {
      if (!o.model.empty()) {
        std::cerr << "fleetgate deploy: " << o.config << ": model '" << m.name
                  << "' has no deploy.acurast section\n";
        return 1;
      }
      continue;
    }
    models.push_back(&m);
  }
  if (!o.model.empty() && config.find_model(o.model) == nullptr) {
    std::cerr << "fleetgate deploy: " << o.config << ": no model named '" << o.model << "'\n";
    return 1;
  }
  if (models.empty()) {
    std::cerr << "fleetgate deploy: " << o.config
              << ": no model has a deploy.acurast section (docs/deploy-acurast.md)\n";
    return 1;
  }

  const auto now = std::chrono::system_clock::now();
  int status = 0;
  for (const auto* m : models) {
    std::optional<DeploymentState> previous;
    const fs::path folder = fs::path(o.out) / model_folder(m->name);
    if (o.renew) {
      std::string text;
      std::string why;
      if (!read_file(folder / "deployment.json", &text)) {
        std::cerr << "fleetgate deploy: --renew: " << (folder / "deployment.json").string()
                  << " not found: render the first deployment of '" << m->name
                  << "' without --renew\n";
        return 1;
      }
      previous = parse_state(text, &why);
      if (!previous) {
        std::cerr << "fleetgate deploy: --renew: " << (folder / "deployment.json").string() << ": "
                  << why << "\n";
        return 1;
      }
    }
    const RenderedDeployment d = render_acurast(config, *m, now, previous);
    std::vector<std::string> problems = gateway_problems(config, *m);
    for (const auto& f : d.files) {
      if (f.path == "acurast.json") {
        for (auto& p : check_acurast_json(parse_network_json(f.content), now)) {
          problems.push_back("acurast.json: " + p);
        }
      } else if (f.path == "app/manifest.json") {
        for (auto& p : check_shell_manifest(parse_network_json(f.content))) {
          problems.push_back("app/" + p);
        }
      }
    }
    for (auto& leak : leaked_secrets(d)) {
      problems.push_back(leak);
    }
    if (!problems.empty()) {
      for (const auto& p : problems) {
        std::cerr << "fleetgate deploy: " << m->name << ": " << p << "\n";
      }
      status = 1;
      continue;
    }
    for (const auto& note : d.notes) {
      std::cerr << "fleetgate deploy: " << m->name << ": note: " << note << "\n";
    }
    if (o.check) {
      std::cout << m->name << ": ok (" << d.state.projects.size() << " project"
                << (d.state.projects.size() == 1 ? "" : "s") << ", " << m->replicas
                << " phones, generation " << d.state.generation << ")\n";
      continue;
    }
    std::vector<std::pair<fs::path, fs::path>> copies;
    for (const auto& b : d.binaries) {
      const fs::path from = fs::path(o.source) / b.from;
      if (!o.binaries) {
        continue;
      }
      if (!fs::is_regular_file(from)) {
        std::cerr << "fleetgate deploy: " << m->name << ": " << from.string()
                  << " is missing: build it with ./fleet build --target aarch64, point --source "
                     "at the checkout that has it, or pass --no-binaries\n";
        return 1;
      }
      copies.emplace_back(from, folder / b.to);
    }
    std::error_code ec;
    for (const auto& f : d.files) {
      const fs::path path = folder / f.path;
      fs::create_directories(path.parent_path(), ec);
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out << f.content;
      out.close();
      if (!out) {
        std::cerr << "fleetgate deploy: cannot write " << path.string() << "\n";
        return 1;
      }
      fs::permissions(path, f.executable ? fs::perms(0755) : fs::perms(0644),
                      fs::perm_options::replace, ec);
    }
    for (const auto& [from, to] : copies) {
      fs::create_directories(to.parent_path(), ec);
      if (!fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec) || ec) {
        std::cerr << "fleetgate deploy: cannot copy " << from.string() << " to " << to.string()
                  << ": " << ec.message() << "\n";
        return 1;
      }
      fs::permissions(to, fs::perms(0755), fs::perm_options::replace, ec);
    }
    std::cout << m->name << ": generation " << d.state.generation << ", " << m->replicas
              << " phones in " << d.state.projects.size() << " project"
              << (d.state.projects.size() == 1 ? "" : "s") << ", starts "
              << nlohmann::json(state_json(d.state))["starts_at"].get<std::string>() << ", ends "
              << state_json(d.state)["ends_at"].get<std::string>() << "\n"
              << "  " << folder.string()
              << "/  (cp .env.example .env, fill it in, then: acurast deploy"
              << (d.state.projects.size() == 1 ? " " + d.state.projects[0] : " <project>") << ")\n";
  }
  return status;
}

}  // namespace fg::deploy
