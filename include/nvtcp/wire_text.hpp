// SPDX-License-Identifier: Apache-2.0
// Text a target sent, made fit for a terminal or a log line (the CLI's output, the host
// library's log lines, an application's own). A model name, serial number, NQN or discovery
// entry is whatever bytes the target chose: printed raw, an escape sequence would act on the
// user's terminal and a newline would forge a line of our own output. Printable ASCII is kept
// as it is; every other byte, and the backslash (so the escaped form reads back unambiguously),
// is written as \xNN or \\. The result is plain printable ASCII, also safe inside JSON strings
// once JSON's own quoting is applied.
#pragma once
#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>

namespace nvtcp {

inline std::string escape_wire_text(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto b = static_cast<unsigned char>(ch);
    if (b == '\\') {
      out += "\\\\";
    } else if (b >= 0x20 && b < 0x7f) {
      out += ch;
    } else {
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 0xF];
    }
  }
  return out;
}

// A fixed-size ASCII field (Identify, a log page): up to its first NUL, trailing space padding
// dropped, escaped for printing.
inline std::string wire_field(const char* p, size_t n) {
  size_t len = strnlen(p, n);
  while (len > 0 && p[len - 1] == ' ') --len;
  return escape_wire_text(std::string_view(p, len));
}

}  // namespace nvtcp
