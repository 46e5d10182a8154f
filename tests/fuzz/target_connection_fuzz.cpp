// SPDX-License-Identifier: Apache-2.0
// libFuzzer: a whole target connection (PDU layer, fabrics Connect and its data, admin
// and I/O commands against RAM and null namespaces) fed an arbitrary byte stream from a
// peer over a socketpair, on a real reactor. Responses are read and dropped. Each input
// ends with the peer closing, after which the connection must free itself.
//
// An input is one connection: an admin queue (Connect with qid 0 makes its own controller),
// or an I/O queue of the standing controller 1, which the fuzzer keeps enabled with 4 I/O
// queues for host nqn.2026-11.io.nvtcp:fuzz-host, host ID 00 01 .. 0f (what the io_* seeds,
// made by make_io_seeds.py, connect as), so that I/O commands are reached too.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <memory>

#include "reactor/reactor.hpp"
#include "target_tcp/tcp_queue.hpp"
#include "target/target_state.hpp"
#include "util/log.hpp"
#include "wire/fabrics.hpp"
#include "wire/features.hpp"

using namespace nvtcp;

namespace {
target::TargetState& state() {
  static target::TargetState* st = [] {
    log::set_level(log::Level::Off);
    target::TargetConfig cfg;
    cfg.listeners.push_back({"127.0.0.1", 4420});
    target::SubsystemConfig sc;
    sc.nqn = "nqn.2026-11.io.nvtcp:fuzz";
    sc.namespaces.push_back({1, "ram", 1u << 20, "", 512});
    sc.namespaces.push_back({2, "null", 1u << 30, "", 4096});
    cfg.subsystems.push_back(sc);
    target::finalize_config(cfg);
    auto* s = new target::TargetState();
    target::build_state(cfg, *s);
    target::Subsystem* sub = s->find_subsystem(sc.nqn).get();
    uint8_t hostid[16];
    for (uint8_t i = 0; i < 16; ++i) hostid[i] = i;
    auto ctrl = sub->add_controller(
        std::make_shared<target::Controller>(*s, *sub, sub->allocate_cntlid(), "nqn.2026-11.io.nvtcp:fuzz-host", hostid, 0));
    ctrl->property_set(nvme::prop::CC, false, 0x00460001);  // EN, IOSQES 6, IOCQES 4
    ctrl->io_queues.grant(4);  // as Set Features 07h would
    static std::shared_ptr<target::Controller> standing = ctrl;  // lives as long as the state
    return s;
  }();
  return *st;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static reactor::Reactor r(256);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  target::ConnectionSet set;
  auto* conn = new target::TcpQueue(state(), r, sv[0], "fuzz", set);
  conn->start();
  size_t off = 0;
  bool peer_closed = false;
  uint8_t sink[65536];
  for (int turn = 0; turn < 100000 && set.size() > 0; ++turn) {
    if (off < size) {
      ssize_t n = write(sv[1], data + off, size - off);
      if (n > 0) off += size_t(n);
    } else if (!peer_closed) {
      shutdown(sv[1], SHUT_WR);
      peer_closed = true;
    }
    while (read(sv[1], sink, sizeof(sink)) > 0) {
    }
    r.run_once(0);
  }
  if (set.size() > 0) set.close_all();
  for (int turn = 0; turn < 1000 && set.size() > 0; ++turn) r.run_once(1000);
  close(sv[1]);
  if (set.size() > 0) __builtin_trap();  // a connection that never finishes closing is a bug
  return 0;
}
