// SPDX-License-Identifier: Apache-2.0
// The host keeps its picture of the namespaces current by itself: it keeps Asynchronous
// Event Requests outstanding, rescans when the controller reports a namespace attribute
// change, rescans after every reconnect (and refuses a reconnect that reaches another
// subsystem), clears error events by reading their log, and does not ask again for events
// when the controller refuses the request.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "../support/loopback.hpp"
#include "nvtcp/host.hpp"
#include "nvtcp/identify.hpp"
#include "nvtcp/log_pages.hpp"
#include "../support/stderr_capture.hpp"
#include "test_devices.hpp"
#include "test_target.hpp"
#include "wire/fabrics.hpp"
#include "wire/pdu.hpp"

namespace nvtcp::test::host_rescan_test {
namespace {

using host::Completion;
using host::ControllerOptions;
using host::NamespaceInfo;
using host::QueuePair;

constexpr uint32_t kFileNsid = 4;
constexpr uint32_t kBlock = 512;
// The target looks at backing files once a second; a rescan follows within a few of those.
// Generous: this bounds a wait, it is not a timing being tested.
constexpr int kDueMs = 15000;

uint64_t blocks_of(uint64_t bytes) { return bytes / kBlock; }

// on_namespace_change calls, from the admin thread. With ctrl set, each call also asks the
// controller itself (an admin command from the admin thread) for the namespace's size.
struct ChangeLog {
  std::mutex mu;
  std::vector<uint32_t> nsids;
  std::atomic<host::Controller*> ctrl{nullptr};
  std::atomic<uint64_t> nsze_seen{0};
  void add(uint32_t nsid) {
    if (host::Controller* c = ctrl.load()) {
      alignas(8) uint8_t id[nvme::kIdentifyLen];
      if (c->identify(uint8_t(nvme::Cns::Namespace), nsid, id).status.ok())
        nsze_seen = reinterpret_cast<const nvme::IdentifyNamespace*>(id)->nsze;
    }
    std::lock_guard lk(mu);
    nsids.push_back(nsid);
  }
  size_t count(uint32_t nsid) {
    std::lock_guard lk(mu);
    return size_t(std::count(nsids.begin(), nsids.end(), nsid));
  }
};

ControllerOptions options(ChangeLog* changes, bool reconnect) {
  ControllerOptions o;
  if (changes) o.on_namespace_change = [changes](uint32_t nsid) { changes->add(nsid); };
  if (reconnect) {
    o.ctrl_loss_tmo_ms = 20000;
    o.reconnect_delay_ms = 100;
    o.connect_timeout_ms = 2000;
  }
  return o;
}

uint64_t host_blocks(host::Controller& c, uint32_t nsid) {
  NamespaceInfo ni;
  std::string err;
  return c.namespace_info(nsid, ni, err) ? ni.blocks : 0;
}

// One command on qp, waited for by polling it (which also drives its reconnects).
Completion run_io(QueuePair& qp, bool write, uint32_t nsid, uint64_t lba, void* buf) {
  struct Done {
    bool done = false;
    Completion c;
  } d;
  auto cb = [](void* ctx, const Completion& c) {
    auto* p = static_cast<Done*>(ctx);
    p->c = c;
    p->done = true;
  };
  int rc = write ? qp.write(nsid, lba, 1, buf, cb, &d) : qp.read(nsid, lba, 1, buf, cb, &d);
  if (rc != 0) {
    d.c.status = nvme::sc::InternalError;
    ADD_FAILURE() << (write ? "write" : "read") << " at LBA " << lba << " refused: " << rc;
    return d.c;
  }
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(kDueMs);
  while (!d.done && std::chrono::steady_clock::now() < end) qp.process_completions(1000);
  if (!d.done) {
    ADD_FAILURE() << "command at LBA " << lba << " not completed";
    d.c.status = nvme::sc::InternalError;
  }
  return d.c;
}

// Writes a pattern at lba through qp and reads it back.
void expect_block_works(QueuePair& qp, uint32_t nsid, uint64_t lba, uint64_t seed) {
  auto data = pattern(kBlock, seed);
  std::vector<uint8_t> back(kBlock);
  Completion c = run_io(qp, true, nsid, lba, data.data());
  EXPECT_TRUE(c.status.ok()) << "write at LBA " << lba << ": " << nvme::status_name(c.status);
  c = run_io(qp, false, nsid, lba, back.data());
  EXPECT_TRUE(c.status.ok()) << "read at LBA " << lba << ": " << nvme::status_name(c.status);
  EXPECT_EQ(back, data) << "LBA " << lba;
}

void expect_out_of_range(QueuePair& qp, uint32_t nsid, uint64_t lba) {
  std::vector<uint8_t> buf(kBlock);
  Completion c = run_io(qp, false, nsid, lba, buf.data());
  EXPECT_EQ(c.status, nvme::sc::LbaOutOfRange) << "read at LBA " << lba << ": " << nvme::status_name(c.status);
}

// A file namespace (nsid 4) with no configured size: it follows its file.
class HostRescan : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(make_temp_file("nvtcp-rescan", 8 << 20, path_));
    cfg_ = default_config();
    cfg_.subsystems[0].namespaces.push_back({kFileNsid, "file", 0, path_, kBlock});
    t_ = std::make_unique<RunningTarget>(cfg_);
    cfg_.listeners[0].port = t_->port();  // a restarted target comes back on the same port
  }
  void TearDown() override {
    t_.reset();
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  void resize(uint64_t bytes) { ASSERT_EQ(::truncate(path_.c_str(), off_t(bytes)), 0); }
  // Stops the target, runs between() while it is down, and starts it again with cfg.
  void restart(const target::TargetConfig& cfg, const std::function<void()>& between) {
    t_.reset();
    between();
    // The host keeps trying meanwhile: it must find nothing, then the new target.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    t_ = std::make_unique<RunningTarget>(cfg);
  }
  std::string path_;
  target::TargetConfig cfg_;
  std::unique_ptr<RunningTarget> t_;
};

TEST_F(HostRescan, AGrownNamespaceIsSeenWithoutAskingAndServesItsNewBlocks) {
  ChangeLog changes;
  std::string err;
  auto ctrl = host::Controller::connect(t_->trid(), options(&changes, false), err);
  ASSERT_TRUE(ctrl) << err;
  changes.ctrl = ctrl.get();
  auto qp = ctrl->create_io_qpair(8, err);
  ASSERT_TRUE(qp) << err;
  EXPECT_EQ(host_blocks(*ctrl, kFileNsid), blocks_of(8 << 20));
  EXPECT_EQ(ctrl->namespace_generation(), 0u);
  const std::vector<uint32_t> all{1, 2, 3, kFileNsid};
  EXPECT_EQ(ctrl->active_namespaces(), all);

  resize(16 << 20);
  ASSERT_TRUE(wait_for([&] { return host_blocks(*ctrl, kFileNsid) == blocks_of(16 << 20); }, kDueMs))
      << "the host still sees " << host_blocks(*ctrl, kFileNsid) << " blocks";
  // The generation moves once the new state is published (so a reader that sees it sees
  // the new state), and the callback comes after: both may trail namespace_info() a little.
  EXPECT_TRUE(wait_for([&] { return ctrl->namespace_generation() >= 1; }, kDueMs));
  ASSERT_TRUE(wait_for([&] { return changes.count(kFileNsid) >= 1; }, kDueMs));
  EXPECT_EQ(changes.count(1) + changes.count(2) + changes.count(3), 0u) << "only namespace 4 changed";
  EXPECT_EQ(changes.nsze_seen.load(), blocks_of(16 << 20)) << "admin() from the callback";
  EXPECT_EQ(ctrl->active_namespaces(), all);
  EXPECT_EQ(qp->block_size(kFileNsid), kBlock);
  // The queue pair made before the change reaches the new last block, and not one past it.
  expect_block_works(*qp, kFileNsid, blocks_of(16 << 20) - 1, 1);
  expect_out_of_range(*qp, kFileNsid, blocks_of(16 << 20));

  // Shrunk: commands beyond the new end get LBA Out of Range from the target.
  const uint64_t generation = ctrl->namespace_generation();
  resize(4 << 20);
  ASSERT_TRUE(wait_for([&] { return host_blocks(*ctrl, kFileNsid) == blocks_of(4 << 20); }, kDueMs));
  EXPECT_TRUE(wait_for([&] { return ctrl->namespace_generation() > generation; }, kDueMs));
  EXPECT_TRUE(wait_for([&] { return changes.count(kFileNsid) >= 2; }, kDueMs));
  expect_out_of_range(*qp, kFileNsid, blocks_of(16 << 20) - 1);
  expect_block_works(*qp, kFileNsid, blocks_of(4 << 20) - 1, 2);
  changes.ctrl = nullptr;
}

TEST_F(HostRescan, RescanOnRequestSeesWhatNoNoticeReported) {
  // rescan_namespaces() is for controllers that send no notices; here it must at least
  // agree with the target at once, whatever the notices are doing.
  std::string err;
  auto ctrl = host::Controller::connect(t_->trid(), options(nullptr, false), err);
  ASSERT_TRUE(ctrl) << err;
  resize(12 << 20);
  // The target itself notices the new size within its once-a-second look.
  ASSERT_TRUE(wait_for(
      [&] {
        std::string e;
        return ctrl->rescan_namespaces(e) && host_blocks(*ctrl, kFileNsid) == blocks_of(12 << 20);
      },
      kDueMs));
  EXPECT_TRUE(ctrl->rescan_namespaces(err)) << err;
}

TEST_F(HostRescan, AfterATargetRestartTheHostHasTheSizeTheFileGrewToMeanwhile) {
  ChangeLog changes;
  std::string err;
  auto ctrl = host::Controller::connect(t_->trid(), options(&changes, true), err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(8, err);
  ASSERT_TRUE(qp) << err;
  expect_block_works(*qp, kFileNsid, 0, 3);

  restart(cfg_, [&] { resize(24 << 20); });
  ASSERT_TRUE(wait_for([&] { return ctrl->resets() >= 1 && ctrl->live(); }, kDueMs));
  EXPECT_EQ(host_blocks(*ctrl, kFileNsid), blocks_of(24 << 20)) << "the reconnect rescans before going live";
  EXPECT_GE(changes.count(kFileNsid), 1u);
  EXPECT_GE(ctrl->namespace_generation(), 1u);
  EXPECT_EQ(changes.count(2), 0u) << "the RAM namespaces came back as they were (the same NGUID)";
  // The queue pair reconnects by itself (driven by polling it) and reaches the new blocks.
  expect_block_works(*qp, kFileNsid, blocks_of(24 << 20) - 1, 4);
  EXPECT_GE(qp->reconnects(), 1u);
}

TEST_F(HostRescan, AReconnectToAnotherSubsystemSerialIsRefusedForGood) {
  StderrCapture log;
  std::string err;
  auto ctrl = host::Controller::connect(t_->trid(), options(nullptr, true), err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(8, err);
  ASSERT_TRUE(qp) << err;
  std::string serial(reinterpret_cast<const nvme::IdentifyController*>(ctrl->identify_data())->sn, 20);
  serial.erase(serial.find_last_not_of(' ') + 1);

  target::TargetConfig other = cfg_;
  other.subsystems[0].serial = "NVTCP-ANOTHER-ONE";
  ASSERT_NE(serial, other.subsystems[0].serial);
  restart(other, [] {});
  ASSERT_TRUE(wait_for([&] { return ctrl->failed(); }, kDueMs)) << "the host accepted another controller";
  EXPECT_FALSE(ctrl->live());
  EXPECT_EQ(ctrl->resets(), 1u) << "no attempt after the refusal";
  EXPECT_EQ(log.count("another controller answered (serial number '" + serial + "' is now 'NVTCP-ANOTHER-ONE')"), 1u);
  EXPECT_EQ(log.count("controller failed for good"), 1u);
  // Its queue pair learns it at its next poll, and fails what it held.
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(kDueMs);
  while (!qp->failed() && std::chrono::steady_clock::now() < end) qp->process_completions(1000);
  EXPECT_TRUE(qp->failed());
  std::vector<uint8_t> buf(kBlock);
  EXPECT_EQ(qp->read(2, 0, 1, buf.data(), [](void*, const Completion&) {}, nullptr), -ENOTCONN);
}

TEST(HostAsyncEvents, AnErrorEventIsLoggedAndItsLogReadSoTheNextOneComes) {
  target::TargetConfig cfg = default_config();
  cfg.subsystems[0].namespaces = {{1, "ram", 1 << 20, "", kBlock}};
  auto factory = [](const target::NamespaceConfig& nc, std::string&) -> std::unique_ptr<backend::BlockDevice> {
    return std::make_unique<FailingReadDevice>(nc.size, nc.block_size);
  };
  RunningTarget t(cfg, factory);

  StderrCapture log;
  host::TransportId trid;
  trid.trsvcid = t.port();
  trid.subnqn = kTestNqn;
  std::string err;
  auto ctrl = host::Controller::connect(trid, ControllerOptions{}, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(4, err);
  ASSERT_TRUE(qp) << err;
  const std::string event = "asynchronous event 0x00010400 (error, information 0x04, log page 0x01): error ";
  std::vector<uint8_t> buf(kBlock);
  EXPECT_EQ(run_io(*qp, false, 1, 7, buf.data()).status, nvme::sc::UnrecoveredReadError);
  ASSERT_TRUE(wait_for([&] { return log.count(event) == 1; }, kDueMs)) << "no error event logged";
  EXPECT_EQ(log.count(event + "1 on queue 1"), 1u) << "the line names the newest error log entry";
  // The target reports the type again only once its log was read with RAE 0.
  EXPECT_EQ(run_io(*qp, false, 1, 7, buf.data()).status, nvme::sc::UnrecoveredReadError);
  ASSERT_TRUE(wait_for([&] { return log.count(event) == 2; }, kDueMs)) << "no second error event";
  EXPECT_EQ(log.count(event + "2 on queue 1"), 1u);
  EXPECT_TRUE(ctrl->live());
}

// ------------------------------------------------------------------ a controller that refuses AERs

// Just enough of an NVMe/TCP controller (admin queue, no digests) to bring a host up, with
// one namespace; it answers every Asynchronous Event Request with AER Limit Exceeded and
// counts them. A host that asked again after each refusal would send them without end.
class AerRefusingController {
 public:
  AerRefusingController() {
    lfd_ = listen_loopback(port_);
    if (lfd_ < 0) throw std::runtime_error("listen");
    thread_ = std::thread([this] { serve(); });
  }
  ~AerRefusingController() {
    stop_ = true;
    const int c = cfd_.load();
    if (c >= 0) ::shutdown(c, SHUT_RDWR);
    thread_.join();
    ::close(lfd_);
  }
  uint16_t port() const { return port_; }
  int aers() const { return aers_.load(); }
  int commands() const { return commands_.load(); }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{lfd_, POLLIN, 0};
      if (::poll(&p, 1, 50) != 1) continue;
      const int fd = ::accept4(lfd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      const int one = 1;  // each response is several small writes: no Nagle wait between them
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      cfd_ = fd;
      session(fd);
      cfd_ = -1;
      ::close(fd);
    }
  }

  void session(int fd) {
    wire::ICReqPdu req;
    if (!recv_all(fd, &req, sizeof(req))) return;
    const wire::ICRespPdu resp = wire::make_icresp(0, false, false, 128 * 1024);
    if (!send_all(fd, &resp, sizeof(resp))) return;
    uint32_t cc = 0;
    while (!stop_) {
      wire::CommonHeader ch;
      if (!recv_all(fd, &ch, sizeof(ch)) || ch.type != uint8_t(wire::PduType::CapsuleCmd) || ch.plen < 72 ||
          ch.plen > 16384)
        return;
      std::vector<uint8_t> rest(ch.plen - sizeof(ch));
      if (!recv_all(fd, rest.data(), rest.size())) return;
      nvme::Sqe sqe;
      std::memcpy(&sqe, rest.data(), sizeof(sqe));
      ++commands_;
      if (!answer(fd, sqe, cc)) return;
    }
  }

  bool answer(int fd, const nvme::Sqe& sqe, uint32_t& cc) {
    using namespace nvtcp::wire;
    nvme::Cqe cqe{};
    std::vector<uint8_t> data;
    nvme::Status st = sc::Success;
    switch (AdminOpcode(sqe.opc)) {
      case AdminOpcode::Fabrics: {
        PropertySetCmd p;
        std::memcpy(&p, &sqe, sizeof(p));
        if (sqe.fctype() == uint8_t(FabricsType::Connect)) {
          cqe.dw0 = 1;  // controller ID
        } else if (sqe.fctype() == uint8_t(FabricsType::PropertySet)) {
          if (p.ofst == prop::CC) cc = uint32_t(p.value);
        } else if (sqe.fctype() == uint8_t(FabricsType::PropertyGet)) {
          uint64_t v = 0;
          if (p.ofst == prop::CAP) v = prop::make_cap(127, 2);
          else if (p.ofst == prop::VS) v = 0x00010400;
          else if (p.ofst == prop::CSTS)
            v = ((cc & prop::kCcEnable) ? prop::kCstsReady : 0) |
                ((cc & prop::kCcShnMask) ? prop::kCstsShstComplete : 0);
          cqe.dw0 = uint32_t(v);
          cqe.dw1 = uint32_t(v >> 32);
        }
        break;
      }
      case AdminOpcode::Identify: {
        data.assign(kIdentifyLen, 0);
        const uint8_t cns = sqe.cdw10 & 0xFF;
        if (cns == uint8_t(Cns::Controller)) {
          auto* id = reinterpret_cast<IdentifyController*>(data.data());
          std::memcpy(id->sn, "REFUSES-AERS        ", 20);
          std::memset(id->mn, ' ', sizeof(id->mn));
          std::memcpy(id->fr, "1.0     ", 8);
          std::strcpy(id->subnqn, kTestNqn);
          id->oaes = kAecNamespaceAttribute;
          id->aerl = 3;
          id->mdts = 5;
          id->cntlid = 1;
          id->ver = 0x00010400;
          id->cntrltype = 1;
          id->kas = 1;
          id->sqes = 0x66;
          id->cqes = 0x44;
          id->nn = 1;
          id->sgls = 1;
          id->ioccsz = 4;
          id->iorcsz = 1;
        } else if (cns == uint8_t(Cns::ActiveNamespaceList)) {
          const uint32_t one = 1;
          if (sqe.nsid < 1) std::memcpy(data.data(), &one, 4);
        } else if (cns == uint8_t(Cns::Namespace) && sqe.nsid == 1) {
          auto* ns = reinterpret_cast<IdentifyNamespace*>(data.data());
          ns->nsze = ns->ncap = ns->nuse = 2048;
          ns->lbaf[0].lbads = 9;
        }
        break;
      }
      case AdminOpcode::AsyncEventRequest:
        ++aers_;
        st = sc::AerLimitExceeded;
        break;
      default:  // Set Features (one I/O queue granted: dw0 0), Keep Alive, ...
        break;
    }
    if (!data.empty()) {
      C2HDataPdu h{};
      h.ch.type = uint8_t(PduType::C2HData);
      h.ch.flags = kFlagDataLast;
      h.ch.hlen = sizeof(h);
      h.ch.pdo = sizeof(h);
      h.ch.plen = uint32_t(sizeof(h) + data.size());
      h.cccid = sqe.cid;
      h.datal = uint32_t(data.size());
      if (!send_all(fd, &h, sizeof(h)) || !send_all(fd, data.data(), data.size())) return false;
    }
    CapsuleRespPdu r{};
    r.ch.type = uint8_t(PduType::CapsuleResp);
    r.ch.hlen = sizeof(r);
    r.ch.plen = sizeof(r);
    cqe.cid = sqe.cid;
    cqe.status = st.to_cqe();
    std::memcpy(r.cqe, &cqe, sizeof(cqe));
    return send_all(fd, &r, sizeof(r));
  }

  int lfd_ = -1;
  uint16_t port_ = 0;
  std::atomic<int> cfd_{-1};
  std::atomic<bool> stop_{false};
  std::atomic<int> aers_{0};
  std::atomic<int> commands_{0};
  std::thread thread_;
};

TEST(HostAsyncEvents, AnAerTheControllerRefusesIsNotSentAgain) {
  AerRefusingController fake;
  host::TransportId trid;
  trid.trsvcid = fake.port();
  trid.subnqn = kTestNqn;
  std::string err;
  auto ctrl = host::Controller::connect(trid, ControllerOptions{}, err);
  ASSERT_TRUE(ctrl) << err;
  NamespaceInfo ni;
  ASSERT_TRUE(ctrl->namespace_info(1, ni, err)) << err;
  EXPECT_EQ(ni.blocks, 2048u);
  // AERL 3 and a 32-deep admin queue: four requests, each refused once.
  ASSERT_TRUE(wait_for([&] { return fake.aers() >= 4; }, kDueMs));
  // Many admin round trips later (each one after the refusals were handled), still four.
  alignas(8) uint8_t id[nvme::kIdentifyLen];
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(ctrl->identify(uint8_t(nvme::Cns::Controller), 0, id).status.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(fake.aers(), 4) << "the host asked again after a refusal";
  EXPECT_TRUE(ctrl->live());
}

}  // namespace
}  // namespace nvtcp::test::host_rescan_test
