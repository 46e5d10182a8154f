// SPDX-License-Identifier: Apache-2.0
// The JSON log format: each line one object a JSON parser reads back exactly, whatever the message
// and field values hold (quotes, backslashes, newlines, control bytes); text format: the message.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "util/log.hpp"

namespace nvtcp::log_format_test {
namespace {

// What the default sink writes to stderr while fn runs.
template <typename Fn>
std::string stderr_of(Fn fn) {
  char path[] = "/tmp/nvtcp-log-format-XXXXXX";
  const int fd = mkstemp(path);
  std::fflush(stderr);
  const int saved = dup(2);
  dup2(fd, 2);
  fn();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  unlink(path);
  return ss.str();
}

struct FormatGuard {
  ~FormatGuard() { log::set_format(log::Format::Text); }
};

TEST(LogFormat, JsonLinesReadBackExactly) {
  FormatGuard guard;
  log::set_format(log::Format::Json);
  const std::string odd = "a \"quoted\" \\path\\\nnext line\ttab \x01 end";
  const std::string out = stderr_of([&] {
    log::event(log::Level::Warn, "connect", {{"host_nqn", odd}, {"address", "127.0.0.1:4420"}}, "host {} came", odd);
    log::info("plain {}", 7);
  });
  std::istringstream lines(out);
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  const auto e = nlohmann::json::parse(line);
  EXPECT_EQ(e["level"], "warn");
  EXPECT_EQ(e["event"], "connect");
  EXPECT_EQ(e["host_nqn"], odd);
  EXPECT_EQ(e["address"], "127.0.0.1:4420");
  EXPECT_EQ(e["message"], "host " + odd + " came");
  ASSERT_TRUE(std::getline(lines, line));
  const auto p = nlohmann::json::parse(line);
  EXPECT_EQ(p["message"], "plain 7");
  EXPECT_FALSE(p.contains("event"));
  EXPECT_FALSE(std::getline(lines, line)) << "one line per record";
}

TEST(LogFormat, TextIsTheMessageAlone) {
  FormatGuard guard;
  log::set_format(log::Format::Text);
  const std::string out =
      stderr_of([] { log::event(log::Level::Info, "ana_change", {{"subsystem", "nqn.x"}}, "ANA: {}", "changed"); });
  EXPECT_NE(out.find("nvtcp info: ANA: changed\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("nqn.x"), std::string::npos) << "fields are JSON's only";
  log::Format f;
  EXPECT_TRUE(log::parse_format("json", f));
  EXPECT_EQ(f, log::Format::Json);
  EXPECT_FALSE(log::parse_format("xml", f));
}

TEST(LogLimiter, AWindowsLinesThenACountOfTheRest) {
  log::Limiter limit(3, 1000);
  uint64_t dropped = 99;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(limit.allow(10 + uint64_t(i), dropped));
    EXPECT_EQ(dropped, 0u);
  }
  for (int i = 0; i < 50; ++i) EXPECT_FALSE(limit.allow(20, dropped));
  EXPECT_FALSE(limit.allow(1009, dropped)) << "the window is not over";
  ASSERT_TRUE(limit.allow(1010, dropped));
  EXPECT_EQ(dropped, 51u) << "the first line of the next window says how many were left out";
  ASSERT_TRUE(limit.allow(1011, dropped));
  EXPECT_EQ(dropped, 0u);
  EXPECT_EQ(log::left_out(51), " (51 more like it not logged)");
  EXPECT_EQ(log::left_out(0), "");
}

// What a peer sends (a host NQN, a PSK identity) reaches log lines: as text, a newline in it
// would forge a line of its own and an escape sequence would command the operator's terminal.
TEST(LogFormat, ControlBytesInTextGoOutAsEscapes) {
  FormatGuard guard;
  log::set_format(log::Format::Text);
  const std::string out = stderr_of([] {
    log::warn("host '{}' is not allowed", "nqn.evil\n12:00:00.000 nvtcp info: host nqn.good authenticated\x1b]0;x\x07");
  });
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << "an escape reached the terminal";
  EXPECT_NE(out.find("nqn.evil\\x0a12:00:00.000"), std::string::npos) << out;
  EXPECT_NE(out.find("\\x1b]0;x\\x07'"), std::string::npos) << out;
  std::vector<std::string> got;
  set_log_sink([&](LogLevel, std::string_view m) { got.emplace_back(m); });
  log::warn("{}", "a\rb");
  set_log_sink({});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], "a\\x0db") << "an application's sink gets the same";
}

}  // namespace
}  // namespace nvtcp::log_format_test
