#include "util/log.hpp"

#include <time.h>

#include <atomic>
#include <cstdlib>

namespace nvtcp::log {

namespace {
Level initial_level() {
  const char* env = std::getenv("NVTCP_LOG");
  Level l = Level::Info;
  if (env) parse_level(env, l);
  return l;
}
std::atomic<Level> g_level{initial_level()};
}  // namespace

Level level() { return g_level.load(std::memory_order_relaxed); }
void set_level(Level l) { g_level.store(l, std::memory_order_relaxed); }

bool parse_level(const std::string& s, Level& out) {
  if (s == "debug") out = Level::Debug;
  else if (s == "info") out = Level::Info;
  else if (s == "warn") out = Level::Warn;
  else if (s == "error") out = Level::Error;
  else if (s == "off") out = Level::Off;
  else return false;
  return true;
}

void write(Level l, const std::string& msg) {
  static const char* names[] = {"debug", "info", "warn", "error"};
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  localtime_r(&ts.tv_sec, &tm);
  // One fprintf per line keeps lines from different threads whole.
  std::fprintf(stderr, "%02d:%02d:%02d.%03ld nvtcp %s: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
               ts.tv_nsec / 1000000, names[int(l)], msg.c_str());
}

}  // namespace nvtcp::log
