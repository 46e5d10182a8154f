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

const char* const kLevelNames[] = {"debug", "info", "warn", "error"};
std::atomic<log::Format> g_format{log::Format::Text};

void json_string(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char u[8];
          std::snprintf(u, sizeof(u), "\\u%04x", c);
          out += u;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

// One JSON object per line: time (UTC, microseconds), level, the event's name and fields if
// any, the message.
void write_json(LogLevel l, const char* event, std::initializer_list<log::Field> fields, std::string_view msg) {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char when[96];  // room for any int the compiler cannot rule out, though a date needs 27
  std::snprintf(when, sizeof(when), "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000);
  std::string line = "{\"time\":\"";
  line += when;
  line += "\",\"level\":\"";
  line += kLevelNames[int(l)];
  line += '"';
  if (event) {
    line += ",\"event\":";
    json_string(line, event);
  }
  for (const auto& f : fields) {
    line += ',';
    json_string(line, f.key);
    line += ':';
    json_string(line, f.value);
  }
  line += ",\"message\":";
  json_string(line, msg);
  line += "}\n";
  std::fwrite(line.data(), 1, line.size(), stderr);  // one write per line keeps lines whole
}

// Log lines carry what peers send (host NQNs, PSK identities, model names): as text, a control
// byte of theirs would start a forged line (a newline) or command the terminal that shows it
// (ESC). Each goes out as \xNN; JSON escapes them its own way.
std::string printable(std::string_view msg) {
  std::string out;
  out.reserve(msg.size());
  for (unsigned char c : msg) {
    if (c < 0x20 || c == 0x7f) {
      char x[5];
      std::snprintf(x, sizeof(x), "\\x%02x", c);
      out += x;
    } else {
      out += char(c);
    }
  }
  return out;
}

bool has_control(std::string_view msg) {
  for (unsigned char c : msg)
    if (c < 0x20 || c == 0x7f) return true;
  return false;
}

void write_stderr(LogLevel l, std::string_view msg) {
  if (g_format.load(std::memory_order_relaxed) == log::Format::Json) return write_json(l, nullptr, {}, msg);
  if (has_control(msg)) {
    const std::string safe = printable(msg);
    return write_stderr(l, safe);
  }
  const char* const* names = kLevelNames;
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
namespace {
std::shared_ptr<const LogSink> current_sink() {
  std::lock_guard lock(g_sink_mutex);
  return g_sink;
}
}  // namespace

void write(Level l, const std::string& msg) {
  if (l >= LogLevel::Off) return;
  std::shared_ptr<const LogSink> sink = current_sink();
  if (!sink) return write_stderr(l, msg);
  std::lock_guard call(g_call_mutex);
  if (has_control(msg))
    (*sink)(l, printable(msg));
  else
    (*sink)(l, msg);
}

void write_event(Level l, const char* name, std::initializer_list<Field> fields, const std::string& msg) {
  if (l >= LogLevel::Off) return;
  if (g_format.load(std::memory_order_relaxed) == Format::Json && !current_sink()) return write_json(l, name, fields, msg);
  write(l, msg);
}

bool Limiter::allow(uint64_t now_ns, uint64_t& dropped) {
  std::lock_guard lk(mu_);
  if (!started_ || now_ns - window_start_ >= window_ns_) {
    started_ = true;
    window_start_ = now_ns;
    used_ = 0;
  }
  if (used_ == per_window_) {
    ++dropped_;
    return false;
  }
  ++used_;
  dropped = dropped_;
  dropped_ = 0;
  return true;
}

uint64_t limiter_now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

std::string left_out(uint64_t dropped) {
  return dropped ? fmt::format(" ({} more like it not logged)", dropped) : std::string();
}

void set_format(Format f) { g_format.store(f, std::memory_order_relaxed); }

bool parse_format(const std::string& s, Format& out) {
  if (s == "text") out = Format::Text;
  else if (s == "json") out = Format::Json;
  else return false;
  return true;
}
}  // namespace log

}  // namespace nvtcp
