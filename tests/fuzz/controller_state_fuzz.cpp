// SPDX-License-Identifier: Apache-2.0
// libFuzzer: a controller's state machine driven by any sequence of property writes (CC with
// every combination of EN, SHN, CSS, MPS, AMS and queue entry sizes) and shutdown
// completions, on an I/O and a discovery controller. After every step CSTS must be one the
// NVMe base specification allows: never RDY together with CFS or with a shutdown in progress
// or complete, RDY only with CC.EN set, and a shutdown status only after a notice.
#include <cstdint>
#include <cstring>
#include <memory>

#include "target/controller.hpp"
#include "target/target_state.hpp"
#include "util/log.hpp"
#include "wire/fabrics.hpp"

using namespace nvtcp;

namespace {
target::TargetState& state() {
  static target::TargetState* st = [] {
    log::set_level(log::Level::Off);
    target::TargetConfig cfg;
    target::SubsystemConfig sc;
    sc.nqn = "nqn.2026-11.io.nvtcp:fuzz";
    sc.namespaces.push_back({1, "null", 1u << 20, "", 512});
    cfg.subsystems.push_back(sc);
    target::finalize_config(cfg);
    auto* s = new target::TargetState();
    target::build_state(cfg, *s);
    return s;
  }();
  return *st;
}

void check(target::Controller& c, uint32_t cc, bool notified) {
  uint64_t csts = 0;
  if (!c.property_get(nvme::prop::CSTS, false, csts).ok()) __builtin_trap();
  const bool rdy = csts & nvme::prop::kCstsReady, cfs = csts & nvme::prop::kCstsFatal;
  const uint32_t shst = uint32_t(csts) & nvme::prop::kCstsShstMask;
  if (rdy && (cfs || shst)) __builtin_trap();
  if (rdy && !(cc & nvme::prop::kCcEnable)) __builtin_trap();
  if (shst && !notified) __builtin_trap();
  if (c.ready() != rdy) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  target::TargetState& st = state();
  const uint8_t hostid[16] = {};
  for (target::Subsystem* sub : {st.subsystems()[0].get(), st.discovery.get()}) {
    target::Controller c(st, *sub, 1, "nqn.2014-08.org.nvmexpress:uuid:fuzz", hostid, 0);
    bool notified = false;  // a shutdown notice since the last reset
    uint32_t cc = 0;
    for (size_t i = 0; i + 5 <= size; i += 5) {
      const uint8_t op = data[i];
      uint32_t v;
      std::memcpy(&v, data + i + 1, 4);
      if (op % 4 == 3) {
        if (notified) c.shutdown_complete();  // the connection calls it only after a notice
      } else {
        auto res = c.property_set(op % 4 == 2 ? nvme::prop::CSTS : nvme::prop::CC, false, v);
        if (op % 4 != 2) {
          if (!res.status.ok()) __builtin_trap();
          const bool was_en = cc & nvme::prop::kCcEnable, en = v & nvme::prop::kCcEnable;
          if (was_en && !en) notified = false;
          if (res.flush_for_shutdown) notified = true;
          uint64_t now = 0;
          c.property_get(nvme::prop::CC, false, now);
          cc = uint32_t(now);
        } else if (res.status.ok()) {
          __builtin_trap();  // CSTS is read-only
        }
      }
      check(c, cc, notified);
    }
  }
  return 0;
}
