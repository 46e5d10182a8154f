// SPDX-License-Identifier: Apache-2.0
// libFuzzer: the text parsers that take user input: transport IDs, sizes, and the target's
// JSON configuration (through a temporary file, as the CLI reads it).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "nvtcp/host.hpp"
#include "nvtcp/size.hpp"
#include "target/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string s(reinterpret_cast<const char*>(data), size);
  nvtcp::host::TransportId t;
  std::string err;
  if (nvtcp::host::TransportId::parse(s, t, err)) {
    nvtcp::host::TransportId again;
    nvtcp::host::TransportId::parse(t.to_string(), again, err);  // what we print parses back
  }
  uint64_t v;
  nvtcp::parse_size(s, v);
  static std::string path = "/tmp/nvtcp-fuzz-config-" + std::to_string(getpid()) + ".json";
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
    nvtcp::target::TargetConfig cfg;
    if (nvtcp::target::load_config_file(path, cfg).empty() && nvtcp::target::finalize_config(cfg).empty()) {
      // Whatever the file says, an accepted configuration stays inside the ranges that the
      // target's arithmetic relies on (16-bit queue sizes and ids, per-queue arrays).
      if (cfg.max_queue_depth < 2 || cfg.max_queue_depth > 65535 || cfg.max_io_queues < 1 ||
          cfg.max_io_queues > 1024 || cfg.cores < 1 || cfg.max_r2t_per_command < 1 || cfg.max_r2t_per_command > 4 ||
          cfg.in_capsule_data % 16 || cfg.max_h2c_data < 4096 || cfg.icreq_timeout_ms == 0)
        __builtin_trap();
      for (const auto& subsystem : cfg.subsystems)
        for (const auto& n : subsystem.namespaces)
          if (n.nsid == 0 || n.nsid >= 0xFFFFFFFE || (n.block_size != 512 && n.block_size != 4096)) __builtin_trap();
    }
  }
  return 0;
}
