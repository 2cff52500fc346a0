#include "common/net/child_watcher.hpp"

#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include <boost/asio/post.hpp>

namespace fg::net {

namespace asio = boost::asio;

namespace {

// pidfd_open through syscall(): glibc's wrapper is newer than some of the libcs the agent is
// built against, and a kernel without it answers ENOSYS, which selects the fallback.
int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

// To the process group the child leads (spawn_child_process makes one), else to the child.
void signal_child(pid_t pid, int sig) {
  if (::kill(-pid, sig) != 0) {
    ::kill(pid, sig);
  }
}

}  // namespace

int exit_code(int wait_status) {
  if (wait_status < 0) {
    return -1;
  }
  if (WIFEXITED(wait_status)) {
    return WEXITSTATUS(wait_status);
  }
  if (WIFSIGNALED(wait_status)) {
    return 128 + WTERMSIG(wait_status);
  }
  return -1;
}

ChildWatcher::ChildWatcher(asio::any_io_executor executor, Mode mode)
    : executor_(std::move(executor)), mode_(mode) {}

ChildWatcher::~ChildWatcher() {
  *alive_ = false;
  // Descriptors, timers and the signal set are closed with their owners; their pending waits
  // complete with operation_aborted and find alive_ false.
}

std::size_t ChildWatcher::pidfd_count() const {
  std::size_t n = 0;
  for (const auto& [pid, child] : children_) {
    n += child.pidfd ? 1 : 0;
  }
  return n;
}

void ChildWatcher::watch(pid_t pid, OnExit on_exit) {
  Child child;
  child.on_exit = std::move(on_exit);
  if (mode_ == Mode::automatic) {
    const int fd = open_pidfd(pid);
    if (fd >= 0) {
      child.pidfd = std::make_unique<asio::posix::stream_descriptor>(executor_, fd);
    }
  }
  const bool by_pidfd = child.pidfd != nullptr;
  children_[pid] = std::move(child);
  if (by_pidfd) {
    wait_pidfd(pid);
    return;
  }
  wait_signals();
  // The child may have exited before the SIGCHLD handler was installed: look once now.
  asio::post(executor_, [this, alive = alive_, pid] {
    if (*alive && children_.count(pid) != 0 && !children_[pid].pidfd) {
      try_reap(pid);
    }
  });
}

void ChildWatcher::wait_pidfd(pid_t pid) {
  auto& fd = *children_.at(pid).pidfd;
  fd.async_wait(asio::posix::stream_descriptor::wait_read,
                [this, alive = alive_, pid](boost::system::error_code ec) {
                  if (!*alive || ec == asio::error::operation_aborted) {
                    return;
                  }
                  if (!try_reap(pid) && children_.count(pid) != 0) {
                    wait_pidfd(pid);  // readable yet not reapable: should not happen; look again
                  }
                });
}

void ChildWatcher::wait_signals() {
  if (!sigchld_) {
    sigchld_ = std::make_unique<asio::signal_set>(executor_, SIGCHLD);
  }
  if (signal_wait_pending_) {
    return;
  }
  signal_wait_pending_ = true;
  sigchld_->async_wait([this, alive = alive_](boost::system::error_code ec, int) {
    if (!*alive) {
      return;
    }
    signal_wait_pending_ = false;
    if (ec) {
      return;
    }
    check_signalled();
  });
}

void ChildWatcher::check_signalled() {
  std::vector<pid_t> pids;
  for (const auto& [pid, child] : children_) {
    if (!child.pidfd) {
      pids.push_back(pid);
    }
  }
  for (pid_t pid : pids) {
    if (!*alive_) {
      return;  // a callback destroyed the watcher
    }
    if (children_.count(pid) != 0) {
      try_reap(pid);
    }
  }
  if (!*alive_) {
    return;
  }
  for (const auto& [pid, child] : children_) {
    if (!child.pidfd) {
      wait_signals();
      break;
    }
  }
}

bool ChildWatcher::try_reap(pid_t pid) {
  int status = 0;
  const pid_t r = ::waitpid(pid, &status, WNOHANG);
  if (r == 0 || (r < 0 && errno == EINTR)) {
    return false;
  }
  if (r < 0) {
    status = -1;  // ECHILD: reaped elsewhere
  }
  auto it = children_.find(pid);
  if (it == children_.end()) {
    return true;
  }
  OnExit on_exit = std::move(it->second.on_exit);
  children_.erase(it);
  if (on_exit) {
    on_exit(status);
  }
  return true;
}

void ChildWatcher::terminate(pid_t pid, std::chrono::steady_clock::duration grace) {
  auto it = children_.find(pid);
  if (it == children_.end()) {
    return;
  }
  signal_child(pid, SIGTERM);
  auto& timer = it->second.kill_timer;
  timer = std::make_unique<asio::steady_timer>(executor_, grace);
  timer->async_wait([this, alive = alive_, pid](boost::system::error_code ec) {
    if (!*alive || ec || children_.count(pid) == 0) {
      return;
    }
    signal_child(pid, SIGKILL);
  });
}

void ChildWatcher::kill_all() {
  for (const auto& [pid, child] : children_) {
    signal_child(pid, SIGKILL);
  }
}

}  // namespace fg::net
