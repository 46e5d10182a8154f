// Minimal leveled logging to stderr. Formatting happens only when the level is enabled,
// and nothing logs on the per-I/O success path.
#pragma once
#include <cstdio>
#include <string>

#include <fmt/format.h>

namespace nvtcp::log {

enum class Level { Debug = 0, Info = 1, Warn = 2, Error = 3, Off = 4 };

Level level();
void set_level(Level l);
// "debug" | "info" | "warn" | "error" | "off"
bool parse_level(const std::string& s, Level& out);
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
