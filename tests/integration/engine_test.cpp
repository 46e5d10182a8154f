// SPDX-License-Identifier: Apache-2.0
// The offload engine end to end on loopback: an in-process target, an engine connected to
// it, and applications that attach to the engine: through the host library (trtype:engine)
// and, for what a well-behaved library never does, by hand on the shared memory.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <algorithm>
#include <functional>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "../support/fault_proxy.hpp"
#include "engine/app_controller.hpp"
#include "engine/engine.hpp"
#include "nvtcp/identify.hpp"
#include "shm/attach.hpp"
#include "shm/shm_queue.hpp"
#include "test_target.hpp"
#include "wire/fabrics.hpp"
#include "wire/features.hpp"

extern char** environ;

namespace nvtcp::test::engine_test {
namespace {

using nvme::AdminOpcode;
using nvme::Sqe;
namespace sc = nvme::sc;
namespace prop = nvme::prop;


std::string socket_path() {
  static std::atomic<int> n{0};
  return fmt::format("/tmp/nvtcp-engine-test-{}-{}.sock", getpid(), n++);
}

class RunningEngine {
 public:
  explicit RunningEngine(const host::TransportId& remote, int64_t idle_spin_us = 50,
                         const std::function<void(engine::EngineOptions&)>& tweak = nullptr) {
    engine::EngineOptions o;
    o.socket_path = socket_path();
    o.controllers = {remote};
    o.idle_spin_us = idle_spin_us;
    o.queue_depth = 64;
    o.max_queue_pairs = 9;
    if (tweak) tweak(o);
    engine_ = std::make_unique<engine::Engine>(o);
    std::string err;
    if (!engine_->start(err)) throw std::runtime_error("engine start: " + err);
    thread_ = std::thread([this] { engine_->run(stop_); });
  }
  ~RunningEngine() {
    stop_ = true;
    thread_.join();
    engine_->shutdown();
  }
  host::TransportId trid(uint32_t nsid = kRamNsid) const {
    host::TransportId t;
    t.trtype = "engine";
    t.traddr = engine_->options().socket_path;
    t.subnqn = kTestNqn;
    t.nsid = nsid;
    return t;
  }
  engine::Engine& engine() { return *engine_; }

 private:
  std::unique_ptr<engine::Engine> engine_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// One command's outcome: pass Io::cb and &io.
struct Io : CompletionBatch::Op {
  static constexpr auto cb = &CompletionBatch::cb;
};

nvme::Status run_io(host::QueuePair& qp, Io& io) {
  // Bounded by time, not by calls: a spinning reactor's turn returns at once.
  wait_for([&] {
    qp.process_completions(1000);
    return io.done;
  }, 10000);
  return io.done ? io.cpl.status : nvme::sc::InternalError;
}

Sqe admin_cmd(AdminOpcode op, uint32_t cdw10 = 0, uint32_t cdw11 = 0) {
  Sqe s{};
  s.opc = uint8_t(op);
  s.cdw10 = cdw10;
  s.cdw11 = cdw11;
  return s;
}

// An application that drives the shared memory by hand (no host library), so it can do
// what the library never does: die without a word, ring impossible doorbells.
shm::AttachRequest raw_request(uint32_t pairs = 3) {
  shm::AttachRequest req;
  req.queue_pairs = pairs;
  req.queue_entries = 64;
  req.vectors = 2;
  req.data_bytes = 4 << 20;
  std::strcpy(req.subnqn, kTestNqn);
  return req;
}

class RawApp {
 public:
  explicit RawApp(const std::string& path, uint32_t pairs = 3) : RawApp(path, raw_request(pairs)) {}
  RawApp(const std::string& path, const shm::AttachRequest& req) {
    std::string err;
    if (!shm::attach(path, req, at, err)) throw std::runtime_error(err);
    admin = std::make_unique<shm::AppQueuePair>(at.queue_pair(0));
  }
  bool enable() {
    std::atomic_ref<uint32_t>(at.registers().cc).store(prop::kCcEnable | (6u << 16) | (4u << 20));
    kick();
    return wait_csts(prop::kCstsReady, prop::kCstsReady);
  }
  bool wait_csts(uint32_t mask, uint32_t want) {
    return wait_for([&] { return (std::atomic_ref<uint32_t>(at.registers().csts).load() & mask) == want; }, 5000);
  }
  void kick() { shm::signal_fd(at.kick_fd()); }
  nvme::Cqe command(Sqe s) {
    s.cid = ++cid;
    s.flags = nvme::kSqeFlagsPsdtSgl;
    admin->submit(s);
    admin->ring_sq();
    kick();
    nvme::Cqe c{};
    EXPECT_TRUE(wait_for([&] { return admin->poll(c); }, 5000)) << "no answer to admin opcode " << int(s.opc);
    admin->ring_cq();
    return c;
  }
  nvme::Status status(const Sqe& s) { return nvme::Status::from_cqe(command(s).status); }
  // Creates I/O queue pair qid (entries each) with interrupts off.
  bool create_queue(uint16_t qid, uint32_t entries) {
    return status(admin_cmd(AdminOpcode::CreateIoCq, qid | ((entries - 1) << 16), 1)).ok() &&
           status(admin_cmd(AdminOpcode::CreateIoSq, qid | ((entries - 1) << 16), 1 | (uint32_t(qid) << 16))).ok();
  }
  Sqe read_cmd(uint16_t command_id, uint64_t lba, uint32_t nlb, uint64_t data_off) {
    Sqe s{};
    s.opc = uint8_t(nvme::IoOpcode::Read);
    s.flags = nvme::kSqeFlagsPsdtSgl;
    s.cid = command_id;
    s.nsid = kRamNsid;
    s.cdw10 = uint32_t(lba);
    s.cdw12 = nlb - 1;
    s.sgl.addr = data_off;
    s.sgl.length = nlb * 512;
    return s;
  }

  shm::Attachment at;
  std::unique_ptr<shm::AppQueuePair> admin;
  uint16_t cid = 0;
};

// A well-behaved application beside a misbehaving one: its reads must go on working.
struct BystanderApp {
  explicit BystanderApp(RunningEngine& e, uint64_t region_bytes = 0) {
    std::string err;
    host::ControllerOptions o;
    if (region_bytes) o.engine_region_bytes = region_bytes;
    ctrl = host::Controller::connect(e.trid(), o, err);
    if (ctrl) qp = ctrl->create_io_qpair(16, err);
    if (!qp) throw std::runtime_error("bystander: " + err);
    buf = static_cast<uint8_t*>(ctrl->alloc_io_buffer(4096));
  }
  nvme::Status read() {
    Io io;
    const int rc = qp->read(kRamNsid, 0, 8, buf, Io::cb, &io);
    return rc == 0 ? run_io(*qp, io) : nvme::sc::InternalError;
  }
  std::unique_ptr<host::Controller> ctrl;
  std::unique_ptr<host::QueuePair> qp;
  uint8_t* buf = nullptr;
};

TEST(Engine, AnApplicationReadsAndWritesTheRemoteNamespaceThroughTheEngine) {
  RunningTarget t;
  RunningEngine e(t.trid());
  std::string err;
  auto ctrl = host::Controller::connect(e.trid(), {}, err);
  ASSERT_TRUE(ctrl) << err;
  // The controller the application sees: the remote's identity, its own controller ID.
  const auto* id = reinterpret_cast<const nvme::IdentifyController*>(ctrl->identify_data());
  EXPECT_EQ(std::string(id->subnqn), kTestNqn);
  EXPECT_EQ(id->cntlid, ctrl->cntlid());
  EXPECT_EQ(id->sgls & 3, 1u) << "SGL data blocks carry the data pointers";
  EXPECT_EQ(id->oacs, 1u << 8) << "Doorbell Buffer Config is the one optional admin command";
  EXPECT_EQ(prop::cap_mqes(ctrl->cap()), 1023u);
  ASSERT_NO_FATAL_FAILURE(expect_default_ram_namespace(*ctrl));

  auto qp = ctrl->create_io_qpair(32, err);
  ASSERT_TRUE(qp) << err;
  constexpr size_t kIo = 4096, kCount = 64;
  auto* buf = static_cast<uint8_t*>(ctrl->alloc_io_buffer(kIo * kCount));
  ASSERT_NE(buf, nullptr);
  const auto data = pattern(kIo * kCount, 11);
  std::memcpy(buf, data.data(), data.size());
  // Writes at scattered places, all in flight at once.
  std::vector<Io> ios(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(qp->write(kRamNsid, i * 97 * 8, 8, buf + i * kIo, Io::cb, &ios[i]), 0);
    if (i % 32 == 31) {
      for (size_t j = i - 31; j <= i; ++j) ASSERT_EQ(run_io(*qp, ios[j]), sc::Success);
    }
  }
  std::memset(buf, 0, kIo * kCount);
  for (size_t i = 0; i < kCount; ++i) {
    Io io;
    ASSERT_EQ(qp->read(kRamNsid, i * 97 * 8, 8, buf + i * kIo, Io::cb, &io), 0);
    ASSERT_EQ(run_io(*qp, io), sc::Success);
  }
  EXPECT_EQ(std::memcmp(buf, data.data(), data.size()), 0);

  // The data really is on the remote namespace: a plain NVMe/TCP host reads it back.
  auto direct = host::Controller::connect(t.trid(), {}, err);
  ASSERT_TRUE(direct) << err;
  auto dqp = direct->create_io_qpair(8, err);
  ASSERT_TRUE(dqp);
  std::vector<uint8_t> back(kIo);
  Io io;
  ASSERT_EQ(dqp->read(kRamNsid, 5 * 97 * 8, 8, back.data(), Io::cb, &io), 0);
  ASSERT_EQ(run_io(*dqp, io), sc::Success);
  EXPECT_EQ(std::memcmp(back.data(), data.data() + 5 * kIo, kIo), 0);

  // Flush, Write Zeroes and a DSM deallocate pass through as well.
  Io f;
  ASSERT_EQ(qp->flush(nvme::kNsidAll, Io::cb, &f), 0);
  EXPECT_EQ(run_io(*qp, f), sc::Success);
  Io z;
  ASSERT_EQ(qp->write_zeroes(kRamNsid, 0, 8, Io::cb, &z), 0);
  EXPECT_EQ(run_io(*qp, z), sc::Success);

  // The engine moves data to and from the shared region only.
  std::vector<uint8_t> heap(kIo);
  EXPECT_EQ(qp->read(kRamNsid, 0, 8, heap.data(), Io::cb, &io), -EFAULT);
  ctrl->free_io_buffer(buf);
  EXPECT_GE(e.engine().stats().forwarded, 2 * kCount);
}

// Two --controller entries for one subsystem (two listeners, ANA reporting) are two paths of one
// remote: the application sees one controller, and its I/O goes on without an error while a
// path turns inaccessible under it and comes back, and while a listener is cut.
TEST(Engine, TwoPathsToOneSubsystemCarryTheApplicationsIoThroughAPathsLoss) {
  target::TargetConfig cfg = default_config();
  cfg.listeners.push_back({"127.0.0.1", 0});
  cfg.subsystems[0].ana_reporting = true;
  RunningTarget t(cfg);
  host::TransportId a = t.trid(), b = t.trid();
  b.trsvcid = t.port(1);
  RunningEngine e(a, 50, [&](engine::EngineOptions& o) {
    o.controllers = {a, b};
    o.host.reconnect_delay_ms = 100;
  });
  std::string err;
  auto ctrl = host::Controller::connect(e.trid(), {}, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(16, err);
  ASSERT_TRUE(qp) << err;
  constexpr size_t kIo = 4096, kSlots = 16, kRounds = 40;
  auto* buf = static_cast<uint8_t*>(ctrl->alloc_io_buffer(kIo * kSlots));
  ASSERT_NE(buf, nullptr);
  // Each round writes 16 blocks, all in flight at once, then reads them back.
  auto round = [&](uint64_t seed) {
    std::vector<Io> ios(kSlots);
    for (size_t i = 0; i < kSlots; ++i) {
      const auto d = pattern(kIo, seed * 100 + i);
      std::memcpy(buf + i * kIo, d.data(), kIo);
      EXPECT_EQ(qp->write(kRamNsid, i * 8, 8, buf + i * kIo, Io::cb, &ios[i]), 0);
    }
    for (auto& io : ios) EXPECT_EQ(run_io(*qp, io), sc::Success);
    std::memset(buf, 0, kIo * kSlots);
    std::vector<Io> rs(kSlots);
    for (size_t i = 0; i < kSlots; ++i) EXPECT_EQ(qp->read(kRamNsid, i * 8, 8, buf + i * kIo, Io::cb, &rs[i]), 0);
    for (size_t i = 0; i < kSlots; ++i) {
      EXPECT_EQ(run_io(*qp, rs[i]), sc::Success);
      EXPECT_EQ(std::memcmp(buf + i * kIo, pattern(kIo, seed * 100 + i).data(), kIo), 0) << "round " << seed;
    }
  };
  const uint16_t port0 = t.port(0);
  for (uint64_t r = 1; r <= kRounds; ++r) {
    if (r == 10) {
      ASSERT_EQ(
          t.target().live_config().set_ana_state(kTestNqn, "127.0.0.1", port0, 0, nvme::AnaState::Inaccessible),
          "");
    }
    if (r == 20) {
      ASSERT_EQ(t.target().live_config().set_ana_state(kTestNqn, "127.0.0.1", port0, 0, nvme::AnaState::Optimized), "");
    }
    if (r == 30) {
      ASSERT_EQ(t.target().live_config().remove_listener(kTestNqn, "127.0.0.1", port0), "");
    }
    round(r);
    if (::testing::Test::HasFailure()) break;
  }
  ctrl->free_io_buffer(buf);
  // The cores publish their counts as they go idle.
  EXPECT_TRUE(wait_for([&] { return e.engine().stats().forwarded >= 2 * kSlots * kRounds; }, 5000));
}

TEST(Engine, QueueManagementAnswersAsTheSpecificationSays) {
  RunningTarget t;
  RunningEngine e(t.trid());
  RawApp app(e.engine().options().socket_path, 4);  // three I/O queue pairs at most
  ASSERT_TRUE(app.enable());
  // Number of Queues: asked for 8, three granted.
  nvme::Cqe c = app.command(admin_cmd(AdminOpcode::SetFeatures, wire::kFeatureNumberOfQueues, 7 | (7u << 16)));
  EXPECT_EQ(nvme::Status::from_cqe(c.status), sc::Success);
  EXPECT_EQ(c.dw0, 2u | (2u << 16));
  auto cq = [](uint16_t qid, uint32_t entries, uint32_t flags) {
    return admin_cmd(AdminOpcode::CreateIoCq, qid | ((entries - 1) << 16), flags);
  };
  auto sq = [](uint16_t qid, uint32_t entries, uint16_t cqid) {
    return admin_cmd(AdminOpcode::CreateIoSq, qid | ((entries - 1) << 16), 1 | (uint32_t(cqid) << 16));
  };
  EXPECT_EQ(app.status(cq(0, 16, 1)), sc::InvalidQueueIdentifier);
  EXPECT_EQ(app.status(cq(4, 16, 1)), sc::InvalidQueueIdentifier) << "beyond the queues granted";
  EXPECT_EQ(app.status(cq(1, 1, 1)), sc::InvalidQueueSize);
  EXPECT_EQ(app.status(cq(1, 65, 1)), sc::InvalidQueueSize) << "the region's queues have 64 entries";
  EXPECT_EQ(app.status(cq(1, 16, 0)), sc::InvalidField) << "queues are physically contiguous";
  EXPECT_EQ(app.status(cq(1, 16, 1 | 2 | (5u << 16))), sc::InvalidInterruptVector);
  EXPECT_EQ(app.status(sq(1, 16, 1)), sc::CompletionQueueInvalid) << "no CQ 1 yet";
  EXPECT_EQ(app.status(cq(1, 16, 1)), sc::Success);
  EXPECT_EQ(app.status(cq(1, 16, 1)), sc::InvalidQueueIdentifier) << "CQ 1 exists";
  EXPECT_EQ(app.status(cq(2, 16, 1)), sc::Success);
  EXPECT_EQ(app.status(sq(2, 16, 1)), sc::CompletionQueueInvalid) << "each SQ has its own CQ here";
  EXPECT_EQ(app.status(sq(1, 16, 1)), sc::Success);
  EXPECT_EQ(app.status(admin_cmd(AdminOpcode::DeleteIoCq, 1)), sc::InvalidQueueDeletion) << "SQ 1 still uses it";
  EXPECT_EQ(app.status(admin_cmd(AdminOpcode::DeleteIoSq, 3)), sc::InvalidQueueIdentifier);
  EXPECT_EQ(app.status(admin_cmd(AdminOpcode::SetFeatures, wire::kFeatureNumberOfQueues, 0)),
            sc::CommandSequenceError)
      << "Number of Queues is set before any queue exists";
  EXPECT_EQ(app.status(admin_cmd(AdminOpcode::KeepAlive)), sc::Success);
  EXPECT_EQ(app.status(admin_cmd(AdminOpcode::DoorbellBufferConfig)), sc::Success);
  EXPECT_EQ(app.status(admin_cmd(AdminOpcode(0x80))), sc::InvalidOpcode) << "Format NVM is not the application's";
  EXPECT_EQ(app.status(admin_cmd(AdminOpcode::SetFeatures, wire::kFeatureKeepAliveTimer, 1000)), sc::InvalidField);

  // An Identify whose data pointer leaves the region gets an SGL status, not a crash.
  Sqe id = admin_cmd(AdminOpcode::Identify, 1);
  id.sgl.addr = (4 << 20) - 100;
  id.sgl.length = 4096;
  id.cid = ++app.cid;
  id.flags = nvme::kSqeFlagsPsdtSgl;
  app.admin->submit(id);
  app.admin->ring_sq();
  app.kick();
  nvme::Cqe got{};
  ASSERT_TRUE(wait_for([&] { return app.admin->poll(got); }, 5000));
  app.admin->ring_cq();
  EXPECT_EQ(nvme::Status::from_cqe(got.status), sc::SglOffsetInvalid);

  // I/O on queue 1, then Delete SQ 1 and CQ 1.
  shm::QueueMemory m = app.at.queue_pair(1);
  m.sq_size = m.cq_size = 16;
  shm::AppQueuePair io(m);
  io.submit(app.read_cmd(7, 0, 8, 0));
  if (io.ring_sq()) app.kick();
  nvme::Cqe ioc{};
  ASSERT_TRUE(wait_for([&] { return io.poll(ioc); }, 5000));
  EXPECT_EQ(ioc.cid, 7);
  EXPECT_EQ(nvme::Status::from_cqe(ioc.status), sc::Success);
  io.ring_cq();
  EXPECT_EQ(app.status(admin_cmd(AdminOpcode::DeleteIoSq, 1)), sc::Success);
  EXPECT_EQ(app.status(admin_cmd(AdminOpcode::DeleteIoCq, 1)), sc::Success);
  EXPECT_EQ(app.status(admin_cmd(AdminOpcode::DeleteIoCq, 2)), sc::Success);
  EXPECT_EQ(app.status(admin_cmd(AdminOpcode::DeleteIoCq, 2)), sc::InvalidQueueIdentifier);
}

// An application that dies mid-I/O (its memory and descriptors simply go, as with SIGKILL)
// has its commands drained and its queues freed; another application goes on unharmed.
TEST(Engine, AnApplicationThatDiesMidIoIsDrainedAndFreed) {
  RunningTarget t;
  RunningEngine e(t.trid());
  BystanderApp other(e);
  {
    RawApp dying(e.engine().options().socket_path);
    ASSERT_TRUE(dying.enable());
    ASSERT_TRUE(dying.create_queue(1, 64));
    shm::QueueMemory m = dying.at.queue_pair(1);
    shm::AppQueuePair io(m);
    for (uint16_t cid = 0; cid < 63; ++cid) io.submit(dying.read_cmd(cid, cid * 64, 64, cid * 32768ull));
    if (io.ring_sq()) dying.kick();
    ASSERT_TRUE(wait_for([&] { return e.engine().stats().forwarded > 0; }, 5000));
    EXPECT_EQ(e.engine().stats().applications, 2u);
  }  // gone, with commands in flight and never a reset
  EXPECT_TRUE(wait_for([&] { return e.engine().stats().applications == 1; }, 5000))
      << "the dead application's queues were not freed";
  EXPECT_EQ(other.read(), sc::Success);
}

// An impossible doorbell stops that application's controller (CSTS.CFS) until it resets;
// the engine and other applications go on.
TEST(Engine, AnImpossibleDoorbellStopsOnlyThatApplication) {
  RunningTarget t;
  RunningEngine e(t.trid());
  BystanderApp other(e);
  RawApp bad(e.engine().options().socket_path);
  ASSERT_TRUE(bad.enable());
  ASSERT_TRUE(bad.create_queue(1, 64));
  std::atomic_ref<uint32_t>(bad.at.queue_pair(1).words->sq_tail).store(5000);  // outside a 64-entry SQ
  bad.kick();
  EXPECT_TRUE(bad.wait_csts(prop::kCstsFatal, prop::kCstsFatal)) << "CSTS.CFS";
  EXPECT_EQ(other.read(), sc::Success);

  // A reset (CC.EN 1 -> 0) clears it; the application starts over.
  std::atomic_ref<uint32_t>(bad.at.registers().cc).store(0);
  bad.kick();
  ASSERT_TRUE(bad.wait_csts(prop::kCstsFatal | prop::kCstsReady, 0));
  bad.admin = std::make_unique<shm::AppQueuePair>(bad.at.queue_pair(0));
  bad.cid = 0;
  ASSERT_TRUE(bad.enable());
  ASSERT_TRUE(bad.create_queue(1, 64));
  shm::AppQueuePair q(bad.at.queue_pair(1));
  q.submit(bad.read_cmd(3, 0, 8, 0));
  if (q.ring_sq()) bad.kick();
  nvme::Cqe c{};
  ASSERT_TRUE(wait_for([&] { return q.poll(c); }, 5000));
  EXPECT_EQ(nvme::Status::from_cqe(c.status), sc::Success);
}

// Delete I/O SQ leaves its CQ, and a new SQ on that CQ goes on posting where the last one
// stopped (slot and phase), as on a PCIe controller.
TEST(Engine, ANewSqOnAnOldCqGoesOnWhereTheCqStood) {
  RunningTarget t;
  RunningEngine e(t.trid());
  RawApp app(e.engine().options().socket_path);
  ASSERT_TRUE(app.enable());
  ASSERT_TRUE(app.create_queue(1, 8));
  shm::QueueMemory m = app.at.queue_pair(1);
  m.sq_size = m.cq_size = 8;
  shm::AppQueuePair io(m);
  uint16_t cid = 0;
  auto one_read = [&] {
    io.submit(app.read_cmd(cid, cid, 1, 0));
    if (io.ring_sq()) app.kick();
    nvme::Cqe c{};
    EXPECT_TRUE(wait_for([&] { return io.poll(c); }, 5000));
    io.ring_cq();
    EXPECT_EQ(c.cid, cid);
    ++cid;
  };
  for (int i = 0; i < 5; ++i) one_read();  // the CQ stands at slot 5, phase 1
  EXPECT_EQ(app.status(admin_cmd(AdminOpcode::DeleteIoSq, 1)), sc::Success);
  EXPECT_EQ(app.status(admin_cmd(AdminOpcode::CreateIoSq, 1 | (7u << 16), 1 | (1u << 16))), sc::Success);
  io.restart_sq();
  for (int i = 0; i < 12; ++i) one_read();  // across the CQ's wrap and phase flip
}

// A reset while a Delete I/O SQ waits on a CQ nobody reads: the reset still completes.
TEST(Engine, AResetDuringAStuckSqDeletionCompletes) {
  RunningTarget t;
  RunningEngine e(t.trid());
  RawApp app(e.engine().options().socket_path);
  ASSERT_TRUE(app.enable());
  ASSERT_TRUE(app.status(admin_cmd(AdminOpcode::CreateIoCq, 1 | (3u << 16), 1)).ok());  // 4 entries
  ASSERT_TRUE(app.status(admin_cmd(AdminOpcode::CreateIoSq, 1 | (63u << 16), 1 | (1u << 16))).ok());
  shm::QueueMemory m = app.at.queue_pair(1);
  m.sq_size = 64;
  m.cq_size = 4;
  shm::AppQueuePair io(m);
  for (uint16_t c = 0; c < 60; ++c) io.submit(app.read_cmd(c, c, 1, 0));
  if (io.ring_sq()) app.kick();
  // Delete I/O SQ cannot finish: its aborted entries wait for CQ room that never comes.
  Sqe del = admin_cmd(AdminOpcode::DeleteIoSq, 1);
  del.cid = ++app.cid;
  del.flags = nvme::kSqeFlagsPsdtSgl;
  app.admin->submit(del);
  app.admin->ring_sq();
  app.kick();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::atomic_ref<uint32_t>(app.at.registers().cc).store(0);
  app.kick();
  EXPECT_TRUE(app.wait_csts(prop::kCstsReady, 0)) << "the reset finished";
  EXPECT_EQ(e.engine().stats().applications, 1u);
}

// A graceful end: the library's controller sends a shutdown notice, the engine completes it
// and frees the application.
TEST(Engine, ControllerDestructionShutsDownAndDetaches) {
  RunningTarget t;
  RunningEngine e(t.trid(), 0);  // cores sleep at once: the doorbell notices wake them
  std::string err;
  {
    auto ctrl = host::Controller::connect(e.trid(), {}, err);
    ASSERT_TRUE(ctrl) << err;
    auto qp = ctrl->create_io_qpair(8, err);
    ASSERT_TRUE(qp) << err;
    auto* buf = static_cast<uint8_t*>(ctrl->alloc_io_buffer(4096));
    for (int i = 0; i < 50; ++i) {
      Io io;
      ASSERT_EQ(qp->read(kRamNsid, uint64_t(i) * 8, 8, buf, Io::cb, &io), 0);
      ASSERT_EQ(run_io(*qp, io), sc::Success) << i;
    }
    EXPECT_EQ(e.engine().stats().applications, 1u);
  }
  EXPECT_TRUE(wait_for([&] { return e.engine().stats().applications == 0; }, 5000));
}

// The engine's NVMe/TCP connections are cut mid-I/O: the engine reconnects by itself (its
// ctrl_loss_tmo), the commands in flight are sent again, and the application sees neither
// an error nor anything of the transport: its writes read back intact.
TEST(Engine, ReconnectsStayInsideTheEngine) {
  RunningTarget t;
  FaultProxy proxy(t.port());
  host::TransportId remote = t.trid();
  remote.trsvcid = proxy.port();
  RunningEngine e(remote, 50, [](engine::EngineOptions& o) {
    o.host.ctrl_loss_tmo_ms = 30000;
    o.host.reconnect_delay_ms = 100;
  });
  std::string err;
  auto ctrl = host::Controller::connect(e.trid(), {}, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(32, err);
  ASSERT_TRUE(qp) << err;
  constexpr size_t kIo = 4096, kCount = 96;
  auto* buf = static_cast<uint8_t*>(ctrl->alloc_io_buffer(kIo * kCount));
  const auto data = pattern(kIo * kCount, 7);
  std::memcpy(buf, data.data(), data.size());
  std::vector<Io> ios(kCount);
  size_t cuts = 0;
  for (size_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(qp->write(kRamNsid, i * 8, 8, buf + i * kIo, Io::cb, &ios[i]), 0);
    if (i % 32 == 16) {  // cut with writes in flight
      proxy.cut_all();
      ++cuts;
    }
    if (i % 32 == 31) {
      for (size_t j = i - 31; j <= i; ++j) ASSERT_EQ(run_io(*qp, ios[j]), sc::Success) << "write " << j;
    }
  }
  std::memset(buf, 0, kIo * kCount);
  for (size_t i = 0; i < kCount; ++i) {
    Io io;
    ASSERT_EQ(qp->read(kRamNsid, i * 8, 8, buf + i * kIo, Io::cb, &io), 0);
    ASSERT_EQ(run_io(*qp, io), sc::Success) << "read " << i;
  }
  EXPECT_EQ(std::memcmp(buf, data.data(), data.size()), 0);
  EXPECT_EQ(cuts, 3u);
  EXPECT_GT(proxy.accepted(), 2u) << "the engine reconnected";
  EXPECT_FALSE(ctrl->failed());
}

// A local process that connects to the attach socket and says nothing does not hold up the
// control thread: another application attaches (and does I/O) meanwhile.
TEST(Engine, ASilentConnectionDoesNotStallOtherAttaches) {
  RunningTarget t;
  RunningEngine e(t.trid());
  const int silent = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, e.engine().options().socket_path.c_str(), sizeof(a.sun_path) - 1);
  ASSERT_EQ(connect(silent, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  BystanderApp other(e);
  EXPECT_EQ(other.read(), sc::Success);
  // Served while the silent one is still pending: had the control thread waited on it, the
  // silent connection would have been given up (refused) before the other was read at all.
  EXPECT_EQ(e.engine().stats().refused, 0u) << "the attach waited for the silent connection to time out";
  close(silent);
}

TEST(Engine, AnAttachForAnUnknownSubsystemIsRefused) {
  RunningTarget t;
  RunningEngine e(t.trid());
  host::TransportId trid = e.trid();
  trid.subnqn = "nqn.2026-11.io.nvtcp:nobody";
  std::string err;
  EXPECT_FALSE(host::Controller::connect(trid, {}, err));
  EXPECT_NE(err.find("refused"), std::string::npos) << err;
  EXPECT_TRUE(wait_for([&] { return e.engine().stats().refused == 1; }, 2000));
}

// An application that dies closes the read ends of its interrupt pipes before the engine
// notices; the engine's next signal to it must fail with EPIPE, not take the engine (and
// every other application) down with SIGPIPE.
TEST(Engine, SignallingAnApplicationThatDiedDoesNotKillTheEngine) {
  RunningTarget t;
  RunningEngine e(t.trid());
  int p[2];
  ASSERT_EQ(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
  ::close(p[0]);          // the application is gone
  shm::signal_fd(p[1]);  // what the engine does on a completion for it
  ::close(p[1]);
  BystanderApp other(e);
  EXPECT_EQ(other.read(), sc::Success) << "the engine goes on";
}

// The engine process dies (SIGKILL) with commands in flight: the application's queue pair
// completes every one of them (with a transport error when no answer came) and reports
// failure, instead of waiting forever.
TEST(Engine, AnApplicationSeesItsCommandsEndWhenTheEngineDies) {
  RunningTarget t;
  const std::string sock = socket_path(), ready = sock + ".ready";
  const std::string remote = fmt::format("trtype:tcp traddr:127.0.0.1 trsvcid:{} subnqn:{}", t.port(), kTestNqn);
  std::vector<std::string> args{NVTCP_BINARY, "engine", "--controller", remote, "--socket", sock,
                                "--cpus", "0", "--ready-file", ready, "--log-level", "warn"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ), 0);
  ASSERT_TRUE(wait_for([&] { return access(ready.c_str(), F_OK) == 0; }, 10000)) << "engine did not start";

  host::TransportId trid;
  trid.trtype = "engine";
  trid.traddr = sock;
  trid.subnqn = kTestNqn;
  std::string err;
  auto ctrl = host::Controller::connect(trid, host::ControllerOptions{}, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(64, err);
  ASSERT_TRUE(qp) << err;
  void* buf = ctrl->alloc_io_buffer(64 * 4096);
  ASSERT_NE(buf, nullptr);
  struct Count {
    int done = 0, failed = 0;
  } count;
  auto cb = [](void* ctx, const host::Completion& c) {
    auto* n = static_cast<Count*>(ctx);
    ++n->done;
    if (!c.status.ok()) ++n->failed;
  };
  // Reads from the null namespace keep the engine busy while it is killed.
  int submitted = 0;
  for (int round = 0; round < 200 && submitted < 5000; ++round) {
    for (int i = 0; i < 32; ++i, ++submitted)
      ASSERT_EQ(qp->read(1, uint64_t(i) * 8, 8, static_cast<uint8_t*>(buf) + i * 4096 * 2, cb, &count), 0);
    while (count.done < submitted) qp->process_completions(1000);
  }
  for (int i = 0; i < 32; ++i, ++submitted)
    ASSERT_EQ(qp->read(1, uint64_t(i) * 8, 8, static_cast<uint8_t*>(buf) + i * 4096 * 2, cb, &count), 0);
  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  // And commands sent after it died, which nobody will ever answer. The library's notice
  // thread watches the lifeline, so it may know already and refuse them at once (-ENOTCONN);
  // taken ones must complete.
  for (int i = 0; i < 8; ++i) {  // the queue has room: 64 entries, at most 40 in use
    const int rc = qp->read(1, uint64_t(i) * 8, 8, static_cast<uint8_t*>(buf) + i * 4096 * 2, cb, &count);
    ASSERT_TRUE(rc == 0 || rc == -ENOTCONN) << rc;
    if (rc == 0) ++submitted;
  }
  wait_for([&] {
    qp->process_completions(1000);
    return count.done >= submitted;
  }, 10000);
  EXPECT_EQ(count.done, submitted) << "commands left waiting on a dead engine";
  EXPECT_GT(count.failed, 0);
  EXPECT_TRUE(qp->failed());
  EXPECT_NE(qp->read(1, 0, 8, buf, cb, &count), 0) << "no new command on a dead engine";
  ::unlink(sock.c_str());
  ::unlink(ready.c_str());
}


// ---- Issue 24: every attached application is treated as hostile to the others ----

// Attachments (per engine and per peer uid) and mapped bytes (per attachment and in all) are
// bounded: an attach beyond a limit is refused with the limit named on the application's
// side, the applications attached before go on being served (a 1 MiB log page for one of
// them is answered, where it used to abort the engine), and interrupt vectors beyond the
// engine's grant are cut to it.
TEST(EngineLimits, AttachesBeyondTheLimitsAreRefusedWithTheirReasonAndTheOthersServed) {
  RunningTarget t;
  RunningEngine e(t.trid(), 50, [](engine::EngineOptions& o) {
    o.limits.max_applications = 4;
    o.limits.max_applications_per_user = 3;  // every application here has the test's uid
    o.limits.max_region_bytes = 16ull << 20;
    o.limits.max_mapped_bytes = 30ull << 20;
    o.limits.max_vectors = 3;
  });
  BystanderApp other(e, 8ull << 20);
  const std::string path = e.engine().options().socket_path;
  std::string why;

  shm::AttachRequest huge = raw_request();
  huge.data_bytes = 1ull << 40;  // the tester's 1 TiB region
  shm::Attachment refused;
  EXPECT_FALSE(shm::attach(path, huge, refused, why));
  EXPECT_NE(why.find("max_region_bytes"), std::string::npos) << why;

  shm::AttachRequest wide = raw_request();
  wide.vectors = 32;
  RawApp first(path, wide);
  EXPECT_EQ(first.at.vector_fds().size(), 3u) << "vectors beyond max_vectors are not granted";

  shm::AttachRequest big = raw_request();
  big.data_bytes = 15ull << 20;  // 8 + 4 + 15 MiB and headers: beyond 30 MiB mapped
  EXPECT_FALSE(shm::attach(path, big, refused, why));
  EXPECT_NE(why.find("max_mapped_bytes"), std::string::npos) << why;

  RawApp second(path);
  EXPECT_FALSE(shm::attach(path, raw_request(), refused, why));  // a fourth of this uid
  EXPECT_NE(why.find("max_applications_per_user"), std::string::npos) << why;
  EXPECT_LE(e.engine().stats().mapped_bytes, 30ull << 20);
  // The engine counts a refusal after the application has read it.
  EXPECT_TRUE(wait_for([&] { return e.engine().stats().refused_for_limits == 3; }, 2000));

  // Attached before the others were refused: a 1 MiB Get Log Page (Error Information) is
  // answered with a status, and every application goes on.
  ASSERT_TRUE(first.enable());
  Sqe log = admin_cmd(AdminOpcode::GetLogPage, 0x01 | (0xFFFFu << 16), 3);  // NUMD 3FFFFh: 1 MiB
  log.sgl.addr = 0;
  log.sgl.length = 1u << 20;
  const nvme::Cqe c = first.command(log);
  EXPECT_NE(c.cid, 0) << "no answer";
  EXPECT_NE(nvme::Status::from_cqe(c.status), sc::DataSglLengthInvalid) << "the 1 MiB log was not asked for";
  EXPECT_EQ(other.read(), sc::Success);
  ASSERT_TRUE(second.enable());
  EXPECT_EQ(second.status(admin_cmd(AdminOpcode::KeepAlive)), sc::Success);
}

// The engine as the attach limit sees it: max_applications counts every attachment.
TEST(EngineLimits, AttachesBeyondMaxApplicationsAreRefused) {
  RunningTarget t;
  RunningEngine e(t.trid(), 50, [](engine::EngineOptions& o) {
    o.limits.max_applications = 2;
    o.limits.max_applications_per_user = 2;
  });
  const std::string path = e.engine().options().socket_path;
  RawApp a(path), b(path);
  shm::Attachment refused;
  std::string why;
  EXPECT_FALSE(shm::attach(path, raw_request(), refused, why));
  EXPECT_NE(why.find("max_applications"), std::string::npos) << why;
  ASSERT_TRUE(a.enable());
  EXPECT_EQ(a.status(admin_cmd(AdminOpcode::KeepAlive)), sc::Success);
}

// Out-of-range limits are refused at start, with the key named.
TEST(EngineLimits, OutOfRangeLimitsAreRefusedAtStart) {
  engine::EngineLimits l;
  std::string err;
  EXPECT_TRUE(engine::check_limits(l, err)) << err;
  l.max_vectors = 33;
  EXPECT_FALSE(engine::check_limits(l, err));
  EXPECT_NE(err.find("max_vectors"), std::string::npos) << err;
  l = {};
  l.max_app_admin_buffer_bytes = l.max_admin_buffer_bytes + 1;
  EXPECT_FALSE(engine::check_limits(l, err));
  RunningTarget t;
  engine::EngineOptions o;
  o.socket_path = socket_path();
  o.controllers = {t.trid()};
  o.limits.max_applications = 0;
  engine::Engine eng(o);
  EXPECT_FALSE(eng.start(err));
  EXPECT_NE(err.find("max_applications"), std::string::npos) << err;
}

// One application floods its admin queue with Get Log Pages: the engine fetches no more of
// them than its admin budget allows (commands in flight; buffer bytes), the rest stay in the
// SQ until one completes, every one is answered in the end, the buffers are given back, and
// another application's Identify is served meanwhile.
TEST(EngineLimits, AnAdminFloodStaysWithinItsBudgetAndOthersAreServed) {
  RunningTarget t;
  constexpr uint32_t kInFlight = 4;
  constexpr uint64_t kAppBuffers = 512 << 10;
  RunningEngine e(t.trid(), 50, [](engine::EngineOptions& o) {
    o.limits.max_admin_in_flight = kInFlight;
    o.limits.max_app_admin_buffer_bytes = kAppBuffers;
    o.limits.max_admin_buffer_bytes = 2ull << 20;
  });
  const std::string path = e.engine().options().socket_path;
  RawApp flood(path);
  ASSERT_TRUE(flood.enable());
  RawApp quiet(path);
  ASSERT_TRUE(quiet.enable());

  // kCommands Get Log Pages (SMART) of log_bytes each, with one doorbell; every answer read.
  constexpr uint32_t kCommands = 60;  // of the 63 the 64-entry admin SQ holds
  auto run_flood = [&](uint32_t log_bytes) {
    for (uint32_t i = 0; i < kCommands; ++i) {
      Sqe s = admin_cmd(AdminOpcode::GetLogPage, 0x02 | ((log_bytes / 4 - 1) << 16), 0);
      s.cid = uint16_t(1000 + i);
      s.flags = nvme::kSqeFlagsPsdtSgl;
      s.nsid = nvme::kNsidAll;
      s.sgl.addr = 0;
      s.sgl.length = log_bytes;
      EXPECT_TRUE(flood.admin->submit(s));
    }
    flood.admin->ring_sq();
    flood.kick();
    Sqe id = admin_cmd(AdminOpcode::Identify, 0x01);
    id.sgl.addr = 1 << 20;
    id.sgl.length = 4096;
    EXPECT_EQ(quiet.status(id), sc::Success) << "the other application's Identify is served during the flood";
    uint32_t answered = 0;
    EXPECT_TRUE(wait_for(
        [&] {
          nvme::Cqe c{};
          while (flood.admin->poll(c)) {
            ++answered;
            flood.admin->ring_cq();
          }
          flood.kick();
          return answered == kCommands;
        },
        10000))
        << answered << " of " << kCommands << " answered";
  };

  // Small logs: the buffers fit; the commands in flight are what bounds the flood.
  run_flood(4096);
  EXPECT_LE(e.engine().stats().admin_in_flight_peak, kInFlight) << "fetched beyond max_admin_in_flight";
  // Large logs: two fit the application's buffer bytes at once, the third waits in the SQ.
  run_flood(256 << 10);
  const engine::EngineStats st = e.engine().stats();
  EXPECT_LE(st.admin_in_flight_peak, kInFlight);
  EXPECT_LE(st.admin_buffer_peak_bytes, kAppBuffers + 4096) << "admin buffers beyond max_app_admin_buffer_bytes";
  EXPECT_TRUE(wait_for([&] { return e.engine().stats().admin_buffer_bytes == 0; }, 2000))
      << "admin buffers not given back after the flood";
  // A log larger than the application's admin buffers could ever hold: Invalid Field (as a
  // transfer beyond MDTS), not a wait that never ends.
  Sqe too_big = admin_cmd(AdminOpcode::GetLogPage, 0x02 | (0xFFFFu << 16), 3);  // NUMD 3FFFFh: 1 MiB
  too_big.nsid = nvme::kNsidAll;
  too_big.sgl.length = 1u << 20;
  EXPECT_EQ(flood.status(too_big), sc::InvalidField);
  BystanderApp other(e, 8ull << 20);
  EXPECT_EQ(other.read(), sc::Success);
}

// Fabrics commands and commands whose effect reaches beyond the application never reach the
// shared remote controller: Invalid Command Opcode, on I/O queues (a Disconnect there used
// to close the queue pair every application shares) and on the admin queue; the same
// application and the others go on.
TEST(EngineIsolation, FabricsAndSharedStateCommandsAreRefusedAndEveryoneGoesOn) {
  RunningTarget t;
  RunningEngine e(t.trid());
  BystanderApp other(e);
  RawApp app(e.engine().options().socket_path);
  ASSERT_TRUE(app.enable());
  ASSERT_TRUE(app.create_queue(1, 16));
  shm::QueueMemory m = app.at.queue_pair(1);
  m.sq_size = m.cq_size = 16;
  shm::AppQueuePair io(m);
  auto io_status = [&](Sqe s) {
    EXPECT_TRUE(io.submit(s));
    io.ring_sq();
    app.kick();
    nvme::Cqe c{};
    EXPECT_TRUE(wait_for([&] { return io.poll(c); }, 5000)) << "no answer to I/O opcode " << int(s.opc);
    io.ring_cq();
    return nvme::Status::from_cqe(c.status);
  };
  Sqe disconnect{};
  disconnect.opc = uint8_t(nvme::IoOpcode::Fabrics);
  disconnect.nsid = uint8_t(wire::FabricsType::Disconnect);  // FCTYPE: byte 4 of a fabrics SQE
  disconnect.cid = 7;
  EXPECT_EQ(io_status(disconnect), sc::InvalidOpcode);
  Sqe reserve{};
  reserve.opc = uint8_t(nvme::IoOpcode::ReservationAcquire);
  reserve.nsid = kRamNsid;
  reserve.cid = 8;
  EXPECT_EQ(io_status(reserve), sc::InvalidOpcode);
  EXPECT_EQ(io_status(app.read_cmd(9, 0, 8, 0)), sc::Success) << "the queue goes on";
  EXPECT_GE(e.engine().stats().refused_opcodes, 2u);

  Sqe prop_set{};
  prop_set.opc = uint8_t(AdminOpcode::Fabrics);
  prop_set.nsid = uint8_t(wire::FabricsType::PropertySet);  // FCTYPE: byte 4 of a fabrics SQE
  EXPECT_EQ(app.status(prop_set), sc::InvalidOpcode);
  for (uint8_t opc : {0x0D /*Namespace Management*/, 0x15 /*Namespace Attachment*/, 0x80 /*Format NVM*/,
                      0x84 /*Sanitize*/, 0x10 /*Firmware Commit*/, 0x19 /*Directive Send*/})
    EXPECT_EQ(app.status(admin_cmd(AdminOpcode(opc))), sc::InvalidOpcode) << "admin opcode " << int(opc);
  Sqe resv_log = admin_cmd(AdminOpcode::GetLogPage, 0x80 | ((64 / 4 - 1) << 16));
  resv_log.sgl.length = 64;
  EXPECT_EQ(app.status(resv_log), sc::InvalidLogPage);
  EXPECT_EQ(other.read(), sc::Success) << "the shared queue pair is still there";
}

// The host library never puts a fabrics command on an I/O queue for a caller, over NVMe/TCP
// or through the engine.
TEST(EngineIsolation, TheHostLibraryRefusesFabricsCommandsOnIoQueues) {
  RunningTarget t;
  RunningEngine e(t.trid());
  Sqe disconnect{};
  disconnect.opc = uint8_t(nvme::IoOpcode::Fabrics);
  disconnect.nsid = uint8_t(wire::FabricsType::Disconnect);  // FCTYPE: byte 4 of a fabrics SQE
  for (const host::TransportId& trid : {t.trid(), e.trid()}) {
    std::string err;
    auto ctrl = host::Controller::connect(trid, {}, err);
    ASSERT_TRUE(ctrl) << err;
    auto qp = ctrl->create_io_qpair(16, err);
    ASSERT_TRUE(qp) << err;
    Io io;
    EXPECT_EQ(qp->submit(disconnect, nullptr, 0, false, Io::cb, &io), -EINVAL) << trid.trtype;
    BystanderApp still(e);
    EXPECT_EQ(still.read(), sc::Success);
  }
}

// An application closes the write end of its doorbell-notice pipe but keeps its lifeline:
// the pipe hangs up for good. The engine takes that application away (it can never ring
// again) instead of being woken by the hang-up forever: its control thread's wake-ups over
// a while stay those of an idle engine, the application's lifeline is closed, others go on.
TEST(EngineIsolation, AHungUpDoorbellPipeDetachesTheApplicationWithoutSpinning) {
  RunningTarget t;
  RunningEngine e(t.trid());
  RawApp app(e.engine().options().socket_path);
  ASSERT_TRUE(app.enable());
  // Closes the pipe's write end; the descriptor number stays the Attachment's (to close).
  const int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(devnull, 0);
  ASSERT_GE(dup3(devnull, app.at.kick_fd(), O_CLOEXEC), 0);
  close(devnull);
  EXPECT_TRUE(wait_for([&] { return e.engine().stats().broken_doorbells == 1; }, 5000));
  const uint64_t before = e.engine().stats().control_wakeups;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const uint64_t wakeups = e.engine().stats().control_wakeups - before;
  // Idle, the control thread wakes every 100 ms; on the hang-up it woke at once, every time.
  EXPECT_LT(wakeups, 30u) << "the control thread is woken over and over";
  pollfd pfd{app.at.socket(), POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 5000), 1);
  char b;
  EXPECT_EQ(recv(app.at.socket(), &b, 1, MSG_DONTWAIT), 0) << "the engine closes the broken application's lifeline";
  BystanderApp other(e);
  EXPECT_EQ(other.read(), sc::Success);
  EXPECT_TRUE(wait_for([&] { return e.engine().stats().applications == 1; }, 5000));
}


// Nothing is sent on a lifeline after the attach; an application that does (it would keep
// the socket readable, and the control thread busy) is taken away, the others go on.
TEST(EngineIsolation, AnApplicationThatTalksOnItsLifelineIsDetached) {
  RunningTarget t;
  RunningEngine e(t.trid());
  RawApp app(e.engine().options().socket_path);
  ASSERT_TRUE(app.enable());
  const char junk[16] = {};
  ASSERT_EQ(send(app.at.socket(), junk, sizeof(junk), MSG_NOSIGNAL), ssize_t(sizeof(junk)));
  pollfd pfd{app.at.socket(), POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 5000), 1);
  char b;
  EXPECT_EQ(recv(app.at.socket(), &b, 1, MSG_DONTWAIT), 0) << "the engine closes the lifeline";
  BystanderApp other(e);
  EXPECT_EQ(other.read(), sc::Success);
}

// Connections that never send their attach request are bounded (each holds a descriptor
// for 5 s): one beyond max_pending_attaches is closed at once, and once the silent ones are
// gone an application attaches as usual.
TEST(EngineLimits, SilentConnectionsBeyondMaxPendingAttachesAreClosed) {
  RunningTarget t;
  RunningEngine e(t.trid(), 50, [](engine::EngineOptions& o) { o.limits.max_pending_attaches = 2; });
  auto connect_silently = [&] {
    const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, e.engine().options().socket_path.c_str(), sizeof(a.sun_path) - 1);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    return fd;
  };
  const int s1 = connect_silently(), s2 = connect_silently();
  // accept() takes them in the order they came: s3 is the one beyond the limit.
  const int s3 = connect_silently();
  pollfd pfd{s3, POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 5000), 1) << "the connection beyond the limit is closed";
  char b;
  EXPECT_LE(recv(s3, &b, 1, MSG_DONTWAIT), 0);
  EXPECT_TRUE(wait_for([&] { return e.engine().stats().refused_for_limits == 1; }, 2000));
  close(s1);
  close(s2);
  close(s3);
  EXPECT_TRUE(wait_for([&] { return e.engine().stats().refused == 3; }, 2000)) << "the silent ones given up";
  BystanderApp other(e);
  EXPECT_EQ(other.read(), sc::Success);
}

// Namespaces added, resized and removed at the target reach an application through the
// engine as they reach a host on the wire: a namespace attribute notice, then the
// application's own Changed Namespace List, then a rescan by the host library.
bool lists(host::Controller& c, uint32_t nsid) {
  auto active = c.active_namespaces();
  return std::find(active.begin(), active.end(), nsid) != active.end();
}

uint64_t blocks_of(host::Controller& c, uint32_t nsid) {
  host::NamespaceInfo ni;
  std::string err;
  return c.namespace_info(nsid, ni, err) ? ni.blocks : 0;
}

TEST(EngineNamespaces, ChangesAtTheTargetReachTheApplicationsThroughTheEngine) {
  RunningTarget t;
  RunningEngine e(t.trid());
  auto& tgt = t.target();
  std::string err;
  std::atomic<int> notices{0};
  host::ControllerOptions o;
  o.on_namespace_change = [&](uint32_t) { ++notices; };
  auto app = host::Controller::connect(e.trid(), o, err);
  ASSERT_TRUE(app) << err;
  auto bystander = host::Controller::connect(e.trid(), {}, err);
  ASSERT_TRUE(bystander) << err;
  EXPECT_EQ(app->active_namespaces(), (std::vector<uint32_t>{1, 2, 3}));
  const uint64_t gen0 = app->namespace_generation();

  // Added: a RAM namespace with 4 KiB blocks, found and served without a reconnect.
  ASSERT_EQ(tgt.live_config().create_bdev(bdev_config("Malloc4", "ram", 8 << 20, 4096)), "");
  uint32_t nsid = 0;
  ASSERT_EQ(tgt.live_config().add_namespace(kTestNqn, bdev_config("Malloc4", "", 0), nsid), "");
  ASSERT_EQ(nsid, 4u);
  ASSERT_TRUE(wait_for([&] { return lists(*app, 4); }, 5000)) << "the application never saw namespace 4";
  EXPECT_TRUE(wait_for([&] { return lists(*bystander, 4); }, 5000)) << "every application of the subsystem hears";
  EXPECT_EQ(blocks_of(*app, 4), (8u << 20) / 4096);
  EXPECT_GT(app->namespace_generation(), gen0);
  // The callback runs once the new state shows, so it may still be on its way.
  EXPECT_TRUE(wait_for([&] { return notices.load() >= 1; }, 5000)) << "on_namespace_change never ran";
  {
    auto qp = app->create_io_qpair(16, err);
    ASSERT_TRUE(qp) << err;
    auto* buf = static_cast<uint8_t*>(app->alloc_io_buffer(8192));
    auto data = pattern(4096, 44);
    std::memcpy(buf, data.data(), 4096);
    Io w, r;
    ASSERT_EQ(qp->write(4, 5, 1, buf, Io::cb, &w), 0);
    EXPECT_EQ(run_io(*qp, w), sc::Success);
    ASSERT_EQ(qp->read(4, 5, 1, buf + 4096, Io::cb, &r), 0);
    EXPECT_EQ(run_io(*qp, r), sc::Success);
    EXPECT_EQ(std::memcmp(buf + 4096, data.data(), 4096), 0);
    app->free_io_buffer(buf);
  }

  // Resized: the new size is the application's without asking.
  ASSERT_EQ(tgt.live_config().create_bdev(bdev_config("Null5", "null", 64 << 20)), "");
  auto nc = bdev_config("Null5", "", 0);
  nc.nsid = 5;
  ASSERT_EQ(tgt.live_config().add_namespace(kTestNqn, nc, nsid), "");
  ASSERT_TRUE(wait_for([&] { return blocks_of(*app, 5) == (64u << 20) / 512; }, 5000));
  ASSERT_EQ(tgt.live_config().resize_bdev("Null5", 128 << 20), "");
  EXPECT_TRUE(wait_for([&] { return blocks_of(*app, 5) == (128u << 20) / 512; }, 5000))
      << "the application still has " << blocks_of(*app, 5) << " blocks";

  // Removed: gone from the application's list; the others stay.
  ASSERT_EQ(tgt.live_config().remove_namespace(kTestNqn, 4), "");
  EXPECT_TRUE(wait_for([&] { return !lists(*app, 4); }, 5000)) << "namespace 4 is still listed";
  EXPECT_TRUE(wait_for([&] { return !lists(*bystander, 4); }, 5000));
  EXPECT_EQ(app->active_namespaces(), (std::vector<uint32_t>{1, 2, 3, 5}));
  // The application's remaining namespaces still serve.
  BystanderApp reader(e);
  EXPECT_EQ(reader.read(), sc::Success);
}

// What the engine's controller answers an application driving it by hand: OAES lists the
// notice, the notice waits for an AER and for Set Features to enable it, one notice per
// change list read, and the list is the application's own.
TEST(EngineNamespaces, TheNoticeAndItsLogFollowTheSpecificationPerApplication) {
  RunningTarget t;
  RunningEngine e(t.trid());
  auto& tgt = t.target();
  RawApp app(e.engine().options().socket_path);
  RawApp other(e.engine().options().socket_path);
  ASSERT_TRUE(app.enable());
  ASSERT_TRUE(other.enable());

  Sqe id = admin_cmd(AdminOpcode::Identify, 1);
  id.sgl.addr = 0;
  id.sgl.length = 4096;
  ASSERT_EQ(app.status(id), sc::Success);
  EXPECT_EQ(reinterpret_cast<const nvme::IdentifyController*>(app.at.data())->oaes, wire::kAecNamespaceAttribute);

  auto submit_aer = [&](uint16_t cid) {
    Sqe s = admin_cmd(AdminOpcode::AsyncEventRequest);
    s.cid = cid;
    s.flags = nvme::kSqeFlagsPsdtSgl;
    app.admin->submit(s);
    app.admin->ring_sq();
    app.kick();
  };
  auto poll_aer = [&](uint16_t cid, int ms) -> std::optional<nvme::Cqe> {
    nvme::Cqe c{};
    if (!wait_for([&] { return app.admin->poll(c); }, ms)) return std::nullopt;
    app.admin->ring_cq();
    EXPECT_EQ(c.cid, cid);
    return c;
  };
  auto read_log = [&](bool retain) {
    Sqe s = admin_cmd(AdminOpcode::GetLogPage,
                      uint32_t(nvme::LogPageId::ChangedNamespaces) | (retain ? nvme::kLogRetainAsyncEvent : 0) |
                          ((4096 / 4 - 1) << 16));
    s.sgl.addr = 8192;
    s.sgl.length = 4096;
    EXPECT_EQ(app.status(s), sc::Success);
    std::vector<uint32_t> ids;
    const auto* w = reinterpret_cast<const uint32_t*>(app.at.data() + 8192);
    for (size_t i = 0; i < 1024 && w[i]; ++i) ids.push_back(w[i]);
    return ids;
  };
  const uint32_t notice_dw0 = nvme::async_event_dw0(nvme::AsyncEventType::Notice, nvme::kAsyncNoticeNamespaceChanged,
                                                    nvme::LogPageId::ChangedNamespaces);
  EXPECT_EQ(notice_dw0, 0x00040002u);

  // A change while the notice is disabled is listed, not reported.
  submit_aer(900);
  ASSERT_EQ(tgt.live_config().create_bdev(bdev_config("Null6", "null", 16 << 20)), "");
  uint32_t nsid = 0;
  auto nc = bdev_config("Null6", "", 0);
  nc.nsid = 6;
  ASSERT_EQ(tgt.live_config().add_namespace(kTestNqn, nc, nsid), "");
  EXPECT_FALSE(poll_aer(900, 300)) << "no notice before Set Features enables it";
  // Enabling it with a change listed reports at once, after the Set Features answer.
  nvme::Cqe sf = app.command(admin_cmd(AdminOpcode::SetFeatures, wire::kFeatureAsyncEventConfig,
                                       wire::kAecNamespaceAttribute));
  EXPECT_EQ(nvme::Status::from_cqe(sf.status), sc::Success);
  EXPECT_EQ(sf.dw0, wire::kAecNamespaceAttribute);
  auto aer = poll_aer(900, 5000);
  ASSERT_TRUE(aer) << "the listed change was never reported";
  EXPECT_EQ(nvme::Status::from_cqe(aer->status), sc::Success);
  EXPECT_EQ(aer->dw0, notice_dw0);

  // Masked until the log is read with RAE clear: a second change only joins the list.
  submit_aer(901);
  ASSERT_EQ(tgt.live_config().resize_bdev("Null6", 32 << 20), "");
  ASSERT_TRUE(tgt.live_config().create_bdev(bdev_config("Null7", "null", 16 << 20)).empty());
  nc = bdev_config("Null7", "", 0);
  nc.nsid = 7;
  ASSERT_EQ(tgt.live_config().add_namespace(kTestNqn, nc, nsid), "");
  EXPECT_FALSE(poll_aer(901, 500)) << "a second notice before the log was read";
  // Wait until the engine has passed on namespace 7 (the list then holds it).
  std::vector<uint32_t> listed;
  ASSERT_TRUE(wait_for([&] {
    listed = read_log(true);
    return std::find(listed.begin(), listed.end(), 7u) != listed.end();
  }, 5000));
  EXPECT_EQ(listed, (std::vector<uint32_t>{6, 7})) << "each NSID once, in order";
  EXPECT_FALSE(poll_aer(901, 200)) << "a read that retains the event unmasks nothing";
  EXPECT_EQ(read_log(false), (std::vector<uint32_t>{6, 7}));
  EXPECT_TRUE(read_log(true).empty()) << "reading with RAE clear empties the list";

  // Unmasked: the next change is reported on the AER already waiting.
  ASSERT_EQ(tgt.live_config().remove_namespace(kTestNqn, 7), "");
  aer = poll_aer(901, 5000);
  ASSERT_TRUE(aer) << "the change after the read was never reported";
  EXPECT_EQ(aer->dw0, notice_dw0);
  EXPECT_EQ(read_log(false), (std::vector<uint32_t>{7}));

  // The other application never enabled the notice: its changes are listed, never reported.
  Sqe log = admin_cmd(AdminOpcode::GetLogPage, uint32_t(nvme::LogPageId::ChangedNamespaces) | (1023u << 16));
  log.sgl.addr = 0;
  log.sgl.length = 4096;
  ASSERT_EQ(other.status(log), sc::Success);
  const auto* w = reinterpret_cast<const uint32_t*>(other.at.data());
  EXPECT_EQ(w[0], 6u);
  EXPECT_EQ(w[1], 7u);
  EXPECT_EQ(w[2], 0u);
  // An offset beyond the log or not a multiple of four is an invalid field.
  log.cdw12 = 4096;
  EXPECT_EQ(other.status(log), sc::InvalidField);
  log.cdw12 = 2;
  EXPECT_EQ(other.status(log), sc::InvalidField);
}

}  // namespace
}  // namespace nvtcp::test::engine_test
