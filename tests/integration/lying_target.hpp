// SPDX-License-Identifier: Apache-2.0
// A scripted NVMe/TCP controller on a raw loopback socket, for what a hostile or broken target
// does to the host: it speaks just enough of the admin queue for Controller::connect() (ICReq,
// Connect, Property Get/Set, Identify, Set Features, Get Log Page, Keep Alive, AER) and answers
// with whatever the test put in its Script: an Identify Controller of its choosing, an active
// namespace list computed per page, AERs answered the moment they arrive, a discovery log.
// One thread, one connection at a time; counts what it served, so a test asserts on outcomes.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "../support/loopback.hpp"
#include "nvtcp/identify.hpp"
#include "nvtcp/log_pages.hpp"
#include "nvtcp/sqe.hpp"
#include "wire/fabrics.hpp"
#include "wire/pdu.hpp"

namespace nvtcp::test {

class LyingTarget {
 public:
  struct Script {
    nvme::IdentifyController ident{};
    // Page after `after` of the active namespace list (4096 bytes). Unset: NSIDs 1..NN.
    std::function<std::vector<uint8_t>(uint32_t after)> active_list;
    // Set: every AER is answered at once with this dw0 (an event the host must then handle).
    bool aer_flood = false;
    uint32_t aer_dw0 = 0;
    std::vector<uint8_t> discovery_log;  // log page 70h, read from the command's offset
    // A host that keeps asking for list pages past this is cut off, so that a test of an
    // endless list ends (and fails) instead of hanging.
    uint32_t max_list_pages = 200;
    // Called with each admin command before it is answered, on the target's thread (a test
    // steps its fake clock here: a target slow to answer, without real waiting).
    std::function<void(const nvme::Sqe&)> on_command;
  };

  explicit LyingTarget(Script s) : script_(std::move(s)) {
    listen_fd_ = listen_loopback(port_);
    thread_ = std::thread([this] { run(); });
  }
  ~LyingTarget() {
    stop_ = true;
    thread_.join();
    ::close(listen_fd_);
  }
  LyingTarget(const LyingTarget&) = delete;
  LyingTarget& operator=(const LyingTarget&) = delete;

  uint16_t port() const { return port_; }
  std::atomic<uint32_t> list_pages{0};     // Identify CNS 02h served
  std::atomic<uint32_t> identify_ns{0};    // Identify CNS 00h served
  std::atomic<uint64_t> aers_answered{0};  // AERs completed (with aer_flood)
  std::atomic<uint64_t> log_pages{0};      // Get Log Page served, any log
  std::atomic<bool> cut_off{false};        // max_list_pages was passed

  // An Identify Controller with what connect() needs; the test changes what it is about.
  static nvme::IdentifyController controller(const char* subnqn, uint32_t nn) {
    nvme::IdentifyController id{};
    std::memset(id.sn, ' ', sizeof id.sn);
    std::memcpy(id.sn, "LIE1", 4);
    std::memset(id.mn, ' ', sizeof id.mn);
    std::memcpy(id.mn, "lying target", 12);
    std::memset(id.fr, ' ', sizeof id.fr);
    std::memcpy(id.fr, "1.0", 3);
    std::strncpy(id.subnqn, subnqn, sizeof id.subnqn - 1);
    id.nn = nn;
    id.cntlid = 1;
    id.ver = 0x00010400;
    id.sqes = 0x66;
    id.cqes = 0x44;
    id.maxcmd = 128;
    id.ioccsz = 4;  // the 64-byte SQE, no in-capsule data
    id.iorcsz = 1;
    id.kas = 10;
    return id;
  }

 private:
  void run() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      serve(fd);
      ::close(fd);
    }
  }

  bool read_exact(int fd, uint8_t* p, size_t n) {
    while (n > 0) {
      if (stop_) return false;
      pollfd q{fd, POLLIN, 0};
      if (::poll(&q, 1, 20) <= 0) continue;
      ssize_t got = ::recv(fd, p, n, 0);
      if (got <= 0) return false;
      p += got;
      n -= size_t(got);
    }
    return true;
  }
  static bool respond(int fd, uint16_t cid, uint32_t dw0, uint32_t dw1 = 0, uint16_t status = 0) {
    wire::CapsuleRespPdu r{};
    r.ch.type = uint8_t(wire::PduType::CapsuleResp);
    r.ch.hlen = sizeof r;
    r.ch.plen = sizeof r;
    nvme::Cqe c{};
    c.dw0 = dw0;
    c.dw1 = dw1;
    c.cid = cid;
    c.status = uint16_t(status << 1);
    std::memcpy(r.cqe, &c, sizeof c);
    return send_all(fd, &r, sizeof r);
  }
  static bool send_data(int fd, uint16_t cid, const void* data, uint32_t len) {
    wire::C2HDataPdu d{};
    d.ch.type = uint8_t(wire::PduType::C2HData);
    d.ch.flags = wire::kFlagDataLast;
    d.ch.hlen = sizeof d;
    d.ch.pdo = sizeof d;
    d.ch.plen = sizeof d + len;
    d.cccid = cid;
    d.datal = len;
    std::vector<uint8_t> b(sizeof d + len);
    std::memcpy(b.data(), &d, sizeof d);
    std::memcpy(b.data() + sizeof d, data, len);
    return send_all(fd, b.data(), b.size()) && respond(fd, cid, 0);
  }

  void serve(int fd) {
    bool shutting_down = false;
    std::vector<uint8_t> pdu;
    for (;;) {
      wire::CommonHeader ch{};
      if (!read_exact(fd, reinterpret_cast<uint8_t*>(&ch), sizeof ch) || ch.plen < sizeof ch || ch.plen > (1u << 20))
        return;
      pdu.assign(ch.plen, 0);
      std::memcpy(pdu.data(), &ch, sizeof ch);
      if (!read_exact(fd, pdu.data() + sizeof ch, ch.plen - sizeof ch)) return;
      if (ch.type == uint8_t(wire::PduType::ICReq)) {
        wire::ICRespPdu ic{};
        ic.ch.type = uint8_t(wire::PduType::ICResp);
        ic.ch.hlen = sizeof ic;
        ic.ch.plen = sizeof ic;
        ic.maxh2cdata = 131072;
        if (!send_all(fd, &ic, sizeof ic)) return;
        continue;
      }
      if (ch.type != uint8_t(wire::PduType::CapsuleCmd) || ch.plen < sizeof(wire::CapsuleCmdHeader)) return;
      nvme::Sqe sqe;
      std::memcpy(&sqe, pdu.data() + 8, sizeof sqe);
      if (script_.on_command) script_.on_command(sqe);
      bool ok = true;
      switch (sqe.opc) {
        case 0x7F: {  // Fabrics
          const uint8_t fctype = pdu[8 + 4];
          if (fctype == uint8_t(wire::FabricsType::PropertyGet)) {
            uint32_t ofst;
            std::memcpy(&ofst, pdu.data() + 8 + 44, 4);
            uint64_t v = 0;
            if (ofst == 0x0) v = 127 | (1ull << 24);          // CAP: MQES 127, TO 500 ms, MPSMIN 0
            else if (ofst == 0x8) v = 0x00010400;              // VS 1.4
            else if (ofst == 0x1C) v = 1 | (shutting_down ? 0x8 : 0);  // CSTS: RDY, SHST complete
            ok = respond(fd, sqe.cid, uint32_t(v), uint32_t(v >> 32));
          } else if (fctype == uint8_t(wire::FabricsType::PropertySet)) {
            uint64_t v;
            std::memcpy(&v, pdu.data() + 8 + 48, 8);
            if (v & 0xC000) shutting_down = true;  // CC.SHN
            ok = respond(fd, sqe.cid, 0);
          } else {
            ok = respond(fd, sqe.cid, 1);  // Connect: controller 1, no authentication
          }
          break;
        }
        case 0x06: {  // Identify
          const uint8_t cns = sqe.cdw10 & 0xFF;
          std::vector<uint8_t> b(4096, 0);
          if (cns == 1) {
            std::memcpy(b.data(), &script_.ident, sizeof script_.ident);
          } else if (cns == 2) {
            if (++list_pages > script_.max_list_pages) {
              cut_off = true;
              return;
            }
            if (script_.active_list) {
              b = script_.active_list(sqe.nsid);
              b.resize(4096);
            } else {
              uint32_t n = 0;
              for (uint32_t id = sqe.nsid + 1; id <= script_.ident.nn && n < 1024; ++id, ++n)
                std::memcpy(b.data() + n * 4, &id, 4);
            }
          } else if (cns == 0) {
            ++identify_ns;
            nvme::IdentifyNamespace ns{};
            ns.nsze = ns.ncap = ns.nuse = 2048;
            ns.lbaf[0].lbads = 9;
            std::memcpy(b.data(), &ns, sizeof ns);
          }
          ok = send_data(fd, sqe.cid, b.data(), 4096);
          break;
        }
        case 0x02: {  // Get Log Page
          ++log_pages;
          const uint32_t len = (((sqe.cdw10 >> 16) | (sqe.cdw11 << 16)) + 1) * 4;
          const uint64_t off = sqe.cdw12 | (uint64_t(sqe.cdw13) << 32);
          std::vector<uint8_t> b(std::min<uint32_t>(len, 1u << 20), 0);
          if ((sqe.cdw10 & 0xFF) == 0x70)
            for (size_t i = 0; i < b.size() && off + i < script_.discovery_log.size(); ++i)
              b[i] = script_.discovery_log[off + i];
          ok = send_data(fd, sqe.cid, b.data(), uint32_t(b.size()));
          break;
        }
        case 0x0C:  // Asynchronous Event Request: held, or answered at once
          if (script_.aer_flood) {
            ++aers_answered;
            ok = respond(fd, sqe.cid, script_.aer_dw0);
          }
          break;
        default:  // Set/Get Features (one I/O queue pair), Keep Alive, anything else: success
          ok = respond(fd, sqe.cid, 0);
      }
      if (!ok) return;
    }
  }

  Script script_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace nvtcp::test
