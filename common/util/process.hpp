#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace fg {

// Starts argv[0] (looked up in PATH) as a child in its own process group, so that stopping it
// reaches its own children and a terminal's Ctrl-C reaches only us; the child gets SIGTERM if we
// die. Returns the pid, or -1 when fork failed.
pid_t spawn_child_process(std::vector<std::string> argv);

}  // namespace fg
