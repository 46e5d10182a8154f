// libFuzzer: the text parsers that take user input: transport IDs, sizes, and the target's
// JSON configuration (through a temporary file, as the CLI reads it).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "backend/block_device.hpp"
#include "nvtcp/host.hpp"
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
  nvtcp::backend::parse_size(s, v);
  static std::string path = "/tmp/nvtcp-fuzz-config-" + std::to_string(getpid()) + ".json";
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
    nvtcp::target::TargetConfig cfg;
    if (nvtcp::target::load_config_file(path, cfg).empty()) nvtcp::target::finalize_config(cfg);
  }
  return 0;
}
