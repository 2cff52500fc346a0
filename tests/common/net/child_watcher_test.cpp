#include "common/net/child_watcher.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <fcntl.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "common/util/process.hpp"

namespace fg::net {
namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

pid_t shell(const std::string& script) {
  return spawn_child_process({"/bin/sh", "-c", script});
}

template <typename Pred>
bool run_until(asio::io_context& io, Pred pred) {
  const auto deadline = Clock::now() + 20s;
  while (!pred()) {
    if (Clock::now() > deadline) {
      return false;
    }
    io.restart();
    io.run_one_for(20ms);
  }
  return true;
}

class ChildWatcherTest : public ::testing::TestWithParam<ChildWatcher::Mode> {
 protected:
  asio::io_context io;
  ChildWatcher watcher{io.get_executor(), GetParam()};
};

TEST_P(ChildWatcherTest, ReportsTheExitStatus) {
  std::optional<int> status;
  const pid_t pid = shell("exit 3");
  ASSERT_GT(pid, 0);
  watcher.watch(pid, [&](int s) { status = s; });
  EXPECT_TRUE(watcher.watching(pid));
  ASSERT_TRUE(run_until(io, [&] { return status.has_value(); }));
  EXPECT_EQ(exit_code(*status), 3);
  EXPECT_FALSE(watcher.watching(pid));
  EXPECT_EQ(watcher.size(), 0u);
}

TEST_P(ChildWatcherTest, AChildThatExitedBeforeItWasWatchedIsReported) {
  const pid_t pid = shell("exit 4");
  ASSERT_GT(pid, 0);
  siginfo_t info{};
  // Wait for its exit without reaping it (WNOWAIT), then watch.
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT), 0);
  std::optional<int> status;
  watcher.watch(pid, [&](int s) { status = s; });
  ASSERT_TRUE(run_until(io, [&] { return status.has_value(); }));
  EXPECT_EQ(exit_code(*status), 4);
}

// Asio's sockets have no FD_CLOEXEC: a child must not inherit the listeners (issue 15).
TEST_P(ChildWatcherTest, AChildInheritsNoDescriptorButTheStandardOnes) {
  asio::ip::tcp::acceptor listener(io, {asio::ip::make_address("127.0.0.1"), 0});
  const int fd = listener.native_handle();
  ASSERT_EQ(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0) << "the test needs a descriptor without CLOEXEC";
  std::optional<int> status;
  // Exit 0 when the child's descriptor is closed, 7 when it is still open.
  const pid_t pid = shell("if [ -e /proc/$$/fd/" + std::to_string(fd) +
                          " ]; then exit 7; fi; [ -e /proc/$$/fd/2 ]");
  ASSERT_GT(pid, 0);
  watcher.watch(pid, [&](int s) { status = s; });
  ASSERT_TRUE(run_until(io, [&] { return status.has_value(); }));
  EXPECT_EQ(exit_code(*status), 0);
}

TEST_P(ChildWatcherTest, TerminateSendsSigterm) {
  std::optional<int> status;
  const pid_t pid = spawn_child_process({"sleep", "60"});
  ASSERT_GT(pid, 0);
  watcher.watch(pid, [&](int s) { status = s; });
  watcher.terminate(pid, 30s);
  ASSERT_TRUE(run_until(io, [&] { return status.has_value(); }));
  EXPECT_EQ(exit_code(*status), 128 + SIGTERM);
}

TEST_P(ChildWatcherTest, TerminateKillsAChildThatIgnoresSigterm) {
  std::optional<int> status;
  // The shell ignores SIGTERM (and so does its sleep, which inherits that), then says so.
  const std::string ready = ::testing::TempDir() + "fg-watcher-ready-" + std::to_string(::getpid());
  std::remove(ready.c_str());
  const pid_t pid = shell("trap '' TERM; : > '" + ready + "'; sleep 60");
  ASSERT_GT(pid, 0);
  watcher.watch(pid, [&](int s) { status = s; });
  ASSERT_TRUE(run_until(io, [&] { return ::access(ready.c_str(), F_OK) == 0; }));
  watcher.terminate(pid, 200ms);
  ASSERT_TRUE(run_until(io, [&] { return status.has_value(); }));
  EXPECT_EQ(exit_code(*status), 128 + SIGKILL);
  std::remove(ready.c_str());
}

TEST_P(ChildWatcherTest, NeverReapsChildrenItDoesNotWatch) {
  // Someone else's child (an engine's helper, a library's): it must stay for its owner to reap.
  const pid_t other = shell("exit 7");
  ASSERT_GT(other, 0);
  std::optional<int> status;
  const pid_t mine = shell("exit 5");
  watcher.watch(mine, [&](int s) { status = s; });
  ASSERT_TRUE(run_until(io, [&] { return status.has_value(); }));
  // Give the other child time to exit and its SIGCHLD to arrive, then let the watcher run.
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(other), &info, WEXITED | WNOWAIT), 0);
  std::optional<int> second;
  const pid_t again = shell("exit 6");
  watcher.watch(again, [&](int s) { second = s; });
  ASSERT_TRUE(run_until(io, [&] { return second.has_value(); }));
  int other_status = 0;
  ASSERT_EQ(::waitpid(other, &other_status, WNOHANG), other) << "the watcher reaped it";
  EXPECT_EQ(exit_code(other_status), 7);
}

TEST_P(ChildWatcherTest, ACallbackMayStartAndWatchTheNextChild) {
  int exits = 0;
  std::function<void(int)> restart = [&](int) {
    if (++exits < 3) {
      watcher.watch(shell("exit 0"), restart);
    }
  };
  watcher.watch(shell("exit 0"), restart);
  ASSERT_TRUE(run_until(io, [&] { return exits == 3; }));
  EXPECT_EQ(watcher.size(), 0u);
}

TEST_P(ChildWatcherTest, KillAllEndsEveryChild) {
  std::vector<int> statuses;
  for (int i = 0; i < 3; ++i) {
    const pid_t pid = spawn_child_process({"sleep", "60"});
    watcher.watch(pid, [&](int s) { statuses.push_back(s); });
  }
  watcher.kill_all();
  ASSERT_TRUE(run_until(io, [&] { return statuses.size() == 3; }));
  for (int s : statuses) {
    EXPECT_EQ(exit_code(s), 128 + SIGKILL);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ChildWatcherTest,
                         ::testing::Values(ChildWatcher::Mode::automatic,
                                           ChildWatcher::Mode::signals),
                         [](const auto& info) {
                           return info.param == ChildWatcher::Mode::automatic ? "pidfd" : "signals";
                         });

TEST(ChildWatcherPidfd, UsedWhereTheKernelHasIt) {
  asio::io_context io;
  ChildWatcher watcher(io.get_executor());
  std::optional<int> status;
  const pid_t pid = spawn_child_process({"sleep", "60"});
  watcher.watch(pid, [&](int s) { status = s; });
  // This machine's kernel (5.3+) gives pidfds; PRoot and old kernels fall back to signals.
  EXPECT_EQ(watcher.pidfd_count(), 1u);
  watcher.kill_all();
  ASSERT_TRUE(run_until(io, [&] { return status.has_value(); }));
}

// A signal sent to a child the moment spawn_child_process returns (the agent's SIGTERM during
// autotune, in CI) must reach the child's program, never a handler it inherited from us before
// exec: with our handler the child survived the SIGTERM and ran on. Signalling its group must
// work at once too (the group existed only once the child had run its setpgid).
volatile sig_atomic_t g_term_seen = 0;
void note_term(int) {
  g_term_seen = 1;
}

TEST(SpawnChildProcess, ASignalAtOnceEndsTheChildNotRunsOurHandler) {
  struct sigaction handler {};
  struct sigaction before {};
  handler.sa_handler = note_term;
  sigemptyset(&handler.sa_mask);
  ASSERT_EQ(::sigaction(SIGTERM, &handler, &before), 0);
  for (int i = 0; i < 100; ++i) {
    const pid_t pid = spawn_child_process({"/bin/sleep", "30"});
    ASSERT_GT(pid, 0);
    EXPECT_EQ(::kill(-pid, SIGTERM), 0)
        << "the child's process group exists at once (round " << i << ")";
    ::kill(pid, SIGTERM);
    int status = 0;
    pid_t r = 0;
    const auto deadline = Clock::now() + 10s;
    while ((r = ::waitpid(pid, &status, WNOHANG)) == 0 && Clock::now() < deadline) {
      ::usleep(1000);
    }
    if (r == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "the child outlived SIGTERM (round " << i << ")";
      break;
    }
    ASSERT_EQ(r, pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "round " << i;
    EXPECT_EQ(WTERMSIG(status), SIGTERM) << "round " << i;
  }
  EXPECT_EQ(g_term_seen, 0) << "no signal meant for a child reached us";
  ::sigaction(SIGTERM, &before, nullptr);
}

TEST(ExitCode, ShellConventions) {
  EXPECT_EQ(exit_code(-1), -1);
  EXPECT_EQ(exit_code(0), 0);
  EXPECT_EQ(exit_code(3 << 8), 3);
  EXPECT_EQ(exit_code(SIGKILL), 128 + SIGKILL);
}

}  // namespace
}  // namespace fg::net
