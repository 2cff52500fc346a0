#include "common/util/process.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace fg {

pid_t spawn_child_process(std::vector<std::string> argv) {
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
  ::execvp(args[0], args.data());
  ::_exit(127);
}

}  // namespace fg
