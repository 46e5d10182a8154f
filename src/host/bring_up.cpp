// SPDX-License-Identifier: Apache-2.0
// Bringing a controller up on a new admin queue, in the order the specification gives: CAP, VS,
// CC.EN, CSTS.RDY, Identify, Number of Queues.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "host/controller_state.hpp"
#include "host/namespace_scan.hpp"
#include "nvtcp/identify.hpp"
#include "util/log.hpp"
#include "wire/commands.hpp"
#include "wire/fabrics.hpp"

namespace nvtcp::host {

using namespace nvtcp::wire;
using detail::QueueParams;

bool Controller::State::connect_admin(HostError& err) {
  QueueParams p;
  p.trid = trid;
  p.qid = 0;
  p.depth = std::max<uint16_t>(opts.admin_queue_depth, 4);
  p.kato_ms = discovery ? 0 : opts.kato_ms;
  std::memcpy(p.hostid, hostid, 16);
  p.hostnqn = hostnqn;
  p.hdgst = opts.hdgst;
  p.ddgst = opts.ddgst;
  p.in_capsule_max = 8192;
  p.max_transfer = 1u << 20;
  p.timeout_ms = opts.connect_timeout_ms;
  p.tcp_congestion = opts.tcp_congestion;
  p.socket_buffer_bytes = opts.socket_buffer_bytes;
  p.send_buffer_bytes = opts.send_buffer_bytes;
  p.dhchap_secret = dhchap_secret;
  p.dhchap_ctrl_secret = dhchap_ctrl_secret;
  p.tls_psk = tls_psk;
  p.ktls = opts.ktls;
  p.io_timeout_ms = opts.admin_timeout_ms;
  p.clock = clock;
  admin = std::make_unique<QueuePairImpl>(*reactor, p);
  if (!admin->connect(err)) {
    if (!tls_psk_fallback || !admin->tls_handshake_refused()) return false;
    // A Linux target whose keyring nvme-cli up to 2.14 filled holds the key derived with
    // libnvme's own labels: the same configured key, the other derivation, once.
    log::info(
        "{}:{}: the target refused the TLS PSK derived with {}; trying {} (as nvme-cli up to 2.14 derives "
        "it)",
        trid.traddr, trid.trsvcid, tls_psk->derivation, tls_psk_fallback->derivation);
    tls_psk = std::exchange(tls_psk_fallback, nullptr);
    p.tls_psk = tls_psk;
    admin = std::make_unique<QueuePairImpl>(*reactor, p);
    if (!admin->connect(err)) return false;
    log::info("{}:{}: TLS with the PSK derived with {}", trid.traddr, trid.trsvcid, tls_psk->derivation);
  }
  tls_psk_fallback.reset();  // the derivation that worked is the one every queue uses
  return true;
}

bool Controller::State::associate(bool first, HostError& err) {
  if (!connect_admin(err)) return false;

  auto failed = [&](const std::string& what, const Completion& cpl) {
    // A lost admin queue ends its commands with a path error: the connection is what failed.
    std::string msg = fmt::format("{}: {}", what, status_name(cpl.status));
    err = admin_up() ? HostError::from_status(cpl.status, std::move(msg))
                     : HostError::make(HostError::Kind::Transport, std::move(msg));
    return false;
  };
  Completion cpl = admin_sync(cmd::property_get(prop::CAP, true), nullptr, 0, false);
  if (!cpl.status.ok()) return failed("Property Get CAP", cpl);
  uint64_t new_cap = (uint64_t(cpl.dw1) << 32) | cpl.dw0;
  cpl = admin_sync(cmd::property_get(prop::VS, false), nullptr, 0, false);
  if (!cpl.status.ok()) return failed("Property Get VS", cpl);
  if (first) {
    cap = new_cap;
    vs = cpl.dw0;
  }
  // CC: enable, NVM command set, 4 KiB pages, round robin, 64-byte SQEs, 16-byte CQEs.
  uint32_t cc = prop::kCcEnableNvm;
  cpl = admin_sync(cmd::property_set(prop::CC, cc), nullptr, 0, false);
  if (!cpl.status.ok()) return failed("Property Set CC", cpl);
  uint32_t timeout_ms = std::max<uint32_t>(prop::cap_timeout_ms(new_cap), 500);
  uint64_t deadline = now_ns() + uint64_t(timeout_ms) * 1000000ull;
  if (bring_up_deadline_ns != UINT64_MAX) bring_up_deadline_ns += uint64_t(timeout_ms) * 1000000ull;
  for (;;) {
    cpl = admin_sync(cmd::property_get(prop::CSTS, false), nullptr, 0, false);
    if (!cpl.status.ok()) return failed("Property Get CSTS", cpl);
    if (cpl.dw0 & prop::kCstsFatal) {
      err = HostError::make(HostError::Kind::Controller,
                            "controller reported a fatal status (CSTS.CFS) while enabling");
      return false;
    }
    if (cpl.dw0 & prop::kCstsReady) break;
    if (now_ns() > deadline) {
      err = HostError::make(HostError::Kind::Timeout,
                            fmt::format("controller not ready after {} ms (CAP.TO)", timeout_ms));
      return false;
    }
    wait_ms(1);
  }
  // Other threads read ident once connect() has returned: a reconnect leaves it alone.
  cpl = admin_sync(cmd::identify(uint8_t(Cns::Controller), 0, 0), ident_now, kIdentifyLen, false);
  if (!cpl.status.ok()) return failed("Identify Controller", cpl);
  const auto* was = reinterpret_cast<const IdentifyController*>(ident);
  const auto* now = reinterpret_cast<const IdentifyController*>(ident_now);
  if (!first) {
    // Whatever answers at this address must be the controller we had: writing another
    // subsystem's namespaces as if they were ours would destroy data.
    HostError mismatch = detail::identity_mismatch(*was, *now);
    if (!mismatch.ok()) {
      mismatch.message = fmt::format("another controller answered ({})", mismatch.message);
      err = std::move(mismatch);
      return false;
    }
    if (detail::firmware_revision(*was) != detail::firmware_revision(*now))
      log::info("{}: firmware revision {} is now {}", trid.subnqn, detail::firmware_revision(*was),
                detail::firmware_revision(*now));
  }
  if (first) {
    std::memcpy(ident, ident_now, kIdentifyLen);
    const auto* id = reinterpret_cast<const IdentifyController*>(ident);
    max_transfer = detail::largest_transfer(id->mdts, cap, 8u << 20);
    in_capsule_max = id->ioccsz >= 4 ? id->ioccsz * 16 - 64 : 0;
  }
  if (!discovery) {
    Sqe sf{};
    sf.opc = uint8_t(AdminOpcode::SetFeatures);
    sf.cdw10 = 0x07;
    uint32_t n = std::max<uint32_t>(opts.io_queues, 1) - 1;
    sf.cdw11 = n | (n << 16);
    cpl = admin_sync(sf, nullptr, 0, false);
    if (!cpl.status.ok()) return failed("Set Features (Number of Queues)", cpl);
    uint32_t granted = std::min(cpl.dw0 & 0xFFFF, cpl.dw0 >> 16) + 1;
    if (first) {
      ioq_granted = granted;
      qid_used.assign(ioq_granted + 1, false);
    } else if (granted < ioq_granted) {
      log::warn("{}: the controller now grants {} I/O queues, not {}: queues above that will not reconnect",
                trid.subnqn, granted, ioq_granted);
    }
  }
  cntlid_now.store(admin->cntlid(), std::memory_order_release);
  return true;
}

}  // namespace nvtcp::host
