// SPDX-License-Identifier: Apache-2.0
// Abort (admin 08h) on the wire: a command the target still holds before its device (waiting
// for the data its R2T asked for, or waiting for buffer memory) ends with Command Abort
// Requested and the Abort says so in dw0 bit 0 (0: aborted); a command that already ran, or
// an unknown one, is not aborted (1). A held Asynchronous Event Request can be aborted too.
#include <array>
#include <mutex>

#include "raw_session.hpp"
#include "test_devices.hpp"

namespace nvtcp::test::abort_test {
namespace {

Sqe abort_sqe(uint16_t cid, uint16_t sqid, uint16_t victim) { return raw_sqe(cmd::abort(sqid, victim), cid); }

// w (8 blocks at slba on I/O queue 1), held for the data its R2T asked for, is aborted: the
// Abort says so (dw0 bit 0 clear), the data still comes, and w then ends Command Abort
// Requested with nothing written.
void abort_held_write(Session& admin, Session& io, const Sqe& w, const R2TPdu& r2t, uint64_t slba) {
  Cqe cqe{};
  ASSERT_TRUE(admin.command(abort_sqe(admin.cid(), 1, w.cid), {}, cqe));
  ASSERT_TRUE(ok(cqe));
  EXPECT_EQ(cqe.dw0 & 1, 0u) << "the write with CID " << w.cid << " was not aborted";
  ASSERT_TRUE(io.c.send(h2c_data_pdu(w.cid, r2t.ttag, r2t.r2to, Bytes(r2t.r2tl, 0xAB), true)));
  ASSERT_TRUE(io.read_response(w.cid, cqe));
  EXPECT_TRUE(status_is(cqe, 0, sc::AbortRequested.value & 0xFF));
  Bytes data;
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), kRamNsid, slba, 8, 4096), {}, cqe, &data));
  ASSERT_TRUE(ok(cqe));
  EXPECT_EQ(data, Bytes(4096, 0)) << "an aborted write reached the namespace";
}

TEST(Abort, AWriteWaitingForItsDataEndsAbortedAndWritesNothing) {
  RunningTarget t;
  Session admin, io;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io));
  const Sqe w = rw_sqe(IoOpcode::Write, io.cid(), kRamNsid, 40, 8, 4096);
  ASSERT_TRUE(io.send_capsule(w));
  R2TPdu r2t{};
  ASSERT_TRUE(r2t_for(io, w.cid, r2t));

  ASSERT_NO_FATAL_FAILURE(abort_held_write(admin, io, w, r2t, 40));
  Cqe cqe{};

  // A command that already completed, an unknown CID and a queue that does not exist: not
  // aborted, and no harm done.
  ASSERT_TRUE(admin.command(abort_sqe(admin.cid(), 1, w.cid), {}, cqe));
  EXPECT_TRUE(ok(cqe));
  EXPECT_EQ(cqe.dw0 & 1, 1u);
  ASSERT_TRUE(admin.command(abort_sqe(admin.cid(), 7, 1), {}, cqe));
  EXPECT_TRUE(ok(cqe));
  EXPECT_EQ(cqe.dw0 & 1, 1u);
  expect_read_works(io);
}

TEST(Abort, AWriteWaitingForMemoryEndsAbortedAndTheOthersGoOn) {
  target::TargetConfig cfg = default_config();
  // Room for the request pool and one 96 KiB buffer: the second large write waits. (The
  // limit must hold one largest transfer: MDTS 128 KiB.)
  cfg.mdts_bytes = 128u << 10;
  cfg.max_connection_buffer_memory = 160u << 10;
  RunningTarget t(cfg);
  Session admin, io;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io));
  const Sqe first = rw_sqe(IoOpcode::Write, io.cid(), kRamNsid, 0, 192, 96u << 10);
  ASSERT_TRUE(io.send_capsule(first));
  R2TPdu r2t{};
  ASSERT_TRUE(r2t_for(io, first.cid, r2t));
  const Sqe second = rw_sqe(IoOpcode::Write, io.cid(), kRamNsid, 1000, 192, 96u << 10);
  ASSERT_TRUE(io.send_capsule(second));
  ASSERT_TRUE(io.c.expect_silence(200)) << "the second write did not wait for memory";

  Cqe cqe{};
  ASSERT_TRUE(admin.command(abort_sqe(admin.cid(), 1, second.cid), {}, cqe));
  ASSERT_TRUE(ok(cqe));
  EXPECT_EQ(cqe.dw0 & 1, 0u);
  ASSERT_TRUE(io.read_response(second.cid, cqe));
  EXPECT_TRUE(status_is(cqe, 0, sc::AbortRequested.value & 0xFF));
  // The first write, not aborted, completes as ever once its data is in.
  uint32_t off = 0;
  while (off < first.sgl.length) {
    if (off > 0) {
      ASSERT_TRUE(r2t_for(io, first.cid, r2t));
    }
    ASSERT_TRUE(io.c.send(h2c_data_pdu(first.cid, r2t.ttag, r2t.r2to, Bytes(r2t.r2tl, 0x5C), true)));
    off = r2t.r2to + r2t.r2tl;
  }
  ASSERT_TRUE(io.read_response(first.cid, cqe));
  EXPECT_TRUE(ok(cqe));
  expect_read_works(io);
}

TEST(Abort, AHeldAsynchronousEventRequestCanBeAborted) {
  RunningTarget t;
  Session admin, io;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io));
  Sqe aer{};
  aer.opc = uint8_t(AdminOpcode::AsyncEventRequest);
  aer.flags = kSqeFlagsPsdtSgl;
  aer.cid = admin.cid();
  ASSERT_TRUE(admin.send_capsule(aer));
  Cqe cqe{};
  ASSERT_TRUE(admin.send_capsule(abort_sqe(admin.cid(), 0, aer.cid)));
  // Both answers come: the request ended by the abort, then the abort.
  ASSERT_TRUE(admin.read_response(aer.cid, cqe));
  EXPECT_TRUE(status_is(cqe, 0, sc::AbortRequested.value & 0xFF));
  ASSERT_TRUE(admin.read_response(uint16_t(aer.cid + 1), cqe));
  EXPECT_TRUE(ok(cqe));
  EXPECT_EQ(cqe.dw0 & 1, 0u);
  // It no longer counts against the limit of four held requests.
  for (int i = 0; i < 4; ++i) {
    aer.cid = admin.cid();
    ASSERT_TRUE(admin.send_capsule(aer));
  }
  EXPECT_TRUE(admin.c.expect_silence(200)) << "four requests are within AERL";
  expect_read_works(io);
}

TEST(Abort, ADatasetManagementStopsBetweenItsRanges) {
  target::TargetConfig cfg = default_config();
  cfg.subsystems[0].namespaces = {{2, "ram", 64u << 20, "", 512}};
  GatedDevice* dev = nullptr;
  RunningTarget t(cfg, gated_devices(dev));
  Session admin, io;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io));
  Cqe cqe{};

  Bytes ranges;
  for (uint64_t i = 0; i < 3; ++i) {
    DsmRange d{0, 8, i * 100};
    const Bytes b = bytes_of(d);
    ranges.insert(ranges.end(), b.begin(), b.end());
  }
  Sqe dsm{};
  dsm.opc = uint8_t(IoOpcode::DatasetManagement);
  dsm.flags = kSqeFlagsPsdtSgl;
  dsm.cid = io.cid();
  dsm.nsid = 2;
  dsm.cdw10 = 2;        // three ranges, 0's based
  dsm.cdw11 = 1u << 2;  // deallocate
  dsm.sgl.length = uint32_t(ranges.size());
  dsm.sgl.type = kSglDataBlockOffset;
  ASSERT_TRUE(io.send_capsule(dsm, ranges));
  ASSERT_TRUE(wait_for([&] { return dev->held() == 1; }, 5000)) << "the first range never reached the device";
  ASSERT_TRUE(admin.command(abort_sqe(admin.cid(), 1, dsm.cid), {}, cqe));
  ASSERT_TRUE(ok(cqe));
  EXPECT_EQ(cqe.dw0 & 1, 0u);
  dev->release_one();
  ASSERT_TRUE(io.read_response(dsm.cid, cqe));
  EXPECT_TRUE(status_is(cqe, 0, sc::AbortRequested.value & 0xFF));
  EXPECT_EQ(dev->held(), 0u) << "a range after the abort reached the device";
  // The queue goes on.
  ASSERT_TRUE(io.command(rw_sqe(IoOpcode::Read, io.cid(), 2, 0, 1, 512), {}, cqe));
  EXPECT_TRUE(ok(cqe));
}

// A request slot keeps the CID of the command it last carried after that command is done.
// Abort must look only at live commands: a finished write's CID is reused by a live write in
// another slot (each order of slots, so that the finished one is searched first in one of
// them). Abort once took the finished one ("not aborted") and the live write went on.
TEST(Abort, ALiveCommandIsFoundWhenAFinishedOneUsedItsCid) {
  for (bool reused_first : {true, false}) {
    SCOPED_TRACE(reused_first ? "the CID's first command was sent first" : "it was sent second");
    RunningTarget t;
    Session admin, io;
    ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io));
    const uint16_t reused = 77, other = 78;
    const Sqe done = rw_sqe(IoOpcode::Write, reused, kRamNsid, 40, 8, 4096);
    const Sqe held = rw_sqe(IoOpcode::Write, other, kRamNsid, 48, 8, 4096);
    R2TPdu r_done{}, r_held{};
    const std::array<const Sqe*, 2> order =
        reused_first ? std::array<const Sqe*, 2>{&done, &held} : std::array<const Sqe*, 2>{&held, &done};
    for (const Sqe* w : order) {
      ASSERT_TRUE(io.send_capsule(*w));
      ASSERT_TRUE(r2t_for(io, w->cid, w == &done ? r_done : r_held));
    }
    // The first command with the CID finishes, then the other write; their slots are free.
    Cqe cqe{};
    ASSERT_TRUE(io.c.send(h2c_data_pdu(done.cid, r_done.ttag, r_done.r2to, Bytes(r_done.r2tl, 0x11), true)));
    ASSERT_TRUE(io.read_response(done.cid, cqe));
    ASSERT_TRUE(ok(cqe));
    ASSERT_TRUE(io.c.send(h2c_data_pdu(held.cid, r_held.ttag, r_held.r2to, Bytes(r_held.r2tl, 0x22), true)));
    ASSERT_TRUE(io.read_response(held.cid, cqe));
    ASSERT_TRUE(ok(cqe));
    ASSERT_TRUE(wait_for(
        [&] { return t.target().request_states()[size_t(target::TcpRequest::State::Sending)] == 0; }, 5000));

    const Sqe live = rw_sqe(IoOpcode::Write, reused, kRamNsid, 56, 8, 4096);
    ASSERT_TRUE(io.send_capsule(live));
    R2TPdu r_live{};
    ASSERT_TRUE(r2t_for(io, live.cid, r_live));
    // The live command with that CID is the one aborted.
    ASSERT_NO_FATAL_FAILURE(abort_held_write(admin, io, live, r_live, 56));
  }
}

}  // namespace
}  // namespace nvtcp::test::abort_test
