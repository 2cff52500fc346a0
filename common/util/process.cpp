#include "common/util/process.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdlib>
#include <string_view>

namespace fg {

namespace {

// argv[0] as execvp would find it, looked up before fork: the child of a process with threads
// (the resolver's) may call only async-signal-safe functions, which execvp's search is not.
std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    return name;
  }
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr && *path != '\0' ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const auto colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    if (colon == std::string_view::npos) {
      return name;  // not found: execv fails and the child exits 127
    }
    dirs.remove_prefix(colon + 1);
  }
}

}  // namespace

pid_t spawn_child_process(std::vector<std::string> argv) {
  if (argv.empty()) {
    return -1;
  }
  const std::string program = find_program(argv[0]);
  std::vector<char*> args;
  for (auto& a : argv) {
    args.push_back(a.data());
  }
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid != 0) {
    return pid;
  }
  // Child: only async-signal-safe calls until exec.
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) {
    ::_exit(1);  // the parent died before prctl took effect
  }
  ::execv(program.c_str(), args.data());
  ::_exit(127);
}

}  // namespace fg
