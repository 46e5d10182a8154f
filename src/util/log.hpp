// SPDX-License-Identifier: Apache-2.0
// Leveled logging inside nvtcp, to the sink the application chose (nvtcp/log.hpp; stderr by
// default). Formatting happens only when the level is enabled, and nothing logs on the
// per-I/O success path.
#pragma once
#include <string>

#include <fmt/format.h>

#include "nvtcp/log.hpp"

namespace nvtcp::log {

using Level = LogLevel;

inline Level level() { return log_level(); }
inline void set_level(Level l) { set_log_level(l); }
inline bool parse_level(const std::string& s, Level& out) { return parse_log_level(s, out); }
void write(Level l, const std::string& msg);

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
