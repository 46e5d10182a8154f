// SPDX-License-Identifier: Apache-2.0
// Sizes as nvtcp's command line, its JSON configuration and the fio engine's options take
// them: "512", "4K", "128KiB", "1G", "1T" (binary units, optional "B"/"iB").
#pragma once
#include <cstdint>
#include <string>

namespace nvtcp {

// False on junk, an unknown suffix or a value that overflows 64 bits.
bool parse_size(const std::string& text, uint64_t& out);

}  // namespace nvtcp
