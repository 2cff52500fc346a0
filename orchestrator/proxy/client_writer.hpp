#pragma once

#include "common/net/response_writer.hpp"

namespace fg::proxy {

// The response to one client request: the session loop's writer (common/net/response_writer.hpp).
using ClientWriter = net::ResponseWriter;

}  // namespace fg::proxy
