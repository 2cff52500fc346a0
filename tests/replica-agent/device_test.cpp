#include "replica-agent/core/device.hpp"

#include <gtest/gtest.h>

#include "replica-agent/core/backoff.hpp"

namespace fg::agent {
namespace {

TEST(AgentDevice, MemTotalInBytes) {
  EXPECT_EQ(parse_meminfo_total("MemTotal:       16123456 kB\nMemFree:         1000 kB\n"),
            16123456ull * 1024);
  EXPECT_EQ(parse_meminfo_total("MemFree: 10 kB\n"), 0u);
  EXPECT_EQ(parse_meminfo_total(""), 0u);
}

TEST(AgentDevice, X86CpuInfo) {
  DeviceFacts f;
  parse_cpuinfo(
      "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n"
      "\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n",
      f);
  EXPECT_EQ(f.cpu_cores, 2u);
  EXPECT_EQ(f.cpu_model, "Intel(R) Xeon(R) CPU @ 2.20GHz");
}

TEST(AgentDevice, AndroidArm64CpuInfo) {
  DeviceFacts f;
  std::string text;
  for (int i = 0; i < 8; ++i) {
    text += "processor\t: " + std::to_string(i) +
            "\nBogoMIPS\t: 38.40\nCPU implementer\t: 0x41\nCPU part\t: 0xd44\n\n";
  }
  text += "Hardware\t: Qualcomm Technologies, Inc SM8750\n";
  parse_cpuinfo(text, f);
  EXPECT_EQ(f.cpu_cores, 8u);
  EXPECT_EQ(f.cpu_model, "Qualcomm Technologies, Inc SM8750");
  DeviceFacts bare;
  parse_cpuinfo("processor\t: 0\nCPU part\t: 0xd44\n", bare);
  EXPECT_EQ(bare.cpu_model, "CPU part 0xd44");
}

TEST(AgentDevice, JsonLeavesUnknownsOut) {
  EXPECT_EQ(device_json(DeviceFacts{}).dump(), "{}");
  DeviceFacts f{16ull << 30, "SM8750", 8};
  EXPECT_EQ(device_json(f).dump(),
            "{\"ram_bytes\":17179869184,\"cpu_model\":\"SM8750\",\"cpu_cores\":8}");
}

TEST(AgentDevice, ThisMachineHasFacts) {
  const DeviceFacts f = read_device_facts();
  EXPECT_GT(f.ram_bytes, 0u);
  EXPECT_GT(f.cpu_cores, 0u);
}

TEST(AgentBackoff, DoublesFromOneSecondToThirtyWithJitter) {
  using std::chrono::milliseconds;
  EXPECT_EQ(backoff_delay(0, 0.0), milliseconds(500));
  EXPECT_EQ(backoff_delay(0, 0.999999), milliseconds(999));
  EXPECT_EQ(backoff_delay(1, 0.0), milliseconds(1000));
  EXPECT_EQ(backoff_delay(2, 1.0), milliseconds(4000));
  EXPECT_EQ(backoff_delay(4, 1.0), milliseconds(16000));
  EXPECT_EQ(backoff_delay(5, 1.0), milliseconds(30000));  // 32 s capped at 30 s
  EXPECT_EQ(backoff_delay(60, 0.0), milliseconds(15000));
  EXPECT_EQ(backoff_delay(60, 1.0), milliseconds(30000));
}

}  // namespace
}  // namespace fg::agent
