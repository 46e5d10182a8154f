// SPDX-License-Identifier: Apache-2.0
// Leveled logging inside nvtcp, to the sink the application chose (nvtcp/log.hpp; stderr by
// default). Formatting happens only when the level is enabled, and nothing logs on the
// per-I/O success path.
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <string>

#include "nvtcp/log.hpp"

namespace nvtcp::log {

using Level = LogLevel;

inline Level level() { return log_level(); }
inline void set_level(Level l) { set_log_level(l); }
void write(Level l, const std::string& msg);

// How the default (stderr) sink writes lines: text, or one JSON object per line for a log
// shipper ({"time": RFC 3339 UTC, "level", "message"}, and an event's own keys). A sink the
// application set gets the message either way.
enum class Format { Text, Json };
void set_format(Format f);
bool parse_format(const std::string& s, Format& out);  // "text" or "json"

// An event an operator's tools look for (a host connecting or going, an authentication, a
// TermReq, an ANA transition): in JSON, "event" is its name and each field a key of its own
// beside the message; in text, the message alone.
struct Field {
  const char* key;
  std::string value;
};
void write_event(Level l, const char* name, std::initializer_list<Field> fields, const std::string& msg);
template <typename... Args>
void event(Level l, const char* name, std::initializer_list<Field> fields, fmt::format_string<Args...> f,
           Args&&... a) {
  if (level() <= l) write_event(l, name, fields, fmt::format(f, std::forward<Args>(a)...));
}

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... a) {
  if (level() <= Level::Debug) write(Level::Debug, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... a) {
  if (level() <= Level::Info) write(Level::Info, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... a) {
  if (level() <= Level::Warn) write(Level::Warn, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... a) {
  if (level() <= Level::Error) write(Level::Error, fmt::format(f, std::forward<Args>(a)...));
}

// Lines a stranger can cause at will, one per connection it opens (a refused Connect, a failed
// TLS handshake or authentication): one call site writes at most per_window of them a window
// (1 s); the rest are counted, and the next line let through says how many were left out. So a
// connection loop fills no disk, and the operator still learns that it happened and how much.
class Limiter {
 public:
  explicit Limiter(uint32_t per_window, uint64_t window_ns = 1'000'000'000ull)
      : per_window_(per_window), window_ns_(window_ns) {}
  // True: write the line now; dropped is how many were left out since the last one written.
  bool allow(uint64_t now_ns, uint64_t& dropped);

 private:
  std::mutex mu_;
  const uint32_t per_window_;
  const uint64_t window_ns_;
  uint64_t window_start_ = 0;
  uint32_t used_ = 0;
  uint64_t dropped_ = 0;
  bool started_ = false;
};
uint64_t limiter_now_ns();               // CLOCK_MONOTONIC_COARSE: cheap, and fine at a second's grain
std::string left_out(uint64_t dropped);  // " (N more like it not logged)", or ""

template <typename... Args>
void warn_limited(Limiter& limit, fmt::format_string<Args...> f, Args&&... a) {
  if (level() > Level::Warn) return;
  uint64_t dropped = 0;
  if (!limit.allow(limiter_now_ns(), dropped)) return;
  write(Level::Warn, fmt::format(f, std::forward<Args>(a)...) + left_out(dropped));
}
template <typename... Args>
void event_limited(Limiter& limit, Level l, const char* name, std::initializer_list<Field> fields,
                   fmt::format_string<Args...> f, Args&&... a) {
  if (level() > l) return;
  uint64_t dropped = 0;
  if (!limit.allow(limiter_now_ns(), dropped)) return;
  write_event(l, name, fields, fmt::format(f, std::forward<Args>(a)...) + left_out(dropped));
}

}  // namespace nvtcp::log
