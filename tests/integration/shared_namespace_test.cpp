// SPDX-License-Identifier: Apache-2.0
// What one host's commands may do to another's on a namespace they share, on one reactor
// (the default): a read still being sent is not changed by a write that completes meanwhile,
// and a Copy of many ranges does not hold the reactor while it runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "nvtcp/host.hpp"
#include "raw_session.hpp"
#include "target_tcp/tcp_queue.hpp"

namespace nvtcp::test::shared_namespace_test {
namespace {

using State = target::TcpRequest::State;

uint32_t count(const target::RequestStateCounts& c, State s) { return c[size_t(s)]; }

// A host writes through the library and waits for it.
void write_through_library(RunningTarget& t, uint32_t nsid, uint64_t slba, const Bytes& data) {
  std::string err;
  host::ControllerOptions o;
  o.hostnqn = "nqn.2026-11.io.nvtcp:writer";
  auto ctrl = host::Controller::connect(t.trid(), o, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(4, err);
  ASSERT_TRUE(qp) << err;
  auto* buf = static_cast<uint8_t*>(ctrl->alloc_io_buffer(data.size()));
  ASSERT_TRUE(buf);
  std::memcpy(buf, data.data(), data.size());
  EXPECT_TRUE(one_command(*qp, [&](host::CompletionFn cb, void* ctx) {
                return qp->write(nsid, slba, uint32_t(data.size() / 512), buf, cb, ctx);
              }).ok());
  ctrl->free_io_buffer(buf);
}

// The first block where got differs from want, for the failure message.
size_t first_block_differing(const Bytes& got, const Bytes& want) {
  for (size_t b = 0; b * 512 < got.size(); ++b)
    if (!std::equal(got.begin() + b * 512, got.begin() + (b + 1) * 512, want.begin() + b * 512)) return b;
  return got.size() / 512;
}

// Host A asks for the same 1 MiB many times and does not read its socket, so most of the
// data waits to be sent: some of it in the kernel, some in the target's send queue (the
// reads it ran), and the rest as reads still waiting for room. Host B then overwrites those
// blocks and gets its completion. Every read the target ran before the write must return the
// old data whole, however long its data then waited for the socket: the target once sent
// such reads straight from namespace memory, so B's write showed up in A's reads, one of
// them half old, half new. (Reads that waited for room run after the write and see it.)
TEST(SharedNamespace, AReadStillBeingSentIsNotChangedByAWriteThatCompletesMeanwhile) {
  target::TargetConfig cfg = default_config();
  cfg.max_send_queue_bytes = 2u << 20;  // a few reads queued, the rest wait
  RunningTarget t(cfg);
  constexpr uint32_t kLen = 1u << 20, kNlb = kLen / 512;
  const Bytes old_data = pattern(kLen, 1), new_data = pattern(kLen, 2);
  ASSERT_NO_FATAL_FAILURE(write_through_library(t, kRamNsid, 0, old_data));

  Session admin, a;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, a));
  constexpr int kReads = 30;  // the queue holds 32
  std::vector<uint16_t> cids;
  Bytes capsules;  // all in one send, so the target takes them in one turn
  for (int i = 0; i < kReads; ++i) {
    cids.push_back(a.cid());
    const Bytes c = capsule_pdu(rw_sqe(IoOpcode::Read, cids.back(), kRamNsid, 0, kNlb, kLen), {}, false, false);
    capsules.insert(capsules.end(), c.begin(), c.end());
  }
  ASSERT_TRUE(a.c.send(capsules));
  // Every read has run (its data went to the kernel or waits in the send queue), or waits for
  // room in the send queue; the reads that ran are the first ones.
  target::RequestStateCounts states{};
  ASSERT_TRUE(wait_for(
      [&] {
        states = t.target().request_states();
        // (Once the socket's buffers are full this holds until the host reads: a read whose
        // data is still being sent, and reads that wait behind it.)
        // (Executing counts the commands in the device too.)
        return count(states, State::Executing) == 0 && count(states, State::ReceivingCapsule) == 0 &&
               count(states, State::Sending) >= 1 &&
               count(states, State::Queued) >= 1;
      },
      10000))
      << "the case needs reads whose data waits for the socket and reads that wait behind them: sending "
      << count(states, State::Sending) << ", waiting " << count(states, State::Queued);
  const uint32_t ran = kReads - count(states, State::Queued);

  ASSERT_NO_FATAL_FAILURE(write_through_library(t, kRamNsid, 0, new_data));

  bool seen_new = false;
  for (int i = 0; i < kReads; ++i) {
    SCOPED_TRACE("read " + std::to_string(i) + " of " + std::to_string(kReads) + ", " + std::to_string(ran) +
                 " ran before the write");
    Cqe cqe{};
    Bytes data;
    ASSERT_TRUE(a.read_response(cids[size_t(i)], cqe, &data));
    ASSERT_TRUE(ok(cqe));
    ASSERT_EQ(data.size(), kLen);
    const bool is_old = data == old_data, is_new = data == new_data;
    ASSERT_TRUE(is_old || is_new) << "a read mixes old and new data; first block not old: "
                                  << first_block_differing(data, old_data);
    if (uint32_t(i) < ran) {
      EXPECT_TRUE(is_old) << "a read that ran before the write returned the write's data";
    }
    EXPECT_FALSE(seen_new && is_old) << "a later read saw older data";
    seen_new |= is_new;
  }
  expect_read_works(a);
}

// A Copy of 48 ranges of 1 MiB (96 MiB of memcpy on a RAM namespace) followed by a small read
// on the same queue, both in one send. The Copy takes one range per reactor turn, so the read
// behind it is answered first; when the Copy ran every range in one turn, nothing else on the
// reactor (this read, other hosts' commands) ran until it was done.
TEST(SharedNamespace, ACopyOfManyRangesLetsACommandBehindItFinishFirst) {
  RunningTarget t;
  Session admin, io;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io));
  constexpr uint32_t kNsid4K = 3;  // RAM, 64 MiB of 4096-byte blocks
  // 1 MiB each (MSSRL = MDTS); 16 of them, so that the whole Copy answers well within the raw
  // session's 3-s read timeout under ThreadSanitizer too (48 took over 3 s there).
  constexpr uint32_t kRanges = 16, kRangeBlocks = 256;
  Bytes ranges;
  for (uint32_t i = 0; i < kRanges; ++i) {
    CopySourceRange r{};
    r.slba = (i % 8) * kRangeBlocks;  // the first 8 MiB, over and over
    r.nlb = uint16_t(kRangeBlocks - 1);
    const Bytes b = bytes_of(r);
    ranges.insert(ranges.end(), b.begin(), b.end());
  }
  Sqe copy{};
  copy.opc = uint8_t(IoOpcode::Copy);
  copy.nsid = kNsid4K;
  const uint64_t dest = 16384 - kRanges * kRangeBlocks;  // the namespace's last 16 MiB
  copy.cdw10 = uint32_t(dest);
  copy.cdw12 = kRanges - 1;
  copy = raw_sqe(copy, io.cid(), uint32_t(ranges.size()), kSglDataBlockOffset);
  const Sqe read = rw_sqe(IoOpcode::Read, io.cid(), kNsid4K, 0, 1, 4096);
  Bytes both = capsule_pdu(copy, ranges, false, false);
  const Bytes second = capsule_pdu(read, {}, false, false);
  both.insert(both.end(), second.begin(), second.end());
  ASSERT_TRUE(io.c.send(both));

  // The first answer on the queue is the read's.
  Cqe cqe{};
  Bytes data;
  ASSERT_TRUE(io.read_response(read.cid, cqe, &data)) << "the Copy was answered before the read behind it";
  EXPECT_TRUE(ok(cqe));
  ASSERT_TRUE(io.read_response(copy.cid, cqe));
  EXPECT_TRUE(ok(cqe)) << "Copy: " << hex(sc_of(cqe));
  expect_read_works(io);
}

// Data moved inside the target costs the reactor as a read of the same bytes would: Copies from
// one host, however many and however large, move at most the reactor's budget per turn, and a
// reader on the same reactor is served in the turns between. (Before the budget, eight Copies
// of 1 MiB ranges moved 16 MiB per turn, and a QD1 reader beside them fell to a fourteenth.)
TEST(SharedNamespace, CopiesMoveAtMostTheReactorsBudgetPerTurn) {
  RunningTarget t;
  Session admin, io;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io));
  constexpr uint32_t kNsid4K = 3;  // RAM, 64 MiB of 4096-byte blocks
  constexpr uint32_t kRanges = 4, kRangeBlocks = 256, kCopies = 8;
  Bytes ranges;
  for (uint32_t i = 0; i < kRanges; ++i) {
    CopySourceRange r{};
    r.slba = i * kRangeBlocks;
    r.nlb = uint16_t(kRangeBlocks - 1);
    const Bytes b = bytes_of(r);
    ranges.insert(ranges.end(), b.begin(), b.end());
  }
  Bytes all;
  std::vector<uint16_t> cids;
  for (uint32_t c = 0; c < kCopies; ++c) {
    Sqe copy{};
    copy.opc = uint8_t(IoOpcode::Copy);
    copy.nsid = kNsid4K;
    copy.cdw10 = uint32_t(8192 + c * kRanges * kRangeBlocks);
    copy.cdw12 = kRanges - 1;
    copy = raw_sqe(copy, io.cid(), uint32_t(ranges.size()), kSglDataBlockOffset);
    cids.push_back(copy.cid);
    const Bytes pdu = capsule_pdu(copy, ranges, false, false);
    all.insert(all.end(), pdu.begin(), pdu.end());
  }
  const Sqe read = rw_sqe(IoOpcode::Read, io.cid(), kNsid4K, 0, 1, 4096);
  const Bytes r = capsule_pdu(read, {}, false, false);
  all.insert(all.end(), r.begin(), r.end());
  ASSERT_TRUE(io.c.send(all));
  Cqe cqe{};
  Bytes data;
  ASSERT_TRUE(io.read_response(read.cid, cqe, &data)) << "the Copies were all answered before the read behind them";
  EXPECT_TRUE(ok(cqe));
  for (uint16_t cid : cids) {
    ASSERT_TRUE(io.read_response(cid, cqe));
    EXPECT_TRUE(ok(cqe)) << "Copy: " << hex(sc_of(cqe));
  }
  EXPECT_LE(t.target().most_step_bytes_in_a_turn(), target::ConnectionSet::kStepBytesPerTurn);
  EXPECT_GT(t.target().steps_deferred(), 0u) << "eight Copies never met the budget";
  expect_read_works(io);
}

}  // namespace
}  // namespace nvtcp::test::shared_namespace_test
