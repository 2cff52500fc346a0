#include "common/util/process.hpp"

#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
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
  // Every descriptor above stderr is closed in the child: Asio opens sockets without
  // SOCK_CLOEXEC, so otherwise the listeners and client connections would live on in the child
  // (holding the ports after we exit, keeping connections open). The fallback's bound is taken
  // here: getrlimit is not async-signal-safe.
  rlimit limit{};
  const int max_fd = ::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
                         ? static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 1 << 20))
                         : 1 << 16;
  const pid_t parent = ::getpid();
  // Every signal is blocked across fork, so that one arriving before exec cannot run our
  // handlers in the child: Asio's handler would write to the descriptor it shares with us, and we
  // would take the child's SIGTERM for our own (the agent then stopped at once, leaving the
  // engine behind). The child resets every handler to the default before it unblocks, so a
  // SIGTERM sent in that window ends it as it would end the program.
  sigset_t all;
  sigset_t before;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &before);
  const pid_t pid = ::fork();
  if (pid != 0) {
    if (pid > 0) {
      // The child's group exists when we return, so signalling the group (-pid) reaches it
      // even before the child has run; the child makes the same call (EACCES here once it has
      // exec'd, which is fine).
      ::setpgid(pid, pid);
    }
    ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
    return pid;
  }
  // Child: only async-signal-safe calls until exec.
  ::setpgid(0, 0);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigemptyset(&dfl.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig) {
    ::sigaction(sig, &dfl, nullptr);  // fails for SIGKILL and SIGSTOP, which have no handler
  }
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (::getppid() != parent) {
    ::_exit(1);  // the parent died before prctl took effect
  }
  if (::close_range(3, ~0U, 0) != 0) {
    for (int fd = 3; fd < max_fd; ++fd) {
      ::close(fd);  // kernels before 5.9 (and PRoot) have no close_range
    }
  }
  ::execv(program.c_str(), args.data());
  ::_exit(127);
}

}  // namespace fg
