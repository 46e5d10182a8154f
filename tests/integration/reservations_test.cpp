// SPDX-License-Identifier: Apache-2.0
// Reservations between hosts, as a cluster uses them for fencing: two hosts (their own host
// NQN and 128-bit host ID) register keys, one acquires, the other's writes fail with
// Reservation Conflict; preempting moves the reservation and tells the loser (log 80h);
// persistence through power loss keeps it across a target restart for a file namespace.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nvtcp/host.hpp"
#include "nvtcp/identify.hpp"
#include "nvtcp/log_pages.hpp"
#include "target/subsystem.hpp"
#include "test_target.hpp"
#include "wire/features.hpp"
#include "wire/reservations.hpp"

namespace nvtcp::test::reservations_test {
namespace {

namespace sc = nvme::sc;
using wire::ReservationType;

constexpr uint32_t kFileNsid = 4;
constexpr uint64_t kKeyA = 0xA1A1, kKeyB = 0xB2B2;

// One host: its own controller and I/O queue.
class Host {
 public:
  Host(const RunningTarget& t, uint8_t id, uint32_t nsid) : nsid_(nsid) {
    host::ControllerOptions o;
    o.hostnqn = "nqn.2026-11.io.nvtcp:resv-host-" + std::to_string(id);
    for (int i = 0; i < 16; ++i) o.hostid[i] = uint8_t(id * 16 + i);
    std::memcpy(hostid, o.hostid, 16);
    std::string err;
    ctrl = host::Controller::connect(t.trid(), o, err);
    EXPECT_TRUE(ctrl) << err;
    if (!ctrl) return;
    qp = ctrl->create_io_qpair(8, err);
    EXPECT_TRUE(qp) << err;
    buf = static_cast<uint8_t*>(ctrl->alloc_io_buffer(8192));
  }
  ~Host() {
    qp.reset();
    if (buf) ctrl->free_io_buffer(buf);
  }

  nvme::Status command(nvme::IoOpcode opc, uint32_t cdw10, const void* data, uint32_t len, bool to_ctrl = true,
                       uint32_t cdw11 = 0) {
    nvme::Sqe sqe{};
    sqe.opc = uint8_t(opc);
    sqe.nsid = nsid_;
    sqe.cdw10 = cdw10;
    sqe.cdw11 = cdw11;
    if (to_ctrl && data) std::memcpy(buf, data, len);
    return one_command(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->submit(sqe, buf, len, to_ctrl, cb, ctx); });
  }
  nvme::Status reg(wire::RegisterAction a, uint64_t crkey, uint64_t nrkey, uint32_t cptpl = 0, bool iekey = false) {
    wire::ReservationRegisterData d{crkey, nrkey};
    return command(nvme::IoOpcode::ReservationRegister,
                   uint32_t(a) | (iekey ? wire::kResvIgnoreExistingKey : 0) | cptpl << 30, &d, sizeof(d));
  }
  nvme::Status acquire(wire::AcquireAction a, ReservationType t, uint64_t crkey, uint64_t prkey = 0,
                       bool iekey = false) {
    wire::ReservationAcquireData d{crkey, prkey};
    return command(nvme::IoOpcode::ReservationAcquire,
                   uint32_t(a) | uint32_t(t) << 8 | (iekey ? wire::kResvIgnoreExistingKey : 0), &d, sizeof(d));
  }
  nvme::Status release(wire::ReleaseAction a, ReservationType t, uint64_t crkey) {
    wire::ReservationReleaseData d{crkey};
    return command(nvme::IoOpcode::ReservationRelease, uint32_t(a) | uint32_t(t) << 8, &d, sizeof(d));
  }
  // Reservation Report (extended) of len bytes; the status, and the bytes in out.
  nvme::Status report(std::vector<uint8_t>& out, uint32_t len = 4096, bool eds = true) {
    std::memset(buf, 0xEE, len);
    const nvme::Status st = command(nvme::IoOpcode::ReservationReport, len / 4 - 1, nullptr, len, false, eds ? 1 : 0);
    out.assign(buf, buf + len);
    return st;
  }
  nvme::Status write(uint64_t lba) {
    std::memset(buf, 0x77, 512);
    return one_command(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->write(nsid_, lba, 1, buf, cb, ctx); });
  }
  nvme::Status read(uint64_t lba) {
    return one_command(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->read(nsid_, lba, 1, buf, cb, ctx); });
  }
  // The next reservation notice in log 80h (type Empty when there is none), copied out of
  // the packed log page.
  struct Notice {
    uint64_t count;
    uint8_t type;
    uint32_t nsid;
  };
  Notice notice() {
    wire::ReservationNotificationLog l{};
    EXPECT_TRUE(
        ctrl->get_log_page(uint8_t(nvme::LogPageId::ReservationNotification), nvme::kNsidAll, &l, sizeof(l)).status.ok());
    return {l.count, l.type, l.nsid};
  }

  uint8_t hostid[16];
  std::unique_ptr<host::Controller> ctrl;
  std::unique_ptr<host::QueuePair> qp;
  uint8_t* buf = nullptr;

 private:
  uint32_t nsid_;
};

// Both hosts registered (keys A and B), host A holding Write Exclusive.
void a_holds_write_exclusive(Host& a, Host& b) {
  ASSERT_TRUE(a.reg(wire::RegisterAction::Register, 0, kKeyA).ok());
  ASSERT_TRUE(b.reg(wire::RegisterAction::Register, 0, kKeyB).ok());
  ASSERT_TRUE(a.acquire(wire::AcquireAction::Acquire, ReservationType::WriteExclusive, kKeyA).ok());
}

// A file namespace's image in /tmp and the reservation state file beside it, both removed
// when the test ends.
struct ImageFile {
  std::string path, state;
  ImageFile() {
    char tmpl[] = "/tmp/nvtcp-resv-XXXXXX";
    const int fd = mkstemp(tmpl);
    if (fd < 0) return;
    ::close(fd);
    path = tmpl;
    state = path + ".nvtcp-resv";
  }
  ~ImageFile() {
    if (path.empty()) return;
    ::unlink(path.c_str());
    ::unlink(state.c_str());
  }
};

// A Reservation Report's fields, copied out of the packed wire structures (whose members
// may sit at any address: a reference to one is undefined).
struct Registrant {
  uint16_t cntlid;
  uint8_t rcsts;
  uint64_t rkey;
  uint8_t hostid[16];
};
struct Report {
  uint32_t gen;
  uint8_t rtype;
  uint16_t regctl;
  uint8_t ptpls;
  std::vector<Registrant> regs;
};
Report parse(const std::vector<uint8_t>& b) {
  wire::ReservationStatusExtHeader h;
  std::memcpy(&h, b.data(), sizeof(h));
  Report r{h.gen, h.rtype, h.regctl, h.ptpls, {}};
  for (uint32_t i = 0; i < r.regctl && sizeof(h) + (i + 1) * 64 <= b.size(); ++i) {
    wire::RegisteredControllerExt e;
    std::memcpy(&e, b.data() + sizeof(h) + i * 64, 64);
    Registrant reg{e.cntlid, e.rcsts, e.rkey, {}};
    std::memcpy(reg.hostid, e.hostid, 16);
    r.regs.push_back(reg);
  }
  return r;
}

TEST(Reservations, WriteExclusiveFencesTheOtherHostsWritesNotItsReads) {
  RunningTarget t;
  Host a(t, 1, kRamNsid), b(t, 2, kRamNsid);
  ASSERT_TRUE(a.qp && b.qp);
  ASSERT_TRUE(a.reg(wire::RegisterAction::Register, 0, kKeyA).ok());
  ASSERT_TRUE(b.reg(wire::RegisterAction::Register, 0, kKeyB).ok());
  EXPECT_TRUE(b.write(10).ok()) << "no reservation yet";
  ASSERT_TRUE(a.acquire(wire::AcquireAction::Acquire, ReservationType::WriteExclusive, kKeyA).ok());
  EXPECT_EQ(b.write(10), sc::ReservationConflict);
  EXPECT_TRUE(b.read(10).ok());
  EXPECT_TRUE(a.write(10).ok());
  EXPECT_TRUE(a.acquire(wire::AcquireAction::Acquire, ReservationType::WriteExclusive, kKeyA).ok())
      << "acquiring what it holds";
  EXPECT_EQ(b.acquire(wire::AcquireAction::Acquire, ReservationType::WriteExclusive, kKeyB),
            sc::ReservationConflict);

  std::vector<uint8_t> raw;
  ASSERT_TRUE(b.report(raw).ok());
  const Report rep = parse(raw);
  EXPECT_EQ(rep.rtype, uint8_t(ReservationType::WriteExclusive));
  EXPECT_EQ(rep.regctl, 2u);
  EXPECT_EQ(rep.gen, 2u) << "two registrations";
  ASSERT_EQ(rep.regs.size(), 2u);
  for (const auto& e : rep.regs) {
    const bool is_a = std::memcmp(e.hostid, a.hostid, 16) == 0;
    EXPECT_TRUE(is_a || std::memcmp(e.hostid, b.hostid, 16) == 0);
    EXPECT_EQ(e.rkey, is_a ? kKeyA : kKeyB);
    EXPECT_EQ(e.rcsts, is_a ? 1 : 0);
    EXPECT_EQ(e.cntlid, 0xFFFF);
  }
  EXPECT_EQ(b.report(raw, 4096, false), sc::HostIdInconsistentFormat) << "64-bit host IDs";
  EXPECT_EQ(b.report(raw, 32), sc::InvalidField) << "shorter than the header";
  ASSERT_TRUE(b.report(raw, 64 + 64).ok()) << "room for one registrant";
  EXPECT_EQ(parse(raw).regctl, 2u) << "the count is of all of them";

  EXPECT_EQ(a.release(wire::ReleaseAction::Release, ReservationType::ExclusiveAccess, kKeyA), sc::InvalidField)
      << "not the type held";
  ASSERT_TRUE(a.release(wire::ReleaseAction::Release, ReservationType::WriteExclusive, kKeyA).ok());
  EXPECT_TRUE(b.write(10).ok()) << "released";
}

// The fence a cluster relies on (WSFC, Pacemaker's fence_mpath): host A holds Write Exclusive and
// has writes queued under its namespace's write limit; host B preempts it with Preempt and
// Abort and writes. None of A's queued writes may land after B's Acquire has returned: they end
// with Command Aborted due to Preempt and Abort, and B's data is what the blocks hold, however
// long after A's writes would have had their turn. (Which of A's writes went before the Acquire
// depends on the machine's speed; that some were queued is checked, and the outcome is.)
TEST(Reservations, AFencedHostsWritesQueuedUnderARateLimitNeverLand) {
  RunningTarget t;
  Host a(t, 1, kRamNsid), b(t, 2, kRamNsid);
  ASSERT_TRUE(a.qp && b.qp);
  ASSERT_NO_FATAL_FAILURE(a_holds_write_exclusive(a, b));
  target::Namespace* ns = t.target().state().find_subsystem(kTestNqn)->find_namespace(kRamNsid);
  ASSERT_NE(ns, nullptr);
  ns->qos.set({.w_mbytes_per_sec = 1});  // 8 KiB writes: one every 8 ms or so
  constexpr int kWrites = 8;
  constexpr uint32_t kBlocks = 16;
  struct Done {
    std::atomic<int> n{0};
    std::vector<nvme::Status> statuses;
  } done;
  done.statuses.resize(kWrites);
  struct Ctx {
    Done* d;
    int i;
  };
  std::vector<Ctx> ctx;
  for (int i = 0; i < kWrites; ++i) ctx.push_back({&done, i});
  std::memset(a.buf, 0xAA, kBlocks * 512);
  for (int i = 0; i < kWrites; ++i)
    ASSERT_EQ(a.qp->write(kRamNsid, uint64_t(i) * kBlocks, kBlocks, a.buf,
                          [](void* c, const host::Completion& cpl) {
                            auto* x = static_cast<Ctx*>(c);
                            x->d->statuses[size_t(x->i)] = cpl.status;
                            x->d->n.fetch_add(1);
                          },
                          &ctx[size_t(i)]),
              0);
  // The writes reach the target: the first goes, the rest queue for their slices.
  const auto sent = std::chrono::steady_clock::now() + std::chrono::milliseconds(3);
  while (std::chrono::steady_clock::now() < sent) a.qp->process_completions(500);
  ASSERT_LT(done.n.load(), kWrites) << "every write went before the fence: the limit held none back";
  ASSERT_TRUE(b.acquire(wire::AcquireAction::PreemptAndAbort, ReservationType::WriteExclusive, kKeyB, kKeyA).ok());
  std::memset(b.buf, 0x5B, kBlocks * 512);
  for (int i = 0; i < kWrites; ++i)
    ASSERT_TRUE(one_command(*b.qp, [&](host::CompletionFn cb, void* c) {
                  return b.qp->write(kRamNsid, uint64_t(i) * kBlocks, kBlocks, b.buf, cb, c);
                }).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (done.n.load() < kWrites && std::chrono::steady_clock::now() < deadline) a.qp->process_completions(1000);
  ASSERT_EQ(done.n.load(), kWrites) << "host A's writes were never answered";
  int aborted = 0;
  for (int i = 0; i < kWrites; ++i) aborted += done.statuses[size_t(i)] == sc::AbortedPreempt;
  EXPECT_GT(aborted, 0) << "no queued write ended with Command Aborted due to Preempt and Abort";
  // Long after A's writes would have had their slices, the blocks are B's.
  const auto later = std::chrono::steady_clock::now() + std::chrono::milliseconds(150);
  while (std::chrono::steady_clock::now() < later) a.qp->process_completions(1000);
  ns->qos.set({});
  for (int i = 0; i < kWrites; ++i) {
    ASSERT_TRUE(one_command(*b.qp, [&](host::CompletionFn cb, void* c) {
                  return b.qp->read(kRamNsid, uint64_t(i) * kBlocks, kBlocks, b.buf, cb, c);
                }).ok());
    EXPECT_EQ(std::count(b.buf, b.buf + kBlocks * 512, 0x5B), kBlocks * 512) << "range " << i << " holds host A's data";
  }
}

TEST(Reservations, ExclusiveAccessTypesAndRegistrantsOnly) {
  RunningTarget t;
  Host a(t, 1, kRamNsid), b(t, 2, kRamNsid), c(t, 3, kRamNsid);
  ASSERT_TRUE(a.qp && b.qp && c.qp);
  ASSERT_TRUE(a.reg(wire::RegisterAction::Register, 0, kKeyA).ok());
  ASSERT_TRUE(b.reg(wire::RegisterAction::Register, 0, kKeyB).ok());
  ASSERT_TRUE(a.acquire(wire::AcquireAction::Acquire, ReservationType::ExclusiveAccess, kKeyA).ok());
  EXPECT_EQ(b.read(1), sc::ReservationConflict) << "a registrant, but not the holder";
  EXPECT_EQ(c.read(1), sc::ReservationConflict);
  ASSERT_TRUE(a.release(wire::ReleaseAction::Release, ReservationType::ExclusiveAccess, kKeyA).ok());

  ASSERT_TRUE(a.acquire(wire::AcquireAction::Acquire, ReservationType::ExclusiveAccessRegistrantsOnly, kKeyA).ok());
  EXPECT_TRUE(b.write(1).ok()) << "registrants have access";
  EXPECT_TRUE(b.read(1).ok());
  EXPECT_EQ(c.read(1), sc::ReservationConflict) << "c is not registered";
  EXPECT_EQ(c.write(1), sc::ReservationConflict);
  // The holder leaves: a registrants-only reservation ends, and b is told.
  ASSERT_TRUE(a.reg(wire::RegisterAction::Unregister, kKeyA, 0).ok());
  EXPECT_TRUE(c.read(1).ok());
  EXPECT_TRUE(wait_for([&] { return b.notice().type == uint8_t(wire::ReservationNotice::ReservationReleased); }, 5000));

  // All registrants: each holds it; it lasts while any of them stays registered.
  ASSERT_TRUE(b.acquire(wire::AcquireAction::Acquire, ReservationType::WriteExclusiveAllRegistrants, kKeyB).ok());
  ASSERT_TRUE(c.reg(wire::RegisterAction::Register, 0, 0xC3).ok());
  EXPECT_TRUE(c.write(1).ok()) << "every registrant holds an all-registrants reservation";
  EXPECT_EQ(a.write(1), sc::ReservationConflict);
  EXPECT_TRUE(a.read(1).ok());
  ASSERT_TRUE(b.reg(wire::RegisterAction::Unregister, kKeyB, 0).ok());
  EXPECT_EQ(a.write(1), sc::ReservationConflict) << "c still holds it";
  ASSERT_TRUE(c.reg(wire::RegisterAction::Unregister, 0xC3, 0).ok());
  EXPECT_TRUE(a.write(1).ok()) << "the last holder left";
}

TEST(Reservations, KeysThatDoNotMatchAreConflictsAndBadFieldsInvalid) {
  RunningTarget t;
  Host a(t, 1, kRamNsid), b(t, 2, kRamNsid);
  ASSERT_TRUE(a.qp && b.qp);
  EXPECT_EQ(a.acquire(wire::AcquireAction::Acquire, ReservationType::WriteExclusive, kKeyA), sc::ReservationConflict)
      << "not registered";
  ASSERT_TRUE(a.reg(wire::RegisterAction::Register, 0, kKeyA).ok());
  EXPECT_TRUE(a.reg(wire::RegisterAction::Register, 0, kKeyA).ok()) << "the same key again";
  EXPECT_EQ(a.reg(wire::RegisterAction::Register, 0, kKeyB), sc::ReservationConflict) << "another key";
  EXPECT_EQ(a.reg(wire::RegisterAction::Unregister, kKeyB, 0), sc::ReservationConflict);
  EXPECT_EQ(a.reg(wire::RegisterAction::Replace, kKeyB, 0x99), sc::ReservationConflict);
  EXPECT_EQ(b.reg(wire::RegisterAction::Replace, kKeyA, 0x99), sc::ReservationConflict) << "b is not registered";
  EXPECT_EQ(a.acquire(wire::AcquireAction::Acquire, ReservationType::WriteExclusive, kKeyB), sc::ReservationConflict);
  EXPECT_EQ(a.acquire(wire::AcquireAction::Acquire, ReservationType(7), kKeyA), sc::InvalidField);
  EXPECT_EQ(a.acquire(wire::AcquireAction::Acquire, ReservationType::WriteExclusive, kKeyA, 0, true), sc::InvalidField)
      << "IEKEY on Acquire";
  EXPECT_EQ(a.reg(wire::RegisterAction(3), kKeyA, 0), sc::InvalidField);
  EXPECT_EQ(a.reg(wire::RegisterAction::Register, 0, kKeyA, wire::kCptplOn), sc::InvalidField)
      << "persistence on a RAM namespace";
  EXPECT_EQ(a.command(nvme::IoOpcode::ReservationRegister, 0, nullptr, 8), sc::DataSglLengthInvalid)
      << "8 bytes of register data";
  // Replace with IEKEY ignores the current key.
  ASSERT_TRUE(a.reg(wire::RegisterAction::Replace, 0x1234, kKeyB, 0, true).ok());
  ASSERT_TRUE(a.acquire(wire::AcquireAction::Acquire, ReservationType::WriteExclusive, kKeyB).ok());
  // Nothing above disturbed anything else: the reservation holds, and I/O runs.
  EXPECT_EQ(b.write(5), sc::ReservationConflict);
  EXPECT_TRUE(a.write(5).ok());
  std::vector<uint8_t> raw;
  ASSERT_TRUE(a.report(raw).ok());
  EXPECT_EQ(parse(raw).regctl, 1u);
}

TEST(Reservations, PreemptMovesTheReservationAndTellsTheLoser) {
  RunningTarget t;
  Host a(t, 1, kRamNsid), b(t, 2, kRamNsid);
  ASSERT_TRUE(a.qp && b.qp);
  ASSERT_NO_FATAL_FAILURE(a_holds_write_exclusive(a, b));
  EXPECT_EQ(a.notice().type, uint8_t(wire::ReservationNotice::Empty));
  // b fences a off: a's registration is gone, b holds the reservation.
  ASSERT_TRUE(b.acquire(wire::AcquireAction::PreemptAndAbort, ReservationType::WriteExclusive, kKeyB, kKeyA).ok());
  EXPECT_EQ(a.write(3), sc::ReservationConflict);
  EXPECT_TRUE(b.write(3).ok());
  EXPECT_EQ(a.acquire(wire::AcquireAction::Acquire, ReservationType::WriteExclusive, kKeyA), sc::ReservationConflict)
      << "a's key was removed";
  Host::Notice n{};
  ASSERT_TRUE(wait_for(
      [&] {
        n = a.notice();
        return n.type != 0;
      },
      5000));
  EXPECT_EQ(n.type, uint8_t(wire::ReservationNotice::RegistrationPreempted));
  EXPECT_EQ(n.nsid, kRamNsid);
  EXPECT_EQ(n.count, 1u);
  EXPECT_EQ(a.notice().type, uint8_t(wire::ReservationNotice::Empty)) << "read once";
  EXPECT_EQ(b.notice().type, uint8_t(wire::ReservationNotice::Empty)) << "the preempting host is not told";
  // Clear drops every registration and the reservation; a key that does not match cannot.
  ASSERT_TRUE(a.reg(wire::RegisterAction::Register, 0, kKeyA).ok());
  EXPECT_EQ(a.release(wire::ReleaseAction::Clear, ReservationType::None, kKeyB), sc::ReservationConflict);
  ASSERT_TRUE(b.release(wire::ReleaseAction::Clear, ReservationType::None, kKeyB).ok());
  EXPECT_TRUE(a.write(3).ok());
  std::vector<uint8_t> raw;
  ASSERT_TRUE(a.report(raw).ok());
  EXPECT_EQ(parse(raw).regctl, 0u);
  EXPECT_EQ(parse(raw).rtype, 0u);
}

TEST(Reservations, NotificationMaskSilencesANoticeType) {
  RunningTarget t;
  Host a(t, 1, kRamNsid), b(t, 2, kRamNsid);
  ASSERT_TRUE(a.qp && b.qp);
  nvme::Sqe set{};
  set.opc = uint8_t(nvme::AdminOpcode::SetFeatures);
  set.nsid = kRamNsid;
  set.cdw10 = wire::kFeatureReservationNotificationMask;
  set.cdw11 = 1u << uint8_t(wire::ReservationNotice::RegistrationPreempted);
  ASSERT_TRUE(a.ctrl->admin(set, nullptr, 0, false).status.ok());
  nvme::Sqe get{};
  get.opc = uint8_t(nvme::AdminOpcode::GetFeatures);
  get.nsid = kRamNsid;
  get.cdw10 = wire::kFeatureReservationNotificationMask;
  EXPECT_EQ(a.ctrl->admin(get, nullptr, 0, false).dw0, set.cdw11);
  get.cdw10 |= wire::kSelSupportedCapabilities << 8;
  EXPECT_EQ(a.ctrl->admin(get, nullptr, 0, false).dw0, wire::kFeatureCapChangeable | wire::kFeatureCapNamespaceSpecific);
  set.cdw11 = 1u;  // bit 0 is reserved
  EXPECT_EQ(a.ctrl->admin(set, nullptr, 0, false).status, sc::InvalidField);
  set.nsid = 99;
  set.cdw11 = 0;
  EXPECT_EQ(a.ctrl->admin(set, nullptr, 0, false).status, sc::InvalidNamespace);

  ASSERT_NO_FATAL_FAILURE(a_holds_write_exclusive(a, b));
  ASSERT_TRUE(b.acquire(wire::AcquireAction::Preempt, ReservationType::WriteExclusive, kKeyB, kKeyA).ok());
  EXPECT_EQ(a.write(1), sc::ReservationConflict);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a notice, had there been one, is queued by now
  EXPECT_EQ(a.notice().type, uint8_t(wire::ReservationNotice::Empty));
}

TEST(Reservations, PersistThroughPowerLossKeepsThemAcrossATargetRestart) {
  ImageFile image;
  ASSERT_FALSE(image.path.empty());
  const std::string &path = image.path, &state = image.state;
  {
    RunningTarget t(default_config(path));
    Host a(t, 1, kFileNsid), b(t, 2, kFileNsid);
    ASSERT_TRUE(a.qp && b.qp);
    alignas(8) uint8_t id[nvme::kIdentifyLen];
    ASSERT_TRUE(a.ctrl->identify(uint8_t(nvme::Cns::Namespace), kFileNsid, id).status.ok());
    EXPECT_EQ(reinterpret_cast<nvme::IdentifyNamespace*>(id)->rescap,
              wire::kRescapPtpl | wire::kRescapAllTypes | wire::kRescapIekey13);
    ASSERT_TRUE(a.ctrl->identify(uint8_t(nvme::Cns::Namespace), kRamNsid, id).status.ok());
    EXPECT_EQ(reinterpret_cast<nvme::IdentifyNamespace*>(id)->rescap, wire::kRescapAllTypes | wire::kRescapIekey13);
    EXPECT_TRUE(reinterpret_cast<const nvme::IdentifyController*>(a.ctrl->identify_data())->oncs &
                wire::kOncsReservations);

    ASSERT_TRUE(a.reg(wire::RegisterAction::Register, 0, kKeyA, wire::kCptplOn).ok());
    ASSERT_TRUE(b.reg(wire::RegisterAction::Register, 0, kKeyB).ok());
    ASSERT_TRUE(a.acquire(wire::AcquireAction::Acquire, ReservationType::WriteExclusiveRegistrantsOnly, kKeyA).ok());
    nvme::Sqe get{};
    get.opc = uint8_t(nvme::AdminOpcode::GetFeatures);
    get.nsid = kFileNsid;
    get.cdw10 = wire::kFeatureReservationPersistence;
    EXPECT_EQ(a.ctrl->admin(get, nullptr, 0, false).dw0, 1u);
  }
  ASSERT_EQ(::access(state.c_str(), F_OK), 0) << "no state file next to the image";
  {
    RunningTarget t(default_config(path));
    Host a(t, 1, kFileNsid), b(t, 2, kFileNsid), c(t, 3, kFileNsid);
    ASSERT_TRUE(a.qp && b.qp && c.qp);
    std::vector<uint8_t> raw;
    ASSERT_TRUE(c.report(raw).ok());
    const Report rep = parse(raw);
    EXPECT_EQ(rep.rtype, uint8_t(ReservationType::WriteExclusiveRegistrantsOnly));
    EXPECT_EQ(rep.regctl, 2u);
    EXPECT_EQ(rep.ptpls, 1u);
    EXPECT_EQ(c.write(0), sc::ReservationConflict) << "c never registered";
    EXPECT_TRUE(b.write(0).ok());
    // Persistence turned off: the state file goes, and the next start has nothing.
    ASSERT_TRUE(a.reg(wire::RegisterAction::Register, 0, kKeyA, wire::kCptplOff).ok());
    EXPECT_NE(::access(state.c_str(), F_OK), 0);
  }
  {
    RunningTarget t(default_config(path));
    Host c(t, 3, kFileNsid);
    ASSERT_TRUE(c.qp);
    EXPECT_TRUE(c.write(0).ok());
  }
}

// A host that connects again and again with a new host ID each time, registering every
// time: registrations outlive their hosts (NVMe), so the registrant limit is what bounds
// them. The healthy host registered first keeps reading and writing.
TEST(Reservations, AHostLoopingNewHostIdsIsCappedByTheRegistrantLimit) {
  target::TargetConfig cfg = default_config();
  cfg.max_registrants_per_namespace = 4;
  RunningTarget t(cfg);
  Host healthy(t, 1, kRamNsid);
  ASSERT_TRUE(healthy.qp);
  ASSERT_TRUE(healthy.reg(wire::RegisterAction::Register, 0, kKeyA).ok());
  int registered = 0, refused = 0;
  for (uint8_t id = 3; id < 13; ++id) {  // host IDs id * 16 + i: distinct below 16
    Host hostile(t, id, kRamNsid);  // connects, registers, disconnects
    ASSERT_TRUE(hostile.qp);
    const nvme::Status st = hostile.reg(wire::RegisterAction::Register, 0, 0x1000 + id);
    if (st.ok()) ++registered;
    else if (st == sc::InternalError) ++refused;
    else ADD_FAILURE() << "unexpected status " << std::hex << st.value;
  }
  EXPECT_EQ(registered, 3);
  EXPECT_EQ(refused, 7);
  std::vector<uint8_t> raw;
  ASSERT_TRUE(healthy.report(raw).ok());
  EXPECT_EQ(parse(raw).regctl, 4u) << "the registrant table stays within its limit";
  EXPECT_TRUE(healthy.write(3).ok());
  EXPECT_TRUE(healthy.read(3).ok());
  ASSERT_TRUE(healthy.acquire(wire::AcquireAction::Acquire, ReservationType::WriteExclusive, kKeyA).ok());
}

// A Get Log Page of the notification log that fails (offset past the log) must not take
// the notice away: the next good read still gets it.
TEST(Reservations, AFailedNotificationLogReadKeepsTheNotice) {
  RunningTarget t;
  Host a(t, 1, kRamNsid), b(t, 2, kRamNsid);
  ASSERT_TRUE(a.qp && b.qp);
  ASSERT_NO_FATAL_FAILURE(a_holds_write_exclusive(a, b));
  ASSERT_TRUE(b.acquire(wire::AcquireAction::Preempt, ReservationType::WriteExclusive, kKeyB, kKeyA).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the notice is queued for a by now
  wire::ReservationNotificationLog l{};
  for (uint64_t bad_offset : {uint64_t(sizeof(l)), uint64_t(2), uint64_t(1) << 40}) {
    EXPECT_EQ(a.ctrl->get_log_page(uint8_t(nvme::LogPageId::ReservationNotification), nvme::kNsidAll, &l, sizeof(l),
                                   bad_offset)
                  .status,
              sc::InvalidField)
        << bad_offset;
  }
  const Host::Notice n = a.notice();
  EXPECT_EQ(n.type, uint8_t(wire::ReservationNotice::RegistrationPreempted));
  EXPECT_EQ(n.nsid, kRamNsid);
  EXPECT_EQ(a.notice().type, uint8_t(wire::ReservationNotice::Empty)) << "read once, then gone";
}

// A state file that cannot be read as ours costs its namespace persistence, not the target
// its start: the file namespace serves (without PTPL), and so does every other namespace.
TEST(Reservations, AGarbageStateFileCostsOnlyItsNamespacePersistence) {
  ImageFile image;
  ASSERT_FALSE(image.path.empty());
  const std::string &path = image.path, &state = image.state;
  { std::ofstream(state) << "{\"version\": 1, \"registrants\": [ garbage"; }
  RunningTarget t(default_config(path));  // threw "target start: ..." before
  Host a(t, 1, kFileNsid), r(t, 2, kRamNsid);
  ASSERT_TRUE(a.qp && r.qp);
  alignas(8) uint8_t id[nvme::kIdentifyLen];
  ASSERT_TRUE(a.ctrl->identify(uint8_t(nvme::Cns::Namespace), kFileNsid, id).status.ok());
  EXPECT_EQ(reinterpret_cast<nvme::IdentifyNamespace*>(id)->rescap, wire::kRescapAllTypes | wire::kRescapIekey13)
      << "no PTPL offered for the namespace whose file was refused";
  EXPECT_EQ(a.reg(wire::RegisterAction::Register, 0, kKeyA, wire::kCptplOn), sc::InvalidField);
  EXPECT_TRUE(a.reg(wire::RegisterAction::Register, 0, kKeyA).ok());
  EXPECT_TRUE(a.write(0).ok());
  EXPECT_TRUE(r.write(0).ok());
  std::stringstream left;
  left << std::ifstream(state).rdbuf();
  EXPECT_EQ(left.str(), "{\"version\": 1, \"registrants\": [ garbage") << "left for the operator";
}

// Persistence on: a reservation command completes only once its state is on disk, but the
// reactor does not wait for the disk. While the namespace's writer is held mid-write, another
// host on the same reactor (one reactor: every queue shares it) reads and writes; then the
// write goes through and the reservation command completes. When the reactor itself wrote
// and fsynced the file, every other host on it waited for each such command.
TEST(Reservations, APersistedChangeDoesNotHoldUpOtherHostsWhileItsStateIsWritten) {
  ImageFile image;
  ASSERT_FALSE(image.path.empty());
  const std::string &path = image.path, &state = image.state;
  RunningTarget t(default_config(path));
  Host a(t, 1, kFileNsid), b(t, 2, kFileNsid);
  ASSERT_TRUE(a.qp && b.qp);
  target::Namespace* ns = t.target().state().find_subsystem(kTestNqn)->find_namespace(kFileNsid);
  ASSERT_TRUE(ns);
  std::mutex mu;
  std::condition_variable cv;
  bool writer_held = false, let_go = false;
  ns->reservations.set_before_write_hook([&] {
    std::unique_lock lk(mu);
    writer_held = true;
    cv.notify_all();
    cv.wait(lk, [&] { return let_go; });
  });
  struct LetGo {  // the writer must not stay held if an assertion ends the test early
    std::mutex& mu;
    std::condition_variable& cv;
    bool& let_go;
    ~LetGo() {
      std::lock_guard lk(mu);
      let_go = true;
      cv.notify_all();
    }
  } let_go_on_exit{mu, cv, let_go};

  wire::ReservationRegisterData d{0, kKeyA};
  std::memcpy(a.buf, &d, sizeof(d));
  nvme::Sqe reg{};
  reg.opc = uint8_t(nvme::IoOpcode::ReservationRegister);
  reg.nsid = kFileNsid;
  reg.cdw10 = uint32_t(wire::RegisterAction::Register) | wire::kCptplOn << 30;
  bool reg_done = false;
  nvme::Status reg_status = sc::InternalError;
  struct Ctx {
    bool* done;
    nvme::Status* st;
  } ctx{&reg_done, &reg_status};
  ASSERT_EQ(a.qp->submit(
                reg, a.buf, sizeof(d), true,
                [](void* c, const host::Completion& cpl) {
                  auto* x = static_cast<Ctx*>(c);
                  *x->st = cpl.status;
                  *x->done = true;
                },
                &ctx),
            0);
  for (int i = 0; i < 100; ++i) a.qp->process_completions(1000);  // it goes out
  {
    std::unique_lock lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(10), [&] { return writer_held; })) << "the state was not written";
  }
  EXPECT_TRUE(b.write(8).ok()) << "another host's write waited for the reservation's fsync";
  EXPECT_TRUE(b.read(8).ok());
  a.qp->process_completions(1000);
  EXPECT_FALSE(reg_done) << "the Register completed before its state was durable";
  {
    std::lock_guard lk(mu);
    let_go = true;
    cv.notify_all();
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!reg_done && std::chrono::steady_clock::now() < deadline) a.qp->process_completions(1000);
  ASSERT_TRUE(reg_done);
  EXPECT_TRUE(reg_status.ok()) << nvme::status_name(reg_status);
  EXPECT_EQ(::access(state.c_str(), F_OK), 0) << "no state file next to the image";

  // Feature 83h (persistence off) waits for its write the same way: on the side.
  {
    std::lock_guard lk(mu);
    writer_held = let_go = false;
  }
  std::atomic<bool> set_done{false};
  nvme::Status set_status = sc::InternalError;
  std::thread setter([&] {
    nvme::Sqe set{};
    set.opc = uint8_t(nvme::AdminOpcode::SetFeatures);
    set.nsid = kFileNsid;
    set.cdw10 = wire::kFeatureReservationPersistence;
    set.cdw11 = 0;
    set_status = a.ctrl->admin(set, nullptr, 0, false).status;
    set_done = true;
  });
  {
    std::unique_lock lk(mu);
    EXPECT_TRUE(cv.wait_for(lk, std::chrono::seconds(10), [&] { return writer_held; })) << "feature 83h wrote nothing";
  }
  EXPECT_TRUE(b.write(9).ok()) << "another host's write waited for feature 83h's write";
  EXPECT_FALSE(set_done) << "Set Features 83h completed before its state was durable";
  {
    std::lock_guard lk(mu);
    let_go = true;
    cv.notify_all();
  }
  setter.join();
  EXPECT_TRUE(set_status.ok()) << nvme::status_name(set_status);
  EXPECT_NE(::access(state.c_str(), F_OK), 0) << "persistence off leaves no state file";
  ns->reservations.set_before_write_hook({});
}

// Flush is in the write group, on every namespace it reaches: to NSID FFFFFFFFh it is refused
// like a Flush to the namespace another host holds under Exclusive Access, not run past it.
TEST(Reservations, FlushToEveryNamespaceIsInTheWriteGroupOfEach) {
  RunningTarget t;
  Host a(t, 1, kRamNsid), b(t, 2, kRamNsid);
  ASSERT_TRUE(a.qp && b.qp);
  auto flush = [](Host& h, uint32_t nsid) {
    return one_command(*h.qp, [&](host::CompletionFn cb, void* ctx) { return h.qp->flush(nsid, cb, ctx); });
  };
  EXPECT_TRUE(flush(b, nvme::kNsidAll).ok()) << "no reservation yet";
  ASSERT_TRUE(a.reg(wire::RegisterAction::Register, 0, kKeyA).ok());
  ASSERT_TRUE(a.acquire(wire::AcquireAction::Acquire, ReservationType::ExclusiveAccess, kKeyA).ok());
  EXPECT_EQ(flush(b, kRamNsid), sc::ReservationConflict);
  EXPECT_EQ(flush(b, nvme::kNsidAll), sc::ReservationConflict) << "a Flush to every namespace ran past the reservation";
  EXPECT_TRUE(flush(a, nvme::kNsidAll).ok()) << "the holder may flush everything";
  EXPECT_TRUE(flush(b, 3).ok()) << "another namespace, not reserved";
  ASSERT_TRUE(a.release(wire::ReleaseAction::Release, ReservationType::ExclusiveAccess, kKeyA).ok());
  EXPECT_TRUE(flush(b, nvme::kNsidAll).ok());
}

}  // namespace
}  // namespace nvtcp::test::reservations_test
