// SPDX-License-Identifier: Apache-2.0
#include "util/log.hpp"

#include <time.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>

namespace nvtcp {

namespace {
LogLevel initial_level() {
  const char* env = std::getenv("NVTCP_LOG");
  LogLevel l = LogLevel::Info;
  if (env) parse_log_level(env, l);
  return l;
}
std::atomic<LogLevel> g_level{initial_level()};

// The sink is swapped rarely and called for every line: readers copy the pointer under the
// lock and call it outside, so a slow sink holds up only the threads that log, and a sink
// replaced meanwhile stays alive until its last call returns. A second lock keeps one call
// at a time, as the sink's contract promises.
std::mutex g_sink_mutex;
std::shared_ptr<const LogSink> g_sink;
std::mutex g_call_mutex;

void write_stderr(LogLevel l, std::string_view msg) {
  static const char* names[] = {"debug", "info", "warn", "error"};
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  localtime_r(&ts.tv_sec, &tm);
  // One fprintf per line keeps lines from different threads whole.
  std::fprintf(stderr, "%02d:%02d:%02d.%03ld nvtcp %s: %.*s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
               ts.tv_nsec / 1000000, names[int(l)], int(msg.size()), msg.data());
}
}  // namespace

LogLevel log_level() { return g_level.load(std::memory_order_relaxed); }
void set_log_level(LogLevel l) { g_level.store(l, std::memory_order_relaxed); }

bool parse_log_level(const std::string& s, LogLevel& out) {
  if (s == "debug") out = LogLevel::Debug;
  else if (s == "info") out = LogLevel::Info;
  else if (s == "warn") out = LogLevel::Warn;
  else if (s == "error") out = LogLevel::Error;
  else if (s == "off") out = LogLevel::Off;
  else return false;
  return true;
}

void set_log_sink(LogSink sink) {
  std::shared_ptr<const LogSink> next;
  if (sink) next = std::make_shared<const LogSink>(std::move(sink));
  std::lock_guard lock(g_sink_mutex);
  g_sink = std::move(next);
}

namespace log {
void write(Level l, const std::string& msg) {
  if (l >= LogLevel::Off) return;
  std::shared_ptr<const LogSink> sink;
  {
    std::lock_guard lock(g_sink_mutex);
    sink = g_sink;
  }
  if (!sink) return write_stderr(l, msg);
  std::lock_guard call(g_call_mutex);
  (*sink)(l, msg);
}
}  // namespace log

}  // namespace nvtcp
