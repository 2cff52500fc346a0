#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace fg {

// Starts argv[0] (looked up in PATH, before fork) as a child in its own process group, so that
// stopping it reaches its own children and a terminal's Ctrl-C reaches only us; the child gets
// SIGTERM if we die, and none of our descriptors but stdin, stdout and stderr. Returns the pid, or
// -1 when fork failed (or argv is empty). A program that cannot be executed makes the child exit
// with status 127. Watch and stop children with net::ChildWatcher (common/net/child_watcher.hpp).
pid_t spawn_child_process(std::vector<std::string> argv);

}  // namespace fg
