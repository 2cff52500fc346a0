#include "replica-agent/core/device.hpp"

#include <charconv>
#include <fstream>
#include <sstream>

namespace fg::agent {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// Calls fn(key, value) for each "key : value" line.
template <typename Fn>
void each_field(std::string_view text, Fn fn) {
  while (!text.empty()) {
    auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    auto colon = line.find(':');
    if (colon == std::string_view::npos) {
      continue;
    }
    fn(trim(line.substr(0, colon)), trim(line.substr(colon + 1)));
  }
}

std::string read_file(const char* path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::uint64_t parse_meminfo_total(std::string_view meminfo) {
  std::uint64_t bytes = 0;
  each_field(meminfo, [&](std::string_view key, std::string_view value) {
    if (key != "MemTotal" || bytes != 0) {
      return;
    }
    std::uint64_t kib = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), kib);
    if (ec == std::errc()) {
      bytes = kib * 1024;  // the kernel's "kB" is KiB
    }
  });
  return bytes;
}

void parse_cpuinfo(std::string_view cpuinfo, DeviceFacts& facts) {
  std::uint32_t processors = 0;
  std::string model_name;
  std::string hardware;
  std::string processor_name;
  std::string cpu_part;
  each_field(cpuinfo, [&](std::string_view key, std::string_view value) {
    if (key == "processor") {
      // x86 and arm64 number the entries; old ARM kernels also have "Processor: <name>".
      if (!value.empty() && value.find_first_not_of("0123456789") == std::string_view::npos) {
        ++processors;
      } else if (processor_name.empty()) {
        processor_name = value;
      }
    } else if (key == "Processor" && processor_name.empty()) {
      processor_name = value;
    } else if (key == "model name" && model_name.empty()) {
      model_name = value;
    } else if (key == "Hardware" && hardware.empty()) {
      hardware = value;
    } else if (key == "CPU part" && cpu_part.empty()) {
      cpu_part = value;
    }
  });
  facts.cpu_cores = processors;
  if (!model_name.empty()) {
    facts.cpu_model = model_name;
  } else if (!hardware.empty()) {
    facts.cpu_model = hardware;
  } else if (!processor_name.empty()) {
    facts.cpu_model = processor_name;
  } else if (!cpu_part.empty()) {
    facts.cpu_model = "CPU part " + cpu_part;
  }
}

DeviceFacts read_device_facts() {
  DeviceFacts facts;
  facts.ram_bytes = parse_meminfo_total(read_file("/proc/meminfo"));
  parse_cpuinfo(read_file("/proc/cpuinfo"), facts);
  return facts;
}

nlohmann::ordered_json device_json(const DeviceFacts& facts) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (facts.ram_bytes != 0) {
    j["ram_bytes"] = facts.ram_bytes;
  }
  if (!facts.cpu_model.empty()) {
    j["cpu_model"] = facts.cpu_model;
  }
  if (facts.cpu_cores != 0) {
    j["cpu_cores"] = facts.cpu_cores;
  }
  return j;
}

}  // namespace fg::agent
