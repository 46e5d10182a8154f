// SPDX-License-Identifier: Apache-2.0
#include "nvtcp/size.hpp"

#include <string>

namespace nvtcp {

bool parse_size(const std::string& text, uint64_t& out) {
  if (text.empty()) return false;
  size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &pos, 10);
  } catch (...) {
    return false;
  }
  std::string suffix = text.substr(pos);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  if (suffix.size() == 2 && (suffix[1] == 'i')) suffix.pop_back();
  uint64_t mult = 1;
  if (suffix.empty()) mult = 1;
  else if (suffix == "K" || suffix == "k") mult = 1ull << 10;
  else if (suffix == "M" || suffix == "m") mult = 1ull << 20;
  else if (suffix == "G" || suffix == "g") mult = 1ull << 30;
  else if (suffix == "T" || suffix == "t") mult = 1ull << 40;
  else return false;
  if (v > (~0ull) / mult) return false;
  out = v * mult;
  return true;
}

}  // namespace nvtcp
