#pragma once

// The phone's device facts sent with a registration and shown in /health: total RAM, CPU model
// and core count, read from /proc. Parsing is pure (text in, facts out) so it is unit-tested.

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace fg::agent {

struct DeviceFacts {
  std::uint64_t ram_bytes = 0;  // 0: unknown
  std::string cpu_model;        // "": unknown
  std::uint32_t cpu_cores = 0;  // 0: unknown
};

// MemTotal of /proc/meminfo, in bytes; 0 when absent.
std::uint64_t parse_meminfo_total(std::string_view meminfo);

// From /proc/cpuinfo: the number of "processor" entries, and the CPU's name ("model name" on
// x86, "Hardware" or "Processor" on many ARM kernels, else "CPU part" as a hex id).
void parse_cpuinfo(std::string_view cpuinfo, DeviceFacts& facts);

// Reads /proc/meminfo and /proc/cpuinfo (unknown facts stay empty; never throws).
DeviceFacts read_device_facts();

// {"ram_bytes","cpu_model","cpu_cores"}; unknown facts are left out.
nlohmann::ordered_json device_json(const DeviceFacts& facts);

}  // namespace fg::agent
