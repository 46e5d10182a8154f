// SPDX-License-Identifier: Apache-2.0
// The JSON log format: each line one object a JSON parser reads back exactly, whatever the message
// and field values hold (quotes, backslashes, newlines, control bytes); text format: the message.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "util/log.hpp"

namespace nvtcp {
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

}  // namespace
}  // namespace nvtcp
