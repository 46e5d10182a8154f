// SPDX-License-Identifier: Apache-2.0
// What one host's commands may do to another's on a namespace they share, on one reactor
// (the default): a read still being sent is not changed by a write that completes meanwhile,
// and a Copy of many ranges does not hold the reactor while it runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
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

constexpr uint32_t kNsid4K = 3;  // RAM, 64 MiB of 4096-byte blocks

// The source range list of a Copy: count ranges of range_blocks each, range i starting at
// (i % wrap) * range_blocks.
Bytes copy_ranges(uint32_t count, uint32_t range_blocks, uint32_t wrap) {
  Bytes ranges;
  for (uint32_t i = 0; i < count; ++i) {
    CopySourceRange r{};
    r.slba = (i % wrap) * range_blocks;
    r.nlb = uint16_t(range_blocks - 1);
    const Bytes b = bytes_of(r);
    ranges.insert(ranges.end(), b.begin(), b.end());
  }
  return ranges;
}

// A Copy on the 4K namespace of the ranges (ranges_count of them) to dest, its list in-capsule.
Sqe copy_sqe(uint16_t cid, const Bytes& ranges, uint32_t ranges_count, uint64_t dest) {
  Sqe copy{};
  copy.opc = uint8_t(IoOpcode::Copy);
  copy.nsid = kNsid4K;
  copy.cdw10 = uint32_t(dest);
  copy.cdw12 = ranges_count - 1;
  return raw_sqe(copy, cid, uint32_t(ranges.size()), kSglDataBlockOffset);
}

// The copies (each with ranges in-capsule) and then a one-block read, all in one send: the
// read behind them is answered first, then every Copy succeeds.
void expect_read_overtakes(Session& io, const std::vector<Sqe>& copies, const Bytes& ranges) {
  Bytes all;
  for (const Sqe& c : copies) {
    const Bytes pdu = capsule_pdu(c, ranges, false, false);
    all.insert(all.end(), pdu.begin(), pdu.end());
  }
  const Sqe read = rw_sqe(IoOpcode::Read, io.cid(), kNsid4K, 0, 1, 4096);
  const Bytes r = capsule_pdu(read, {}, false, false);
  all.insert(all.end(), r.begin(), r.end());
  ASSERT_TRUE(io.c.send(all));
  Cqe cqe{};
  Bytes data;
  ASSERT_TRUE(io.read_response(read.cid, cqe, &data)) << "a Copy was answered before the read behind it";
  EXPECT_TRUE(ok(cqe));
  for (const Sqe& c : copies) {
    ASSERT_TRUE(io.read_response(c.cid, cqe));
    EXPECT_TRUE(ok(cqe)) << "Copy: " << hex(sc_of(cqe));
  }
}

// A Copy of 48 ranges of 1 MiB (96 MiB of memcpy on a RAM namespace) followed by a small read
// on the same queue, both in one send. The Copy takes one range per reactor turn, so the read
// behind it is answered first; when the Copy ran every range in one turn, nothing else on the
// reactor (this read, other hosts' commands) ran until it was done.
TEST(SharedNamespace, ACopyOfManyRangesLetsACommandBehindItFinishFirst) {
  RunningTarget t;
  Session admin, io;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io));
  // 1 MiB each (MSSRL = MDTS); 16 of them, so that the whole Copy answers well within the raw
  // session's 3-s read timeout under ThreadSanitizer too (48 took over 3 s there).
  constexpr uint32_t kRanges = 16, kRangeBlocks = 256;
  const Bytes ranges = copy_ranges(kRanges, kRangeBlocks, 8);  // the first 8 MiB, over and over
  const uint64_t dest = 16384 - kRanges * kRangeBlocks;      // the namespace's last 16 MiB
  ASSERT_NO_FATAL_FAILURE(expect_read_overtakes(io, {copy_sqe(io.cid(), ranges, kRanges, dest)}, ranges));
  expect_read_works(io);
}

// Another host's I/O queue on the same reactor, light (one small command outstanding, as a QD1
// reader's) for as long as the test runs: a 32 KiB write whose data never comes (its R2T
// unanswered). Beside a heavy queue the reactor is then contended, and its budgets of work per
// turn hold (ReactorCommands::queue_load).
void hold_a_command_outstanding(RunningTarget& t, Session& admin, Session& io) {
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io));
  ASSERT_TRUE(io.c.send(capsule_pdu(rw_sqe(IoOpcode::Write, io.cid(), kNsid4K, 16000, 8, 32768), {}, false,
                                    false)));
  Bytes r2t;
  ASSERT_TRUE(io.read_pdu(r2t));
  ASSERT_EQ(r2t[0], uint8_t(PduType::R2T));
}

// Data moved inside the target costs the reactor as a read of the same bytes would: Copies from
// one host, however many and however large, move at most the reactor's budget per turn, and a
// reader on the same reactor is served in the turns between. (Before the budget, eight Copies
// of 1 MiB ranges moved 16 MiB per turn, and a QD1 reader beside them fell to a fourteenth.)
TEST(SharedNamespace, CopiesMoveAtMostTheReactorsBudgetPerTurn) {
  RunningTarget t;
  Session admin, io;
  ASSERT_NO_FATAL_FAILURE(open_io_queue(t, admin, io));
  constexpr uint32_t kRanges = 4, kRangeBlocks = 256, kCopies = 8;
  const Bytes ranges = copy_ranges(kRanges, kRangeBlocks, kRanges);
  std::vector<Sqe> copies;
  for (uint32_t c = 0; c < kCopies; ++c)
    copies.push_back(copy_sqe(io.cid(), ranges, kRanges, 8192 + c * kRanges * kRangeBlocks));
  ASSERT_NO_FATAL_FAILURE(expect_read_overtakes(io, copies, ranges));
  EXPECT_LE(t.target().most_bytes_in_a_turn(), target::ConnectionSet::kTurnBytes);
  EXPECT_GT(t.target().turn_waits(), 0u) << "eight Copies never met the budget";
  expect_read_works(io);
}


// A host's 1 MiB reads and writes beside another host's queue (on a RAM namespace, whose
// device copies on the reactor) go to the device in pieces within the reactor's budget per
// turn, and each comes out whole: every byte written reads back, 16 commands of each at once.
// (Before the budget, the reactor ran all 16 in the turn they came: 16 MiB of copies, while the
// other host's commands waited.)
TEST(SharedNamespace, LargeReadsAndWritesBesideAnotherHostGoInPiecesAndStayWhole) {
  RunningTarget t;
  Session other_admin, other;
  ASSERT_NO_FATAL_FAILURE(hold_a_command_outstanding(t, other_admin, other));
  std::string err;
  host::ControllerOptions o;
  o.hostnqn = "nqn.2026-12.io.nvtcp:large";
  auto ctrl = host::Controller::connect(t.trid(), o, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(16, err);
  ASSERT_TRUE(qp) << err;
  constexpr uint32_t kCommands = 16, kBlocks = 256, kLen = kBlocks * 4096;
  std::vector<uint8_t*> out, in;
  for (uint32_t c = 0; c < kCommands; ++c) {
    out.push_back(static_cast<uint8_t*>(ctrl->alloc_io_buffer(kLen)));
    in.push_back(static_cast<uint8_t*>(ctrl->alloc_io_buffer(kLen)));
    ASSERT_TRUE(out.back() && in.back());
    for (uint32_t i = 0; i < kLen; ++i) out.back()[i] = uint8_t(c * 31 + i * 7 + (i >> 12));
    std::memset(in.back(), 0, kLen);
  }
  struct Count {
    uint32_t done = 0, failed = 0;
  } count;
  const host::CompletionFn cb = [](void* ctx, const host::Completion& c) {
    auto* n = static_cast<Count*>(ctx);
    ++n->done;
    if (!c.status.ok()) ++n->failed;
  };
  auto run_all = [&](bool write) {
    count = {};
    for (uint32_t c = 0; c < kCommands; ++c) {
      const int rc = write ? qp->write(kNsid4K, c * kBlocks, kBlocks, out[c], cb, &count)
                           : qp->read(kNsid4K, c * kBlocks, kBlocks, in[c], cb, &count);
      ASSERT_EQ(rc, 0);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (count.done < kCommands && std::chrono::steady_clock::now() < deadline) qp->process_completions(1000);
    ASSERT_EQ(count.done, kCommands) << "commands never completed";
    EXPECT_EQ(count.failed, 0u);
  };
  ASSERT_NO_FATAL_FAILURE(run_all(true));
  ASSERT_NO_FATAL_FAILURE(run_all(false));
  for (uint32_t c = 0; c < kCommands; ++c)
    EXPECT_EQ(std::memcmp(in[c], out[c], kLen), 0) << "command " << c << " came back changed";
  EXPECT_LE(t.target().most_bytes_in_a_turn(), target::ConnectionSet::kTurnBytes)
      << "a 1 MiB command went to the device whole beside another host";
  EXPECT_GT(t.target().turn_waits(), 0u) << "16 commands of 1 MiB never met the budget";
  for (uint32_t c = 0; c < kCommands; ++c) {
    ctrl->free_io_buffer(out[c]);
    ctrl->free_io_buffer(in[c]);
  }
}

}  // namespace
}  // namespace nvtcp::test::shared_namespace_test
