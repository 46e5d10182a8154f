// SPDX-License-Identifier: Apache-2.0
// The process-wide parts of the public API: the log sink and level, the data-path options,
// size parsing, poll modes and the NVMe types in nvtcp::nvme. (Connecting, queue pairs and
// admin commands are integration tests; recovery_seconds_test has the recovery options.)
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "nvtcp/host.hpp"
#include "nvtcp/log.hpp"
#include "nvtcp/poll_mode.hpp"
#include "nvtcp/size.hpp"
#include "nvtcp/sqe.hpp"
#include "nvtcp/status.hpp"
#include "util/log.hpp"

namespace public_api_test {

namespace {

struct SinkGuard {  // leaves the process as it found it
  nvtcp::LogLevel level = nvtcp::log_level();
  ~SinkGuard() {
    nvtcp::set_log_sink({});
    nvtcp::set_log_level(level);
  }
};

TEST(PublicLog, SinkReceivesLinesAtOrAboveTheLevel) {
  SinkGuard guard;
  std::vector<std::pair<nvtcp::LogLevel, std::string>> lines;
  nvtcp::set_log_sink([&](nvtcp::LogLevel l, std::string_view m) { lines.emplace_back(l, std::string(m)); });
  nvtcp::set_log_level(nvtcp::LogLevel::Warn);
  nvtcp::log::info("not {}", "shown");
  nvtcp::log::warn("disk {} is {}", 3, "slow");
  nvtcp::log::error("gone");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].first, nvtcp::LogLevel::Warn);
  EXPECT_EQ(lines[0].second, "disk 3 is slow");  // no timestamp, no newline: the application adds its own
  EXPECT_EQ(lines[1].first, nvtcp::LogLevel::Error);
  nvtcp::set_log_level(nvtcp::LogLevel::Off);
  nvtcp::log::error("silenced");
  EXPECT_EQ(lines.size(), 2u);
}

TEST(PublicLog, SinkCallsComeOneAtATimeFromManyThreads) {
  SinkGuard guard;
  nvtcp::set_log_level(nvtcp::LogLevel::Info);
  int inside = 0, overlaps = 0, calls = 0;  // plain ints: the sink's one-at-a-time promise protects them
  nvtcp::set_log_sink([&](nvtcp::LogLevel, std::string_view) {
    if (++inside != 1) ++overlaps;
    ++calls;
    --inside;
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([] {
      for (int i = 0; i < 500; ++i) nvtcp::log::info("line {}", i);
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(calls, 2000);
  EXPECT_EQ(overlaps, 0);
}

TEST(PublicLog, ParseLevel) {
  nvtcp::LogLevel l = nvtcp::LogLevel::Info;
  EXPECT_TRUE(nvtcp::parse_log_level("debug", l));
  EXPECT_EQ(l, nvtcp::LogLevel::Debug);
  EXPECT_TRUE(nvtcp::parse_log_level("off", l));
  EXPECT_EQ(l, nvtcp::LogLevel::Off);
  EXPECT_FALSE(nvtcp::parse_log_level("loud", l));
  EXPECT_EQ(l, nvtcp::LogLevel::Off);
}

TEST(PublicDataPath, OptionsRoundTrip) {
  const nvtcp::host::DataPathOptions before = nvtcp::host::data_path_options();
  nvtcp::host::DataPathOptions o;
  o.sq_thread_cpu = 1;
  o.zero_copy_send_threshold = 64 << 10;
  o.recv_multishot = true;
  o.spin_recv = false;
  nvtcp::host::set_data_path_options(o);
  const nvtcp::host::DataPathOptions got = nvtcp::host::data_path_options();
  EXPECT_EQ(got.sq_thread_cpu, 1);
  EXPECT_EQ(got.zero_copy_send_threshold, 64u << 10);
  EXPECT_TRUE(got.recv_multishot);
  EXPECT_FALSE(got.spin_recv);
  nvtcp::host::set_data_path_options(before);
}

TEST(PublicSize, Units) {
  uint64_t v = 0;
  EXPECT_TRUE(nvtcp::parse_size("4K", v));
  EXPECT_EQ(v, 4096u);
  EXPECT_TRUE(nvtcp::parse_size("128KiB", v));
  EXPECT_EQ(v, 128u << 10);
  EXPECT_TRUE(nvtcp::parse_size("1T", v));
  EXPECT_EQ(v, 1ull << 40);
  EXPECT_FALSE(nvtcp::parse_size("12Q", v));
  EXPECT_FALSE(nvtcp::parse_size("", v));
  EXPECT_FALSE(nvtcp::parse_size("99999999999999999999", v));
  EXPECT_FALSE(nvtcp::parse_size("17179869184G", v));  // 2^34 GiB overflows 64 bits
}

TEST(PublicPollMode, ParsesTheNamesTheOptionsTake) {
  nvtcp::PollMode m = nvtcp::PollMode::Busy;
  EXPECT_TRUE(nvtcp::host::parse_poll_mode("default", m));
  EXPECT_EQ(m, nvtcp::PollMode::Default);
  EXPECT_TRUE(nvtcp::host::parse_poll_mode("interrupt", m));
  EXPECT_EQ(m, nvtcp::PollMode::Interrupt);
  EXPECT_TRUE(nvtcp::host::parse_poll_mode("busy", m));
  EXPECT_EQ(m, nvtcp::PollMode::Busy);
  EXPECT_TRUE(nvtcp::host::parse_poll_mode("hybrid", m));
  EXPECT_EQ(m, nvtcp::PollMode::Hybrid);
  EXPECT_FALSE(nvtcp::host::parse_poll_mode("spin", m));
  EXPECT_EQ(nvtcp::host::ControllerOptions{}.poll, nvtcp::PollMode::Default);
}

TEST(PublicNvme, TypesAndStatusNames) {
  static_assert(sizeof(nvtcp::nvme::Sqe) == 64 && sizeof(nvtcp::nvme::Cqe) == 16);
  EXPECT_EQ(nvtcp::nvme::kNsidAll, 0xFFFFFFFFu);
  EXPECT_EQ(nvtcp::nvme::status_name(nvtcp::nvme::sc::Success), "Success (SCT 0h / SC 00h)");
  EXPECT_EQ(nvtcp::nvme::status_name(nvtcp::nvme::sc::InvalidOpcode), "Invalid Command Opcode (SCT 0h / SC 01h)");
  nvtcp::host::Completion c;
  c.status = nvtcp::nvme::sc::InvalidField;
  EXPECT_EQ(c.status.value, nvtcp::nvme::sc::InvalidField.value);
}

}  // namespace

}  // namespace public_api_test
