// SPDX-License-Identifier: Apache-2.0
// Leveled logging inside nvtcp, to the sink the application chose (nvtcp/log.hpp; stderr by
// default). Formatting happens only when the level is enabled, and nothing logs on the
// per-I/O success path.
#pragma once
#include <initializer_list>
#include <string>

#include <fmt/format.h>

#include "nvtcp/log.hpp"

namespace nvtcp::log {

using Level = LogLevel;

inline Level level() { return log_level(); }
inline void set_level(Level l) { set_log_level(l); }
inline bool parse_level(const std::string& s, Level& out) { return parse_log_level(s, out); }
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

}  // namespace nvtcp::log
