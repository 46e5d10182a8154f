// SPDX-License-Identifier: Apache-2.0
// Where nvtcp's log lines go. By default: stderr, one line each, at Info and above (or the
// level in the NVTCP_LOG environment variable: debug, info, warn, error, off). An application
// that has its own logging gives a sink; nothing is logged per successful I/O, so a sink is
// never on the data path.
#pragma once
#include <functional>
#include <string>
#include <string_view>

namespace nvtcp {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3, Off = 4 };

// Lines below this level are not even formatted.
LogLevel log_level();
void set_log_level(LogLevel level);
// "debug", "info", "warn", "error" or "off"; false if unknown.
bool parse_log_level(const std::string& text, LogLevel& out);

// Receives each line (no timestamp, no newline) with its level, on whichever thread logged it,
// one call at a time. The sink must not call set_log_sink(). An empty function restores
// the stderr sink.
using LogSink = std::function<void(LogLevel level, std::string_view message)>;
void set_log_sink(LogSink sink);

}  // namespace nvtcp
