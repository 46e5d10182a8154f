// SPDX-License-Identifier: Apache-2.0
// libFuzzer: a whole host queue pair (TCP connect, ICReq/ICResp, fabrics Connect, reads and
// writes with in-capsule data, R2T/H2CData and C2HData, digests) against a "target" that
// sends the fuzz input as its byte stream. The target is a loopback listener in this process;
// a peer thread accepts the host's connection and writes the input to it while draining what
// the host sends. The host owns its buffers the way an application does: each command's buffer
// is a heap block of exactly its length, freed in the command's completion callback, so any
// write by the host outside a buffer, or into it after completion, is an ASan report.
//
// Checks: no crash or sanitizer report; every submitted command completes exactly once, and by
// the time shutdown() returns; outstanding() is 0 then; nothing leaks.
// HOST_FUZZ_VERBOSE=1 prints the host's log and what each run did.
//
// Input: an 8-byte header, then the target->host stream.
//   [0] ctl   bits 0-1 handshake: 0 = the stream from the first byte (the fuzzer must get
//                      ICResp and the Connect response right itself);
//                      1 = a valid ICResp and Connect response made here from byte 3, then,
//                      once the host has submitted its commands, the stream;
//                      2, 3 = the stream holds its own handshake: its first two PDUs (by their
//                      PLEN) are the ICResp and the Connect response, the rest is sent once the
//                      host has submitted (this is how captured target->host sessions are used
//                      as seeds). In modes 1-3 the Connect response goes out only after the
//                      host's Connect command came, with that command's CID put in its CQE.
//             bit 2 header digest, bit 3 data digest (what the host asks for)
//             bit 4 the target closes after the stream (EOF); otherwise the connection stays
//                   up and the host shuts down with whatever is still outstanding
//             bit 5 admin queue (qid 0) instead of I/O queue 1
//             bit 6 in-capsule writes up to 8 KiB (else 4 KiB)
//   [1] bits 0-1: commands submitted at first (1..4); bits 2-7: how many more are submitted
//       from completion callbacks (as `nvtcp perf` does), 0..63
//   [2] chunking of the stream: bit 7 set: chunks of (bits 0-6) + 1 bytes; else (value + 1) * 512
//   [3] generated handshake: bits 0-1 CPDA, bits 2-3 MAXH2CDATA = 4 KiB << n, bit 4: the
//       generated ICResp grants other digests than asked, bit 5: Connect status error
//   [4..7] command i: bit 0 write, bits 1-3 size 512 << n (512 .. 64 KiB), bit 4 no data (Flush)
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "host/queue_pair_impl.hpp"
#include "reactor/reactor.hpp"
#include "util/log.hpp"
#include "wire/digest.hpp"
#include "wire/pdu.hpp"

using namespace nvtcp;

namespace {

constexpr size_t kHeader = 8;
constexpr uint32_t kInitialMax = 4;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "host_connection_fuzz: %s\n", what);
  std::abort();
}

int listener_port(int& lfd) {
  static int fd = -1;
  static int port = 0;
  if (fd < 0) {
    log::set_level(std::getenv("HOST_FUZZ_VERBOSE") ? log::Level::Debug : log::Level::Off);
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 16) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      die("cannot listen on 127.0.0.1");
    port = ntohs(a.sin_port);
  }
  lfd = fd;
  return port;
}

// The host's end of the connection, found by address, so the peer can tell when the host has
// taken every byte out of its socket (FIONREAD 0) without a fixed sleep. Not instrumented, and
// no memcmp: the addresses would otherwise end up in libFuzzer's dictionary.
__attribute__((no_sanitize("coverage"))) int find_host_fd(int peer_fd) {
  sockaddr_in want{};
  socklen_t wl = sizeof(want);
  if (::getpeername(peer_fd, reinterpret_cast<sockaddr*>(&want), &wl) != 0 || want.sin_family != AF_INET) return -1;
  for (int fd = 3, unused = 0; fd < 4096 && unused < 64; ++fd) {  // fds are allocated lowest first
    if (fd == peer_fd) continue;
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      ++unused;
      continue;
    }
    unused = 0;
    if (!S_ISSOCK(st.st_mode)) continue;
    sockaddr_in got{};
    socklen_t gl = sizeof(got);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&got), &gl) == 0 && got.sin_family == AF_INET &&
        got.sin_port == want.sin_port && got.sin_addr.s_addr == want.sin_addr.s_addr)
      return fd;
  }
  return -1;
}

struct Shared {
  // Set by the host thread, which then pokes wake so that the peer never sleeps past them.
  std::atomic<bool> submitted{false};  // connect() returned and the first commands are queued
  std::atomic<bool> finished{false};   // the host side is done; the peer must stop
  // Set by the peer.
  std::atomic<bool> drained{false};    // every byte written and taken in by the host (or the host is gone)
  int wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ~Shared() { ::close(wake); }
  void set(std::atomic<bool>& flag) {
    flag = true;
    uint64_t one = 1;
    if (::write(wake, &one, sizeof(one)) < 0) die("eventfd write");
  }
};

struct Peer {
  Shared* sh;
  std::vector<uint8_t> before;  // sent at once
  std::vector<uint8_t> connect_resp;  // sent once the host has sent its Connect command
  const uint8_t* after = nullptr;  // sent once the host has submitted
  size_t after_len = 0;
  size_t chunk = 512;
  bool close_at_end = false;
  int fd = -1;
  bool host_gone = false;
  size_t host_bytes = 0;  // received from the host so far
  uint8_t host_head[sizeof(wire::ICReqPdu) + sizeof(wire::CapsuleCmdHeader)] = {};
  bool hdgst = false;

  // The Connect response goes to whatever CID the host gave its Connect command (the host
  // may keep a request of its own for it), so that the handshake does not depend on it.
  void answer_connect_cid() {
    if (host_bytes < sizeof(host_head) || connect_resp.size() < sizeof(wire::CapsuleRespPdu)) return;
    auto* ch = reinterpret_cast<wire::CommonHeader*>(connect_resp.data());
    if (ch->type != uint8_t(wire::PduType::CapsuleResp) || ch->hlen != sizeof(wire::CapsuleRespPdu)) return;
    constexpr size_t kCmdCid = sizeof(wire::ICReqPdu) + sizeof(wire::CommonHeader) + offsetof(nvme::Sqe, cid);
    constexpr size_t kRespCid = sizeof(wire::CommonHeader) + offsetof(nvme::Cqe, cid);
    std::memcpy(connect_resp.data() + kRespCid, host_head + kCmdCid, 2);
    if (hdgst && (ch->flags & wire::kFlagHdgst) && connect_resp.size() >= sizeof(wire::CapsuleRespPdu) + 4) {
      uint32_t crc = wire::crc32c(connect_resp.data(), sizeof(wire::CapsuleRespPdu));
      std::memcpy(connect_resp.data() + sizeof(wire::CapsuleRespPdu), &crc, 4);
    }
  }

  // Drains the host's bytes; waits up to timeout_ms for the socket to become writable or readable.
  void pump(int timeout_ms, bool want_write) {
    pollfd pf[2] = {{fd, short(POLLIN | (want_write ? POLLOUT : 0)), 0}, {sh->wake, POLLIN, 0}};
    if (::poll(pf, 2, timeout_ms) <= 0) return;
    uint64_t v;
    if (pf[1].revents & POLLIN) (void)!::read(sh->wake, &v, sizeof(v));
    pollfd& p = pf[0];
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      uint8_t sink[65536];
      for (;;) {
        ssize_t n = ::recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
        if (n > 0) {
          // Keep the start of the host's stream: its Connect command's CID is answered below.
          size_t keep = std::min<size_t>(size_t(n), sizeof(host_head) - std::min(sizeof(host_head), host_bytes));
          std::memcpy(host_head + std::min(sizeof(host_head), host_bytes), sink, keep);
          host_bytes += size_t(n);
          continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) host_gone = true;
        break;
      }
    }
  }

  void send_all(const uint8_t* d, size_t len) {
    size_t off = 0;
    while (off < len && !host_gone && !sh->finished.load()) {
      size_t n = std::min(chunk, len - off);
      ssize_t w = ::send(fd, d + off, n, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w > 0) {
        off += size_t(w);
      } else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
        pump(10, true);
      } else {
        host_gone = true;
      }
      if (chunk < 512) pump(0, false);  // small chunks: let the host see them one by one
    }
  }

  void run(int lfd) {
    while (fd < 0 && !sh->finished.load()) {
      pollfd p[2] = {{lfd, POLLIN, 0}, {sh->wake, POLLIN, 0}};
      if (::poll(p, 2, 100) > 0 && (p[0].revents & POLLIN))
        fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    }
    if (fd < 0) {
      sh->drained = true;
      return;
    }
    int one = 1;  // no Nagle: every chunk leaves at once, and "sent" means "in the host's socket"
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    int host_fd = find_host_fd(fd);
    if (std::getenv("HOST_FUZZ_VERBOSE")) std::fprintf(stderr, "peer fd %d host fd %d\n", fd, host_fd);
    send_all(before.data(), before.size());
    if (!connect_resp.empty()) {
      // As a real target, answer Connect only once it came (the ICReq is 128 bytes): the host
      // sends it after taking in the ICResp.
      while (host_bytes < sizeof(host_head) && !sh->submitted.load() && !host_gone && !sh->finished.load())
        pump(100, false);
      answer_connect_cid();
      send_all(connect_resp.data(), connect_resp.size());
    }
    while (!sh->submitted.load() && !host_gone && !sh->finished.load()) pump(100, false);
    send_all(after, after_len);
    // Wait until the host has read everything (or is gone) before it may shut down.
    uint64_t deadline = reactor::monotonic_ns() + 2'000'000'000ull;
    int empty = 0;
    while (!host_gone && !sh->finished.load() && empty < 2 && reactor::monotonic_ns() < deadline) {
      int q = 0, unsent = 0;
      if (host_fd < 0 || ::ioctl(host_fd, FIONREAD, &q) != 0) break;
      ::ioctl(fd, SIOCOUTQNSD, &unsent);
      empty = q == 0 && unsent == 0 ? empty + 1 : 0;
      pump(empty ? 0 : 1, false);
    }
    if (std::getenv("HOST_FUZZ_VERBOSE"))
      std::fprintf(stderr, "peer: sent, host took it in (%d empty checks), host sent %zu bytes, gone %d\n", empty,
                   host_bytes, int(host_gone));
    if (close_at_end) ::shutdown(fd, SHUT_WR);
    sh->drained = true;
    while (!host_gone && !sh->finished.load()) pump(100, false);
    ::close(fd);
  }
};

struct Cmd;
struct Run {
  host::detail::QueuePairImpl* qp = nullptr;
  std::vector<Cmd*> cmds;
  uint32_t resubmits_left = 0;
  uint32_t submitted = 0;
  uint32_t completed = 0;
};

struct Cmd {
  Run* run = nullptr;
  bool write = false;
  bool flush = false;
  uint32_t len = 0;
  uint8_t* buf = nullptr;
  bool outstanding = false;

  int submit() {
    nvme::Sqe s{};
    s.opc = uint8_t(flush ? nvme::IoOpcode::Flush : write ? nvme::IoOpcode::Write : nvme::IoOpcode::Read);
    s.nsid = 1;
    s.cdw12 = flush ? 0 : (len / 512 - 1);
    if (len) {
      buf = static_cast<uint8_t*>(std::malloc(len));
      std::memset(buf, write ? 0x5a : 0, len);
    }
    int rc = run->qp->submit(s, buf, len, write, &Cmd::done, this).to_errno();
    if (rc != 0) {
      std::free(buf);
      buf = nullptr;
      return rc;
    }
    outstanding = true;
    ++run->submitted;
    return 0;
  }

  static void done(void* ctx, const host::Completion&) {
    auto* c = static_cast<Cmd*>(ctx);
    if (!c->outstanding) die("a command completed twice (or without being submitted)");
    c->outstanding = false;
    ++c->run->completed;
    // The application owns the buffer again: give it back, so that any later write to it by
    // the host is a use after free.
    std::free(c->buf);
    c->buf = nullptr;
    if (c->run->resubmits_left > 0 && !c->run->qp->failed()) {
      --c->run->resubmits_left;
      c->submit();
    }
  }
};

// A PDU's total length from its common header, 0 when there is no whole header.
size_t pdu_len(const uint8_t* d, size_t len) {
  if (len < sizeof(wire::CommonHeader)) return 0;
  uint32_t plen;
  std::memcpy(&plen, d + 4, 4);
  return plen;
}

void generated_handshake(std::vector<uint8_t>& out, std::vector<uint8_t>& out2, uint8_t hs, bool hdgst, bool ddgst) {
  wire::ICRespPdu ic{};
  ic.ch.type = uint8_t(wire::PduType::ICResp);
  ic.ch.hlen = sizeof(ic);
  ic.ch.plen = sizeof(ic);
  ic.pfv = wire::kPfv;
  ic.cpda = hs & 3;
  ic.digest = uint8_t((hdgst ? 1 : 0) | (ddgst ? 2 : 0));
  if (hs & 0x10) ic.digest ^= 1;
  ic.maxh2cdata = 4096u << ((hs >> 2) & 3);
  auto* p = reinterpret_cast<const uint8_t*>(&ic);
  out.insert(out.end(), p, p + sizeof(ic));

  uint8_t resp[sizeof(wire::CapsuleRespPdu) + wire::kDigestLen] = {};
  auto* r = reinterpret_cast<wire::CapsuleRespPdu*>(resp);
  wire::fill_common_header(r->ch, wire::PduType::CapsuleResp, sizeof(wire::CapsuleRespPdu), 0, 0, hdgst, ddgst, 0);
  nvme::Cqe cqe{};
  cqe.dw0 = 1;                 // CNTLID
  cqe.cid = 0;                 // replaced with the Connect command's CID by the peer
  cqe.status = (hs & 0x20) ? uint16_t(0x182 << 1) : 0;  // Connect Invalid Parameters
  std::memcpy(r->cqe, &cqe, sizeof(cqe));
  if (hdgst) {
    uint32_t crc = wire::crc32c(resp, sizeof(wire::CapsuleRespPdu));
    std::memcpy(resp + sizeof(wire::CapsuleRespPdu), &crc, 4);
  }
  out2.insert(out2.end(), resp, resp + r->ch.plen);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kHeader) return 0;
  static reactor::Reactor r(256);
  int lfd;
  int port = listener_port(lfd);

  const uint8_t ctl = data[0], counts = data[1], chunking = data[2], hs = data[3];
  const uint8_t* stream = data + kHeader;
  size_t stream_len = size - kHeader;

  host::detail::QueueParams qpp;
  qpp.trid.traddr = "127.0.0.1";
  qpp.trid.trsvcid = uint16_t(port);
  qpp.trid.subnqn = "nqn.2026-11.io.nvtcp:fuzz";
  qpp.hostnqn = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000000";
  qpp.qid = (ctl & 0x20) ? 0 : 1;
  qpp.depth = 8;
  qpp.hdgst = ctl & 4;
  qpp.ddgst = ctl & 8;
  qpp.in_capsule_max = (ctl & 0x40) ? 8192 : 4096;
  qpp.max_transfer = 64 * 1024;
  qpp.timeout_ms = 25;  // a handshake the input leaves unfinished costs this much

  Shared sh;
  Peer peer;
  peer.sh = &sh;
  peer.chunk = (chunking & 0x80) ? size_t(chunking & 0x7f) + 1 : (size_t(chunking) + 1) * 512;
  peer.close_at_end = ctl & 0x10;
  peer.hdgst = qpp.hdgst;
  switch (ctl & 3) {
    case 0:
      peer.before.assign(stream, stream + stream_len);
      break;
    case 1:
      generated_handshake(peer.before, peer.connect_resp, hs, qpp.hdgst, qpp.ddgst);
      peer.after = stream;
      peer.after_len = stream_len;
      break;
    default: {
      // The first PDU as the ICResp, the second as the Connect response (a PDU length that
      // runs past the end takes the rest of the stream).
      size_t a = std::min(std::max<size_t>(pdu_len(stream, stream_len), 1), stream_len);
      size_t b = std::min(std::max<size_t>(pdu_len(stream + a, stream_len - a), 1), stream_len - a);
      peer.before.assign(stream, stream + a);
      peer.connect_resp.assign(stream + a, stream + a + b);
      peer.after = stream + a + b;
      peer.after_len = stream_len - a - b;
      break;
    }
  }

  Run run;
  std::vector<Cmd> cmds(kInitialMax);
  run.resubmits_left = counts >> 2;
  {
    host::detail::QueuePairImpl qp(r, qpp);
    run.qp = &qp;
    std::thread t([&] { peer.run(lfd); });

    host::detail::HostError err;
    bool connected = qp.connect(err);
    if (connected) {
      uint32_t n = 1 + (counts & 3);
      for (uint32_t i = 0; i < n; ++i) {
        uint8_t k = data[4 + i];
        Cmd& c = cmds[i];
        c.run = &run;
        c.flush = k & 0x10;
        c.write = !c.flush && (k & 1);
        c.len = c.flush ? 0 : 512u << ((k >> 1) & 7);
        if (c.len > qpp.max_transfer) c.len = qpp.max_transfer;
        c.submit();
      }
    }
    sh.set(sh.submitted);
    // Run until the host has failed, or has taken in the whole stream and acted on it.
    uint64_t deadline = reactor::monotonic_ns() + 3'000'000'000ull;
    while (!qp.failed() && reactor::monotonic_ns() < deadline) {
      bool drained = sh.drained.load();
      qp.poll(drained ? 0 : 200);
      if (drained) {
        qp.poll(0);
        break;
      }
    }
    // A failed connection finishes closing in a turn or two; then shutdown() has nothing to wait for.
    for (int i = 0; i < 4 && qp.failed(); ++i) qp.poll(0);
    qp.shutdown();
    sh.set(sh.finished);
    t.join();

    if (std::getenv("HOST_FUZZ_VERBOSE"))
      std::fprintf(stderr, "connect %s%s; submitted %u completed %u failed %d\n", connected ? "ok" : "failed: ",
                   err.message.c_str(), run.submitted, run.completed, int(qp.failed()));
    if (qp.outstanding() != 0) die("outstanding() is not 0 after shutdown()");
    for (auto& c : cmds)
      if (c.outstanding) die("a command never completed although the queue pair was shut down");
    if (run.completed != run.submitted) die("completions do not match submissions");
  }
  for (auto& c : cmds) std::free(c.buf);
  return 0;
}
