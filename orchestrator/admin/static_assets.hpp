#pragma once

#include <string_view>

namespace fg::admin {

// A file of orchestrator/admin/static/, compiled into the binary (embed_static.cmake generates
// the table at build time, so the page needs no files at run time and no build step of its own).
struct StaticAsset {
  std::string_view name;  // "index.html", "status.js", ...
  std::string_view content_type;
  std::string_view body;
};

// The asset with this file name, or nullptr.
const StaticAsset* find_static_asset(std::string_view name);

}  // namespace fg::admin
