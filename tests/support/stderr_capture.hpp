// SPDX-License-Identifier: Apache-2.0
// What this process writes to stderr while a StderrCapture lives (the host library logs
// there), readable at any time so a test can count what was logged; echoed on destruction so
// a failing test still shows its log.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace nvtcp::test {

class StderrCapture {
 public:
  // echo_limit: how much of the log is echoed at the end; a flood that went wrong would
  // otherwise bury the test report.
  explicit StderrCapture(size_t echo_limit = std::string::npos) : echo_limit_(echo_limit) {
    char tmpl[] = "/tmp/nvtcp-stderr-XXXXXX";
    fd_ = mkstemp(tmpl);
    if (fd_ >= 0) ::unlink(tmpl);
    std::fflush(stderr);
    saved_ = ::dup(2);
    if (fd_ >= 0) ::dup2(fd_, 2);
  }
  ~StderrCapture() {
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    const std::string head = text().substr(0, echo_limit_);
    if (!head.empty()) (void)!::write(2, head.data(), head.size());
    if (fd_ >= 0) ::close(fd_);
  }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  std::string text() const {
    std::string out;
    char buf[4096];
    off_t off = 0;
    for (ssize_t n; fd_ >= 0 && (n = ::pread(fd_, buf, sizeof(buf), off)) > 0; off += n) out.append(buf, size_t(n));
    return out;
  }
  // How many times needle appears in the log so far.
  size_t count(const std::string& needle) const {
    const std::string t = text();
    size_t n = 0;
    for (size_t at = t.find(needle); at != std::string::npos; at = t.find(needle, at + 1)) ++n;
    return n;
  }

 private:
  size_t echo_limit_;
  int fd_ = -1;
  int saved_ = -1;
};

}  // namespace nvtcp::test
