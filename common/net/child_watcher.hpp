#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

namespace fg::net {

// Watches the child processes this program started, on the io thread, without ever blocking
// it: each child's exit arrives as a callback. A child is watched through a pidfd
// (pidfd_open, Linux 5.3+) that becomes readable when it exits, waited for with an Asio
// descriptor; where pidfd_open fails (older kernels, PRoot, seccomp filters) it falls back to
// SIGCHLD and waitpid(pid, WNOHANG) for each child it knows. It never calls waitpid(-1): other
// code's children are not its to reap.
class ChildWatcher {
 public:
  enum class Mode {
    automatic,  // a pidfd where the kernel gives one, else signals
    signals,    // SIGCHLD and waitpid(pid) only (tests the fallback)
  };
  // wait_status as from waitpid; -1 when the child was reaped by someone else (status unknown).
  using OnExit = std::function<void(int wait_status)>;

  explicit ChildWatcher(boost::asio::any_io_executor executor, Mode mode = Mode::automatic);
  // Stops watching: no callback runs afterwards. Children still running are left alone (their
  // owner stops them first; they get SIGTERM anyway if this process dies).
  ~ChildWatcher();
  ChildWatcher(const ChildWatcher&) = delete;
  ChildWatcher& operator=(const ChildWatcher&) = delete;

  // Watches pid, a child of this process that has not been reaped. on_exit runs once, on the io
  // thread, after the child exited and was reaped; it may call watch() again (a restart).
  void watch(pid_t pid, OnExit on_exit);
  // SIGTERM to the child's process group now, SIGKILL to it once grace has passed without an
  // exit. Its on_exit reports the end as usual.
  void terminate(pid_t pid, std::chrono::steady_clock::duration grace);
  // SIGKILL to every watched child's process group; their exits are still reported.
  void kill_all();

  bool watching(pid_t pid) const { return children_.count(pid) != 0; }
  std::size_t size() const { return children_.size(); }
  // How many children are watched through a pidfd (the rest through SIGCHLD).
  std::size_t pidfd_count() const;

 private:
  struct Child {
    OnExit on_exit;
    std::unique_ptr<boost::asio::posix::stream_descriptor> pidfd;  // null: SIGCHLD fallback
    std::unique_ptr<boost::asio::steady_timer> kill_timer;
  };
  void wait_pidfd(pid_t pid);
  void wait_signals();
  void check_signalled();
  // waitpid(pid, WNOHANG); true (and the callback done) when it has exited.
  bool try_reap(pid_t pid);

  boost::asio::any_io_executor executor_;
  Mode mode_;
  std::map<pid_t, Child> children_;
  std::unique_ptr<boost::asio::signal_set> sigchld_;
  bool signal_wait_pending_ = false;
  // Shared with pending callbacks: they do nothing once the watcher is gone.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// The exit code of a wait status: the code for a normal exit, 128 + the signal for a killed
// child (as a shell reports it), -1 for an unknown status.
int exit_code(int wait_status);

}  // namespace fg::net
