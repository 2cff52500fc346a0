#include "tests/orchestrator/storage/pg_harness.hpp"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>

namespace fg::test {
namespace {

const std::string kScript = std::string(FG_SOURCE_DIR) + "/tests/postgres/pg_server.sh";

// Runs a command through the shell; returns its exit status and stdout (stderr goes through).
int run(const std::string& command, std::string* out) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
  if (!pipe) {
    return -1;
  }
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe.get())) > 0) {
    out->append(buf.data(), n);
  }
  const int status = ::pclose(pipe.release());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string shell_quoted(const std::string& s) {
  return "'" + s + "'";
}

class Server {
 public:
  Server() {
    std::string out;
    const int check = run(shell_quoted(kScript) + " check 2>&1", &out);
    if (check == 77) {
      state_.skip_reason = out.empty() ? "PostgreSQL server binaries missing" : out;
      while (!state_.skip_reason.empty() && state_.skip_reason.back() == '\n') {
        state_.skip_reason.pop_back();
      }
      return;
    }
    if (check != 0) {
      ADD_FAILURE() << "pg_server.sh check failed (" << check << "): " << out;
      return;
    }
    std::string pattern =
        (std::filesystem::temp_directory_path() / "fleetgate-pg-gtest-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp failed";
      return;
    }
    dir_ = pattern;
    out.clear();
    const int started = run(shell_quoted(kScript) + " start " + shell_quoted(dir_) + " --watch " +
                                std::to_string(::getpid()),
                            &out);
    const auto at = out.find("url=");
    if (started != 0 || at == std::string::npos) {
      ADD_FAILURE() << "PostgreSQL did not start (pg_server.sh exit " << started << "): " << out;
      return;
    }
    state_.url = out.substr(at + 4, out.find('\n', at) - at - 4);
  }
  ~Server() {
    if (dir_.empty()) {
      return;
    }
    std::string out;
    run(shell_quoted(kScript) + " stop " + shell_quoted(dir_), &out);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const PgServer& state() const { return state_; }

 private:
  PgServer state_;
  std::string dir_;
};

}  // namespace

const PgServer& shared_pg_server() {
  // Destroyed at exit: the server is stopped by its PID then, whatever the tests did.
  static Server server;
  return server.state();
}

}  // namespace fg::test
