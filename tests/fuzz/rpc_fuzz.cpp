// SPDX-License-Identifier: Apache-2.0
// libFuzzer: what a client of the RPC socket controls. The input is the byte stream a client
// sends, cut into reads of a size its first byte picks; each whole JSON text goes through the
// target's methods (a target serving a NULL namespace on loopback, port 0), all but those that
// open files. Whatever arrives, every answer is one valid JSON text, and a stream that goes
// wrong stops being read; bdevs and namespaces an input made are deleted after it.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "control/json_rpc.hpp"
#include "control/target_methods.hpp"
#include "util/log.hpp"

using namespace nvtcp;

namespace {

target::Target* fuzzed_target = nullptr;

control::Dispatcher& methods() {
  static control::Dispatcher* d = [] {
    log::set_level(log::Level::Off);
    target::TargetConfig cfg;
    cfg.listeners.push_back({"127.0.0.1", 0});
    cfg.discovery_port = 0;
    target::SubsystemConfig s;
    s.nqn = "nqn.2026-12.io.nvtcp:fuzz";
    s.namespaces.push_back({0, "null", 1u << 20, "", 512});
    cfg.subsystems.push_back(s);
    if (!target::finalize_config(cfg).empty()) std::abort();
    auto* t = new target::Target(cfg);  // lives for the process
    if (!t->start().empty()) std::abort();
    auto* disp = new control::Dispatcher();
    control::add_target_methods(*disp, *t, "0.0.0");
    // Not files named by fuzzed input: the fuzzer would open whatever path it made up.
    disp->remove("bdev_aio_create");
    disp->remove("bdev_uring_create");
    fuzzed_target = t;
    return disp;
  }();
  return *d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t chunk = size_t(data[0] % 64) + 1;
  control::JsonTextSplitter split(4096);
  std::string text, why;
  for (size_t off = 1; off < size; off += chunk) {
    split.feed(reinterpret_cast<const char*>(data) + off, std::min(chunk, size - off));
    for (;;) {
      auto next = split.next(text, why);
      if (next == control::JsonTextSplitter::Next::NeedMore) break;
      if (next == control::JsonTextSplitter::Next::Error) return 0;
      std::string answer = methods().handle(text);
      if (!answer.empty() && control::Json::parse(answer, nullptr, false).is_discarded()) std::abort();
    }
  }
  // Each input starts from the configured target: what it made is deleted (namespaces with it).
  for (const auto& b : fuzzed_target->state().bdevs.list())
    if (b.spec.name != "null0") fuzzed_target->live_config().delete_bdev(b.spec.name);
  return 0;
}
