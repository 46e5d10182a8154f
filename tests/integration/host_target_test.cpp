// SPDX-License-Identifier: Apache-2.0
// The host library against the target on loopback: in one process (RunningTarget on an
// ephemeral port) and in two (the nvtcp CLI started as a child process). Every command
// runs with a deadline, so a lost completion fails the test instead of hanging it.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "nvtcp/host.hpp"
#include "nvtcp/identify.hpp"
#include "nvtcp/log_pages.hpp"
#include "test_target.hpp"
#include "wire/commands.hpp"
#include "wire/fabrics.hpp"

extern char** environ;

namespace nvtcp::test::host_target_test {
namespace {

using host::Completion;
using host::Controller;
using host::ControllerOptions;
using host::QueuePair;
using nvme::Status;
namespace sc = nvme::sc;

using Clock = std::chrono::steady_clock;
constexpr auto kOpTimeout = std::chrono::seconds(10);

// ---------------------------------------------------------------- helpers

// One command's outcome. A command that never completes leaves its Waiter allocated on
// purpose: the queue pair may still call back into it later.
using Waiter = CompletionBatch::Op;
constexpr auto on_done = &CompletionBatch::cb;

// For batches: a command that could not be submitted counts as done, with a failure.
void check_submitted(int rc, Waiter& w) {
  EXPECT_EQ(rc, 0) << "submit: " << strerror(-rc);
  if (rc != 0) {
    w.done = true;
    w.cpl.status = sc::TransportError;
  }
}

struct Result {
  int rc = 0;              // what submit returned
  bool completed = false;  // the callback ran before the deadline
  Completion cpl;
};

// Submits one command through `submit(cb, ctx)` and drives qp until it completes.
Result run_one(QueuePair& qp, const std::function<int(host::CompletionFn, void*)>& submit) {
  Result res;
  auto* w = new Waiter;
  res.rc = submit(on_done, w);
  if (res.rc != 0) {
    delete w;
    return res;
  }
  auto deadline = Clock::now() + kOpTimeout;
  while (!w->done && Clock::now() < deadline) qp.process_completions(1000);
  if (!w->done) return res;  // leaked on purpose (see Waiter)
  res.completed = true;
  res.cpl = w->cpl;
  delete w;
  return res;
}

::testing::AssertionResult HasStatus(const Result& r, Status want) {
  if (r.rc != 0) return ::testing::AssertionFailure() << "submit returned " << r.rc << " (" << strerror(-r.rc) << ")";
  if (!r.completed) return ::testing::AssertionFailure() << "no completion within the deadline";
  if (r.cpl.status != want)
    return ::testing::AssertionFailure() << "status " << nvme::status_name(r.cpl.status) << ", expected "
                                         << nvme::status_name(want);
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult Succeeded(const Result& r) { return HasStatus(r, sc::Success); }

Result do_write(QueuePair& qp, uint32_t nsid, uint64_t slba, uint32_t nlb, const void* buf) {
  return run_one(qp, [&](host::CompletionFn cb, void* ctx) { return qp.write(nsid, slba, nlb, buf, cb, ctx); });
}

Result do_read(QueuePair& qp, uint32_t nsid, uint64_t slba, uint32_t nlb, void* buf) {
  return run_one(qp, [&](host::CompletionFn cb, void* ctx) { return qp.read(nsid, slba, nlb, buf, cb, ctx); });
}

Result do_raw(QueuePair& qp, const nvme::Sqe& sqe, void* data, uint32_t len, bool to_controller) {
  return run_one(qp,
                 [&](host::CompletionFn cb, void* ctx) { return qp.submit(sqe, data, len, to_controller, cb, ctx); });
}

// Offset of the first byte that differs, or -1 when equal (sizes must match).
long first_mismatch(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  auto m = std::mismatch(a.begin(), a.end(), b.begin());
  return m.first == a.end() ? -1 : long(m.first - a.begin());
}

bool all_zero(const uint8_t* p, size_t n) {
  return std::all_of(p, p + n, [](uint8_t b) { return b == 0; });
}

// A file under /tmp that is removed when the test ends.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& tag)
      : path("/tmp/nvtcp-host-target-" + std::to_string(getpid()) + "-" + tag + ".img") {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

// Writes then reads back one block of fresh data: the queue pair still works.
::testing::AssertionResult QueuePairWorks(QueuePair& qp, uint32_t nsid, uint64_t slba, uint64_t seed) {
  uint32_t bs = qp.block_size(nsid);
  if (bs == 0) return ::testing::AssertionFailure() << "block size of nsid " << nsid << " unknown";
  auto data = pattern(bs, seed);
  Result w = do_write(qp, nsid, slba, 1, data.data());
  if (!Succeeded(w)) return ::testing::AssertionFailure() << "write after the error: " << Succeeded(w).message();
  std::vector<uint8_t> back(bs, 0xA5);
  Result r = do_read(qp, nsid, slba, 1, back.data());
  if (!Succeeded(r)) return ::testing::AssertionFailure() << "read after the error: " << Succeeded(r).message();
  if (first_mismatch(data, back) != -1) return ::testing::AssertionFailure() << "data read back differs";
  if (qp.failed()) return ::testing::AssertionFailure() << "queue pair is marked failed";
  return ::testing::AssertionSuccess();
}

std::string trimmed(const char* field, size_t n) {
  std::string s(field, strnlen(field, n));
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

// ---------------------------------------------------------------- 1. identify

TEST(HostTarget, ConnectAndIdentifyController) {
  RunningTarget t;
  std::string err;
  ControllerOptions o;
  o.io_queues = 8;
  auto ctrl = Controller::connect(t.trid(), o, err);
  ASSERT_TRUE(ctrl) << err;
  EXPECT_FALSE(ctrl->failed());

  const auto* id = reinterpret_cast<const nvme::IdentifyController*>(ctrl->identify_data());
  EXPECT_EQ(trimmed(id->subnqn, sizeof(id->subnqn)), kTestNqn);
  EXPECT_NE(ctrl->cntlid(), 0);
  EXPECT_EQ(id->cntlid, ctrl->cntlid());
  EXPECT_EQ(id->cntrltype, nvme::kCntrlTypeIo);
  EXPECT_EQ(id->mdts, 8) << "MDTS: 1 MiB in 4 KiB pages is 2^8";
  EXPECT_EQ(ctrl->max_transfer_bytes(), 1u << 20);
  EXPECT_EQ(id->ioccsz, (64u + 8192u) / 16) << "IOCCSZ: 64-byte SQE + 8 KiB in-capsule data, 16-byte units";
  EXPECT_EQ(id->iorcsz, 1u);
  EXPECT_EQ(id->sqes, 0x66);
  EXPECT_EQ(id->cqes, 0x44);
  EXPECT_EQ(id->nn, target::kDefaultMaxNamespaces) << "NN: the most namespaces it can hold (added live), not the count";
  EXPECT_TRUE(id->oncs & nvme::kOncsDsm) << "ONCS 0x" << std::hex << id->oncs;
  EXPECT_TRUE(id->oncs & nvme::kOncsWriteZeroes) << "ONCS 0x" << std::hex << id->oncs;
  EXPECT_EQ(id->sgls & 0x3, 0x1u) << "SGLs must be supported on fabrics";
  EXPECT_FALSE(trimmed(id->sn, sizeof(id->sn)).empty());
  EXPECT_EQ(trimmed(id->mn, sizeof(id->mn)), "nvtcp");
  EXPECT_EQ(id->ver, ctrl->version());

  // CAP: MQES = 1023 (max queue depth 1024), CQR set, NVM command set, MPSMIN = 4 KiB.
  uint64_t cap = ctrl->cap();
  EXPECT_EQ(nvme::prop::cap_mqes(cap), 1023u);
  EXPECT_TRUE(cap & (1ull << 16)) << "CAP.CQR";
  EXPECT_TRUE(cap & (1ull << 37)) << "CAP.CSS NVM";
  EXPECT_EQ((cap >> 48) & 0xF, 0u) << "CAP.MPSMIN";
  EXPECT_GT(nvme::prop::cap_timeout_ms(cap), 0u) << "CAP.TO";
  // VS: 1.3 or later (we claim 2.0).
  uint32_t vs = ctrl->version();
  EXPECT_GE(vs, 0x00010300u) << std::hex << vs;
  EXPECT_EQ(vs, 0x00020000u) << std::hex << vs;
  EXPECT_EQ(ctrl->io_queues_granted(), 8u);

  EXPECT_EQ(ctrl->active_namespaces(), (std::vector<uint32_t>{1, 2, 3}));

  struct Want {
    uint32_t nsid;
    uint32_t bs;
    uint64_t bytes;
  };
  for (Want w : {Want{1, 512, 1ull << 30}, Want{2, 512, 64ull << 20}, Want{3, 4096, 64ull << 20}}) {
    host::NamespaceInfo ni;
    ASSERT_TRUE(ctrl->namespace_info(w.nsid, ni, err)) << err;
    EXPECT_EQ(ni.nsid, w.nsid);
    EXPECT_EQ(ni.block_size, w.bs) << "nsid " << w.nsid;
    EXPECT_EQ(ni.blocks, w.bytes / w.bs) << "nsid " << w.nsid;
    uint8_t zero[16] = {};
    EXPECT_NE(std::memcmp(ni.nguid, zero, 16), 0) << "nsid " << w.nsid << " has an all-zero NGUID";
  }
  host::NamespaceInfo none;
  EXPECT_FALSE(ctrl->namespace_info(99, none, err)) << "nsid 99 does not exist";

  // Namespace identification descriptors carry the same NGUID as Identify Namespace.
  host::NamespaceInfo ni2;
  ASSERT_TRUE(ctrl->namespace_info(2, ni2, err)) << err;
  alignas(8) uint8_t desc[nvme::kIdentifyLen];
  Completion c = ctrl->identify(uint8_t(nvme::Cns::NamespaceDescriptors), 2, desc);
  ASSERT_TRUE(c.status.ok()) << nvme::status_name(c.status);
  bool found_nguid = false;
  for (size_t off = 0; off + sizeof(nvme::NsIdDescriptorHeader) <= sizeof(desc);) {
    nvme::NsIdDescriptorHeader h;
    std::memcpy(&h, desc + off, sizeof(h));
    if (h.nidl == 0) break;
    if (h.nidt == nvme::kNidtNguid) {
      ASSERT_EQ(h.nidl, 16);
      found_nguid = std::memcmp(desc + off + sizeof(h), ni2.nguid, 16) == 0;
    }
    off += sizeof(h) + h.nidl;
  }
  EXPECT_TRUE(found_nguid) << "no matching NGUID descriptor for nsid 2";

  // The I/O queue pair knows the block sizes the controller reported.
  auto qp = ctrl->create_io_qpair(16, err);
  ASSERT_TRUE(qp) << err;
  EXPECT_EQ(qp->block_size(1), 512u);
  EXPECT_EQ(qp->block_size(2), 512u);
  EXPECT_EQ(qp->block_size(3), 4096u);
  EXPECT_EQ(qp->block_size(99), 0u);
  EXPECT_GE(qp->qid(), 1);
  EXPECT_EQ(qp->depth(), 16u);
}

// ---------------------------------------------------------------- 2. discovery

void check_discovery_log(const std::vector<uint8_t>& log, uint16_t port, const std::string& want_nqn,
                         bool want_present) {
  ASSERT_GE(log.size(), sizeof(nvme::DiscoveryLogHeader));
  nvme::DiscoveryLogHeader h;
  std::memcpy(&h, log.data(), sizeof(h));
  ASSERT_EQ(log.size(), sizeof(h) + h.numrec * sizeof(nvme::DiscoveryLogEntry)) << "numrec " << h.numrec;
  EXPECT_GE(h.genctr, 1u);
  int nvme = 0, current = 0;
  for (uint64_t i = 0; i < h.numrec; ++i) {
    nvme::DiscoveryLogEntry e;
    std::memcpy(&e, log.data() + sizeof(h) + i * sizeof(e), sizeof(e));
    std::string nqn = trimmed(e.subnqn, sizeof(e.subnqn));
    std::string svc = trimmed(e.trsvcid, sizeof(e.trsvcid));
    std::string addr = trimmed(e.traddr, sizeof(e.traddr));
    EXPECT_EQ(e.trtype, nvme::kTrtypeTcp) << "entry " << i;
    EXPECT_EQ(e.adrfam, nvme::kAdrfamIpv4) << "entry " << i;
    if (e.subtype == nvme::kSubtypeNvme && nqn == want_nqn) {
      ++nvme;
      EXPECT_EQ(svc, std::to_string(port));
      EXPECT_EQ(addr, "127.0.0.1");
      EXPECT_EQ(e.cntlid, wire::kDynamicCntlid);
    } else if (e.subtype == nvme::kSubtypeCurrentDiscovery) {
      ++current;
      EXPECT_EQ(nqn, nvme::kDiscoveryNqn);
      EXPECT_EQ(svc, std::to_string(port));
      EXPECT_EQ(addr, "127.0.0.1");
    }
  }
  EXPECT_EQ(nvme, want_present ? 1 : 0) << "subtype-2 entries for " << want_nqn;
  EXPECT_EQ(current, 1) << "subtype-3 (current discovery subsystem) entries";
  EXPECT_EQ(h.numrec, uint64_t(nvme + current)) << "one subsystem and one listener";
}

TEST(HostTarget, DiscoveryThroughListenerPort) {
  RunningTarget t;
  for (std::string subnqn : {std::string(), std::string(nvme::kDiscoveryNqn)}) {
    SCOPED_TRACE("subnqn '" + subnqn + "'");
    std::string err;
    auto disc = Controller::connect(t.trid(subnqn), ControllerOptions{}, err);
    ASSERT_TRUE(disc) << err;
    const auto* id = reinterpret_cast<const nvme::IdentifyController*>(disc->identify_data());
    EXPECT_EQ(id->cntrltype, nvme::kCntrlTypeDiscovery);
    EXPECT_EQ(trimmed(id->subnqn, sizeof(id->subnqn)), nvme::kDiscoveryNqn);
    std::vector<uint8_t> log;
    ASSERT_TRUE(disc->discovery_log(log, err)) << err;
    check_discovery_log(log, t.port(), kTestNqn, true);
    // A discovery controller has no I/O queues.
    auto qp = disc->create_io_qpair(8, err);
    EXPECT_FALSE(qp);
    EXPECT_FALSE(err.empty());
  }
}

// ---------------------------------------------------------------- 3. data integrity

enum class Digests { None, Header, Data, Both };

class DataIntegrity : public ::testing::TestWithParam<Digests> {
 protected:
  void SetUp() override {
    path_ = "/tmp/nvtcp-host-target-" + std::to_string(getpid()) + "-" + std::to_string(int(GetParam())) + ".img";
    std::filesystem::remove(path_);
  }
  void TearDown() override {
    target_.reset();
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  std::string path_;
  std::unique_ptr<RunningTarget> target_;
};

TEST_P(DataIntegrity, WriteThenReadBack) {
  const Digests d = GetParam();
  target_ = std::make_unique<RunningTarget>(default_config(path_));
  ControllerOptions o;
  o.io_queues = 4;
  o.hdgst = d == Digests::Header || d == Digests::Both;
  o.ddgst = d == Digests::Data || d == Digests::Both;
  std::string err;
  auto ctrl = Controller::connect(target_->trid(), o, err);
  ASSERT_TRUE(ctrl) << err;
  EXPECT_EQ(ctrl->active_namespaces(), (std::vector<uint32_t>{1, 2, 3, 4}));
  EXPECT_EQ(reinterpret_cast<const nvme::IdentifyController*>(ctrl->identify_data())->nn, target::kDefaultMaxNamespaces);
  auto qp = ctrl->create_io_qpair(32, err);
  ASSERT_TRUE(qp) << err;

  uint64_t file_check_lba = 0;
  std::vector<uint8_t> file_check_data;

  for (uint32_t nsid : {2u, 3u, 4u}) {
    const uint32_t bs = qp->block_size(nsid);
    ASSERT_EQ(bs, nsid == 3 ? 4096u : 512u);
    // One block, 4 KiB, exactly the in-capsule limit, just past it (R2T), MAXH2CDATA, one
    // block past it (two H2CData PDUs), MDTS.
    const std::vector<uint32_t> sizes = {bs, 4096, 8192, 8192 + bs, 128 * 1024, 128 * 1024 + bs, 1u << 20};

    // One at a time: each size written, read back, and the block after it still zero.
    uint64_t lba = 8;
    for (uint32_t size : sizes) {
      SCOPED_TRACE("nsid " + std::to_string(nsid) + " size " + std::to_string(size) + " lba " + std::to_string(lba));
      uint32_t nlb = size / bs;
      auto data = pattern(size, uint64_t(nsid) << 40 | uint64_t(size) << 8 | uint64_t(d));
      ASSERT_TRUE(Succeeded(do_write(*qp, nsid, lba, nlb, data.data())));
      std::vector<uint8_t> back(size, 0xA5);
      ASSERT_TRUE(Succeeded(do_read(*qp, nsid, lba, nlb, back.data())));
      EXPECT_EQ(first_mismatch(data, back), -1);
      std::vector<uint8_t> after(bs, 0xA5);
      ASSERT_TRUE(Succeeded(do_read(*qp, nsid, lba + nlb, 1, after.data())));
      EXPECT_TRUE(all_zero(after.data(), bs)) << "the write spilled into the next block";
      if (nsid == 4 && size == 4096) {
        file_check_lba = lba;
        file_check_data = data;
      }
      lba += nlb + 1;
    }

    // The very end of the namespace: the last 128 KiB + one block, and the last MiB.
    const uint64_t blocks = (64ull << 20) / bs;
    for (uint32_t size : {128 * 1024 + bs, 1u << 20}) {
      SCOPED_TRACE("nsid " + std::to_string(nsid) + " last " + std::to_string(size) + " bytes");
      uint32_t nlb = size / bs;
      auto data = pattern(size, 0xE4D ^ uint64_t(nsid) << 40 ^ size ^ uint64_t(d));
      ASSERT_TRUE(Succeeded(do_write(*qp, nsid, blocks - nlb, nlb, data.data())));
      std::vector<uint8_t> back(size, 0xA5);
      ASSERT_TRUE(Succeeded(do_read(*qp, nsid, blocks - nlb, nlb, back.data())));
      EXPECT_EQ(first_mismatch(data, back), -1);
    }

    // All sizes at once: several writes (in-capsule and R2T) in flight together, then
    // all the reads.
    SCOPED_TRACE("nsid " + std::to_string(nsid) + " concurrent");
    std::deque<Waiter> waits;
    std::vector<std::vector<uint8_t>> datas, backs;
    std::vector<uint64_t> lbas;
    for (uint32_t size : sizes) {
      lbas.push_back(lba);
      datas.push_back(pattern(size, 0xC0FFEE ^ (uint64_t(nsid) << 32) ^ size ^ uint64_t(d)));
      backs.emplace_back(size, 0x5A);
      lba += size / bs + 1;
    }
    auto drain = [&](const char* what) {
      auto deadline = Clock::now() + kOpTimeout;
      auto pending = [&] { return std::any_of(waits.begin(), waits.end(), [](const Waiter& w) { return !w.done; }); };
      while (pending() && Clock::now() < deadline) qp->process_completions(1000);
      if (pending()) {
        qp.reset();  // fails what is left while `waits` and the buffers still exist
        FAIL() << what << ": not every command completed in time";
      }
      for (size_t i = 0; i < waits.size(); ++i)
        EXPECT_TRUE(waits[i].cpl.status.ok()) << what << " " << i << ": " << nvme::status_name(waits[i].cpl.status);
    };
    for (size_t i = 0; i < sizes.size(); ++i) {
      waits.emplace_back();
      check_submitted(qp->write(nsid, lbas[i], sizes[i] / bs, datas[i].data(), on_done, &waits.back()), waits.back());
    }
    drain("writes");
    if (HasFatalFailure()) return;
    waits.clear();
    for (size_t i = 0; i < sizes.size(); ++i) {
      waits.emplace_back();
      check_submitted(qp->read(nsid, lbas[i], sizes[i] / bs, backs[i].data(), on_done, &waits.back()), waits.back());
    }
    drain("reads");
    if (HasFatalFailure()) return;
    for (size_t i = 0; i < sizes.size(); ++i) EXPECT_EQ(first_mismatch(datas[i], backs[i]), -1) << "size " << sizes[i];
  }

  // The file namespace really stored the bytes in the file.
  qp.reset();
  ctrl.reset();
  target_.reset();
  ASSERT_FALSE(file_check_data.empty());
  std::ifstream f(path_, std::ios::binary);
  ASSERT_TRUE(f) << path_;
  f.seekg(std::streamoff(file_check_lba * 512));
  std::vector<uint8_t> on_disk(file_check_data.size());
  f.read(reinterpret_cast<char*>(on_disk.data()), std::streamsize(on_disk.size()));
  ASSERT_EQ(f.gcount(), std::streamsize(on_disk.size()));
  EXPECT_EQ(first_mismatch(file_check_data, on_disk), -1) << "file contents at LBA " << file_check_lba;
}

INSTANTIATE_TEST_SUITE_P(HostTarget, DataIntegrity,
                         ::testing::Values(Digests::None, Digests::Header, Digests::Data, Digests::Both),
                         [](const ::testing::TestParamInfo<Digests>& i) {
                           switch (i.param) {
                             case Digests::None:
                               return std::string("NoDigests");
                             case Digests::Header:
                               return std::string("HeaderDigest");
                             case Digests::Data:
                               return std::string("DataDigest");
                             case Digests::Both:
                               return std::string("BothDigests");
                           }
                           return std::string("Unknown");
                         });

// ---------------------------------------------------------------- 4. null namespace

TEST(HostTarget, NullNamespaceReadsZerosAfterWrite) {
  RunningTarget t;
  std::string err;
  auto ctrl = Controller::connect(t.trid(), ControllerOptions{}, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(8, err);
  ASSERT_TRUE(qp) << err;
  ASSERT_EQ(qp->block_size(1), 512u);
  for (uint32_t size : {512u, 4096u, 8192u + 512u, 1u << 20}) {
    SCOPED_TRACE("size " + std::to_string(size));
    auto data = pattern(size, size);
    ASSERT_TRUE(Succeeded(do_write(*qp, 1, 64, size / 512, data.data())));
    std::vector<uint8_t> back(size, 0xFF);
    ASSERT_TRUE(Succeeded(do_read(*qp, 1, 64, size / 512, back.data())));
    EXPECT_TRUE(all_zero(back.data(), back.size()));
  }
  // The last block of the 1 GiB namespace reads too.
  std::vector<uint8_t> last(512, 0xFF);
  EXPECT_TRUE(Succeeded(do_read(*qp, 1, (1ull << 30) / 512 - 1, 1, last.data())));
  EXPECT_TRUE(all_zero(last.data(), last.size()));
}

// ---------------------------------------------------------------- 5. write zeroes / DSM / flush

TEST(HostTarget, WriteZeroesDeallocateAndFlush) {
  TempFile file("wz");
  RunningTarget t(default_config(file.path));
  std::string err;
  auto ctrl = Controller::connect(t.trid(), ControllerOptions{}, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(8, err);
  ASSERT_TRUE(qp) << err;

  // RAM at 512 and 4096-byte blocks, and the file namespace.
  for (uint32_t nsid : {2u, 3u, 4u}) {
    SCOPED_TRACE("nsid " + std::to_string(nsid));
    const uint32_t bs = qp->block_size(nsid);
    ASSERT_NE(bs, 0u);
    // Write Zeroes: blocks [100, 132) written, [108, 116) zeroed.
    const uint64_t base = 100;
    const uint32_t n = 32;
    auto data = pattern(size_t(n) * bs, 77 + nsid);
    ASSERT_TRUE(Succeeded(do_write(*qp, nsid, base, n, data.data())));
    ASSERT_TRUE(Succeeded(
        run_one(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->write_zeroes(nsid, base + 8, 8, cb, ctx); })));
    std::vector<uint8_t> back(size_t(n) * bs, 0xA5);
    ASSERT_TRUE(Succeeded(do_read(*qp, nsid, base, n, back.data())));
    for (uint32_t b = 0; b < n; ++b) {
      const uint8_t* got = back.data() + size_t(b) * bs;
      if (b >= 8 && b < 16) {
        EXPECT_TRUE(all_zero(got, bs)) << "block " << base + b << " should be zero after Write Zeroes";
      } else {
        EXPECT_EQ(std::memcmp(got, data.data() + size_t(b) * bs, bs), 0) << "block " << base + b << " changed";
      }
    }

    // Dataset Management (deallocate): blocks [200, 264) written, [210, 215) and
    // [230, 240) deallocated; a zero-length range is ignored.
    const uint64_t base2 = 200;
    const uint32_t n2 = 64;
    auto data2 = pattern(size_t(n2) * bs, 99 + nsid);
    ASSERT_TRUE(Succeeded(do_write(*qp, nsid, base2, n2, data2.data())));
    nvme::DsmRange ranges[3] = {};
    ranges[0].slba = 210;
    ranges[0].nlb = 5;
    ranges[1].slba = 250;
    ranges[1].nlb = 0;
    ranges[2].slba = 230;
    ranges[2].nlb = 10;
    ASSERT_TRUE(Succeeded(
        run_one(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->deallocate(nsid, ranges, 3, cb, ctx); })));
    std::vector<uint8_t> back2(size_t(n2) * bs, 0xA5);
    ASSERT_TRUE(Succeeded(do_read(*qp, nsid, base2, n2, back2.data())));
    for (uint32_t b = 0; b < n2; ++b) {
      uint64_t lba = base2 + b;
      bool gone = (lba >= 210 && lba < 215) || (lba >= 230 && lba < 240);
      const uint8_t* got = back2.data() + size_t(b) * bs;
      if (gone) {
        EXPECT_TRUE(all_zero(got, bs)) << "block " << lba << " should read zeros after deallocate";
      } else {
        EXPECT_EQ(std::memcmp(got, data2.data() + size_t(b) * bs, bs), 0) << "block " << lba << " changed";
      }
    }

    // Deallocate past the end is an error, and changes nothing.
    nvme::DsmRange bad{};
    bad.slba = (64ull << 20) / bs - 2;
    bad.nlb = 4;
    EXPECT_TRUE(HasStatus(
        run_one(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->deallocate(nsid, &bad, 1, cb, ctx); }),
        sc::LbaOutOfRange));

    ASSERT_TRUE(Succeeded(run_one(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->flush(nsid, cb, ctx); })));
  }
  // Flush of every namespace at once.
  EXPECT_TRUE(
      Succeeded(run_one(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->flush(0xFFFFFFFF, cb, ctx); })));
  EXPECT_TRUE(QueuePairWorks(*qp, 2, 5000, 1));
}

// A target with little in-capsule data for I/O (1 KiB, the Connect data's size) and the
// smallest MAXH2CDATA (4 KiB): most writes and a long DSM range list go through R2T, big
// writes in many H2CData PDUs.
TEST(HostTarget, SmallInCapsuleDataAndSmallMaxH2CData) {
  TempFile file("small-h2c");
  auto cfg = default_config(file.path);
  cfg.in_capsule_data = 1024;
  cfg.max_h2c_data = 4096;
  RunningTarget t(cfg);
  std::string err;
  ControllerOptions o;
  o.io_queues = 2;
  o.hdgst = o.ddgst = true;
  auto ctrl = Controller::connect(t.trid(), o, err);
  ASSERT_TRUE(ctrl) << err;
  EXPECT_EQ(reinterpret_cast<const nvme::IdentifyController*>(ctrl->identify_data())->ioccsz, (64u + 1024u) / 16);
  auto qp = ctrl->create_io_qpair(16, err);
  ASSERT_TRUE(qp) << err;
  for (uint32_t nsid : {2u, 3u, 4u}) {
    const uint32_t bs = qp->block_size(nsid);
    uint64_t lba = 0;
    for (uint32_t size : {bs, 1024u + bs, 4096u + bs, 64u * 1024 + bs, 1u << 20}) {
      if (size % bs) continue;
      SCOPED_TRACE("nsid " + std::to_string(nsid) + " size " + std::to_string(size));
      uint32_t nlb = size / bs;
      auto data = pattern(size, uint64_t(nsid) << 32 | size);
      ASSERT_TRUE(Succeeded(do_write(*qp, nsid, lba, nlb, data.data())));
      std::vector<uint8_t> back(size, 0xA5);
      ASSERT_TRUE(Succeeded(do_read(*qp, nsid, lba, nlb, back.data())));
      EXPECT_EQ(first_mismatch(data, back), -1);
      lba += nlb;
    }
    // Dataset Management with 100 ranges (1600 bytes, over the in-capsule limit): the
    // range list arrives by R2T. Ranges 0..98 are empty; the last deallocates LBAs 1-2.
    std::vector<nvme::DsmRange> ranges(100);
    ranges[99].slba = 1;
    ranges[99].nlb = 2;
    ASSERT_TRUE(Succeeded(run_one(
        *qp, [&](host::CompletionFn cb, void* ctx) { return qp->deallocate(nsid, ranges.data(), 100, cb, ctx); })));
    std::vector<uint8_t> back(size_t(4) * bs, 0xA5);
    ASSERT_TRUE(Succeeded(do_read(*qp, nsid, 0, 4, back.data())));
    auto first = pattern(bs, uint64_t(nsid) << 32 | bs);  // LBA 0 still holds the first write
    EXPECT_EQ(std::memcmp(back.data(), first.data(), bs), 0) << "nsid " << nsid << " LBA 0 changed";
    EXPECT_TRUE(all_zero(back.data() + bs, 2 * bs)) << "nsid " << nsid << " LBAs 1-2 not deallocated";
  }
}

// IOCCSZ may be as small as 4 (no in-capsule data on I/O queues: `nvtcp target
// --in-capsule 0`). The Connect of an I/O queue still carries 1 KiB of data, which goes
// in the capsule (fabrics commands: up to 8 KiB, whatever IOCCSZ says) or by R2T; either
// way our host must be able to create I/O queues on such a target.
TEST(HostTarget, IoQueueConnectWhenIoccszIsSmallerThanConnectData) {
  for (uint32_t in_capsule : {0u, 512u}) {
    SCOPED_TRACE("in_capsule_data " + std::to_string(in_capsule));
    auto cfg = default_config();
    cfg.in_capsule_data = in_capsule;
    RunningTarget t(cfg);
    std::string err;
    ControllerOptions o;
    o.io_queues = 1;
    auto ctrl = Controller::connect(t.trid(), o, err);
    ASSERT_TRUE(ctrl) << err;
    EXPECT_EQ(reinterpret_cast<const nvme::IdentifyController*>(ctrl->identify_data())->ioccsz,
              (64u + in_capsule) / 16);
    auto qp = ctrl->create_io_qpair(8, err);
    EXPECT_TRUE(qp) << "I/O queue Connect failed: " << err;
    if (!qp) continue;  // report the other size too
    EXPECT_TRUE(QueuePairWorks(*qp, 2, 3, 3));
    auto data = pattern(8192, 8);  // more than the in-capsule limit: R2T
    ASSERT_TRUE(Succeeded(do_write(*qp, 2, 100, 16, data.data())));
    std::vector<uint8_t> back(8192, 0xA5);
    ASSERT_TRUE(Succeeded(do_read(*qp, 2, 100, 16, back.data())));
    EXPECT_EQ(first_mismatch(data, back), -1);
  }
}

// ---------------------------------------------------------------- 6. errors as statuses

nvme::Sqe rw_sqe(uint8_t opc, uint32_t nsid, uint64_t slba, uint32_t nlb) {
  return wire::cmd::block_range(nvme::IoOpcode(opc), nsid, slba, nlb);
}

TEST(HostTarget, ErrorsAreNvmeStatusesAndQueueSurvives) {
  RunningTarget t;
  std::string err;
  auto ctrl = Controller::connect(t.trid(), ControllerOptions{}, err);
  ASSERT_TRUE(ctrl) << err;
  auto qp = ctrl->create_io_qpair(16, err);
  ASSERT_TRUE(qp) << err;
  const uint64_t blocks2 = (64ull << 20) / 512;
  const uint64_t blocks3 = (64ull << 20) / 4096;
  uint64_t seed = 1000;
  std::vector<uint8_t> buf(1u << 20, 0);
  const uint8_t kRead = uint8_t(nvme::IoOpcode::Read), kWrite = uint8_t(nvme::IoOpcode::Write);

  {
    SCOPED_TRACE("read past the end");
    EXPECT_TRUE(HasStatus(do_read(*qp, 2, blocks2 - 1, 2, buf.data()), sc::LbaOutOfRange));
    EXPECT_TRUE(QueuePairWorks(*qp, 2, 10, ++seed));
  }
  {
    SCOPED_TRACE("read starting past the end");
    EXPECT_TRUE(HasStatus(do_read(*qp, 3, blocks3, 1, buf.data()), sc::LbaOutOfRange));
    EXPECT_TRUE(QueuePairWorks(*qp, 3, 10, ++seed));
  }
  {
    SCOPED_TRACE("in-capsule write past the end");
    EXPECT_TRUE(HasStatus(do_write(*qp, 2, blocks2 - 1, 2, buf.data()), sc::LbaOutOfRange));
    EXPECT_TRUE(QueuePairWorks(*qp, 2, 11, ++seed));
  }
  {
    SCOPED_TRACE("R2T write past the end");
    EXPECT_TRUE(HasStatus(do_write(*qp, 2, blocks2 - 8, 64, buf.data()), sc::LbaOutOfRange));
    EXPECT_TRUE(QueuePairWorks(*qp, 2, 12, ++seed));
  }
  {
    SCOPED_TRACE("write zeroes past the end");
    EXPECT_TRUE(HasStatus(
        run_one(*qp, [&](host::CompletionFn cb, void* ctx) { return qp->write_zeroes(2, blocks2 - 1, 2, cb, ctx); }),
        sc::LbaOutOfRange));
    EXPECT_TRUE(QueuePairWorks(*qp, 2, 13, ++seed));
  }
  {
    SCOPED_TRACE("read on nsid 99");
    EXPECT_TRUE(HasStatus(do_raw(*qp, rw_sqe(kRead, 99, 0, 1), buf.data(), 512, false), sc::InvalidNamespace));
    EXPECT_TRUE(QueuePairWorks(*qp, 2, 14, ++seed));
  }
  {
    SCOPED_TRACE("write on nsid 99 (in-capsule)");
    EXPECT_TRUE(HasStatus(do_raw(*qp, rw_sqe(kWrite, 99, 0, 1), buf.data(), 512, true), sc::InvalidNamespace));
    EXPECT_TRUE(QueuePairWorks(*qp, 2, 15, ++seed));
  }
  {
    SCOPED_TRACE("unknown I/O opcode 0x7E");
    nvme::Sqe s{};
    s.opc = 0x7E;
    s.nsid = 2;
    EXPECT_TRUE(HasStatus(do_raw(*qp, s, nullptr, 0, false), sc::InvalidOpcode));
    EXPECT_TRUE(QueuePairWorks(*qp, 2, 16, ++seed));
  }
  {
    SCOPED_TRACE("read: SGL length 1024 but NLB x block size 512");
    EXPECT_TRUE(HasStatus(do_raw(*qp, rw_sqe(kRead, 2, 20, 1), buf.data(), 1024, false), sc::DataSglLengthInvalid));
    EXPECT_TRUE(QueuePairWorks(*qp, 2, 17, ++seed));
  }
  {
    SCOPED_TRACE("read: SGL length 4096 but NLB x block size 8192 (4 KiB blocks)");
    EXPECT_TRUE(HasStatus(do_raw(*qp, rw_sqe(kRead, 3, 20, 2), buf.data(), 4096, false), sc::DataSglLengthInvalid));
    EXPECT_TRUE(QueuePairWorks(*qp, 3, 17, ++seed));
  }
  {
    SCOPED_TRACE("in-capsule write: 1024 bytes for one 512-byte block");
    EXPECT_TRUE(HasStatus(do_raw(*qp, rw_sqe(kWrite, 2, 21, 1), buf.data(), 1024, true), sc::DataSglLengthInvalid));
    EXPECT_TRUE(QueuePairWorks(*qp, 2, 18, ++seed));
  }
  {
    SCOPED_TRACE("R2T write: 16 KiB for one 512-byte block");
    EXPECT_TRUE(HasStatus(do_raw(*qp, rw_sqe(kWrite, 2, 22, 1), buf.data(), 16384, true), sc::DataSglLengthInvalid));
    EXPECT_TRUE(QueuePairWorks(*qp, 2, 19, ++seed));
  }
  {
    SCOPED_TRACE("read larger than MDTS (4096 blocks = 2 MiB) with a 512-byte SGL");
    EXPECT_TRUE(HasStatus(do_raw(*qp, rw_sqe(kRead, 2, 0, 4096), buf.data(), 512, false), sc::InvalidField));
    EXPECT_TRUE(QueuePairWorks(*qp, 2, 20, ++seed));
  }
  {
    // Until issue 15 the host refused this with -EINVAL; it now splits it at MDTS, as the
    // Linux block layer does (HostSplit.* tests the splitting itself).
    SCOPED_TRACE("the host splits a transfer over MDTS into commands the target takes");
    std::vector<uint8_t> two_mib(2u << 20);
    EXPECT_TRUE(HasStatus(do_read(*qp, 2, 0, 4096, two_mib.data()), sc::Success));
    EXPECT_EQ(qp->read(99, 0, 1, buf.data(), on_done, nullptr), -EINVAL) << "no block size for nsid 99";
  }
  EXPECT_FALSE(qp->failed());
  EXPECT_EQ(qp->outstanding(), 0u);
  EXPECT_FALSE(ctrl->failed());
}

// ---------------------------------------------------------------- 7. 64 queue pairs

// With one target reactor, and with two (the I/O queues then live on other threads than
// the admin queue that created their controller).
class SixtyFourQueuePairs : public ::testing::TestWithParam<unsigned> {};

TEST_P(SixtyFourQueuePairs, OnOneController) {
  auto cfg = default_config();
  cfg.cores = GetParam();
  RunningTarget t(cfg);
  std::string err;
  ControllerOptions o;
  o.io_queues = 64;
  auto ctrl = Controller::connect(t.trid(), o, err);
  ASSERT_TRUE(ctrl) << err;
  ASSERT_EQ(ctrl->io_queues_granted(), 64u);

  constexpr int kQueues = 64, kPerQueue = 4;
  constexpr uint32_t kNlb = 8;  // 4 KiB on nsid 2
  std::vector<std::unique_ptr<QueuePair>> qps;
  std::set<uint16_t> qids;
  for (int i = 0; i < kQueues; ++i) {
    auto qp = ctrl->create_io_qpair(8, err);
    ASSERT_TRUE(qp) << "queue pair " << i << ": " << err;
    qids.insert(qp->qid());
    qps.push_back(std::move(qp));
  }
  EXPECT_EQ(qids.size(), size_t(kQueues));
  EXPECT_EQ(*qids.begin(), 1);
  EXPECT_EQ(*qids.rbegin(), kQueues);
  // Every granted queue is in use: a 65th is refused by the host.
  EXPECT_FALSE(ctrl->create_io_qpair(8, err));

  auto lba_of = [](int q, int j) { return uint64_t(q * kPerQueue + j) * kNlb * 2; };
  std::vector<std::vector<uint8_t>> datas, backs;
  std::deque<Waiter> waits;
  for (int q = 0; q < kQueues; ++q) {
    for (int j = 0; j < kPerQueue; ++j) {
      datas.push_back(pattern(kNlb * 512, uint64_t(q) << 16 | uint64_t(j)));
      backs.emplace_back(kNlb * 512, 0xA5);
    }
  }
  auto drain = [&](const char* what) {
    auto deadline = Clock::now() + kOpTimeout;
    auto pending = [&] { return std::any_of(waits.begin(), waits.end(), [](const Waiter& w) { return !w.done; }); };
    while (pending() && Clock::now() < deadline) {
      for (auto& qp : qps) qp->process_completions(0);
      qps[0]->process_completions(500);
    }
    if (pending()) {
      qps.clear();  // fails what is left while `waits` and the buffers still exist
      FAIL() << what << ": not every command completed in time";
    }
    for (size_t i = 0; i < waits.size(); ++i)
      EXPECT_TRUE(waits[i].cpl.status.ok()) << what << " " << i << ": " << nvme::status_name(waits[i].cpl.status);
  };
  for (int q = 0; q < kQueues; ++q)
    for (int j = 0; j < kPerQueue; ++j) {
      waits.emplace_back();
      check_submitted(qps[q]->write(2, lba_of(q, j), kNlb, datas[q * kPerQueue + j].data(), on_done, &waits.back()),
                      waits.back());
    }
  drain("writes");
  if (HasFatalFailure()) return;
  waits.clear();
  for (int q = 0; q < kQueues; ++q)
    for (int j = 0; j < kPerQueue; ++j) {
      waits.emplace_back();
      check_submitted(qps[q]->read(2, lba_of(q, j), kNlb, backs[q * kPerQueue + j].data(), on_done, &waits.back()),
                      waits.back());
    }
  drain("reads");
  if (HasFatalFailure()) return;
  for (size_t i = 0; i < datas.size(); ++i)
    EXPECT_EQ(first_mismatch(datas[i], backs[i]), -1) << "queue " << i / kPerQueue << " I/O " << i % kPerQueue;
  for (auto& qp : qps) EXPECT_FALSE(qp->failed()) << "qid " << qp->qid();

  // A queue id comes back when its queue pair goes away.
  qps.pop_back();
  auto again = ctrl->create_io_qpair(8, err);
  ASSERT_TRUE(again) << err;
  EXPECT_TRUE(QueuePairWorks(*again, 2, 60000, 64));
}

INSTANTIATE_TEST_SUITE_P(HostTarget, SixtyFourQueuePairs, ::testing::Values(1u, 2u),
                         [](const ::testing::TestParamInfo<unsigned>& i) {
                           return std::to_string(i.param) + "TargetReactors";
                         });

// A queue pair holds at most its depth of commands; one more is refused with -EBUSY, and
// every accepted command still completes.
TEST(HostTarget, FullQueueRefusesWithEbusy) {
  RunningTarget t;
  std::string err;
  auto ctrl = Controller::connect(t.trid(), ControllerOptions{}, err);
  ASSERT_TRUE(ctrl) << err;
  constexpr uint32_t kDepth = 4;
  // Declared before the queue pair, so they outlive it whatever happens.
  std::vector<std::vector<uint8_t>> bufs(kDepth + 1, std::vector<uint8_t>(128 * 1024));
  std::deque<Waiter> waits(kDepth + 1);
  auto qp = ctrl->create_io_qpair(kDepth, err);
  ASSERT_TRUE(qp) << err;
  for (uint32_t i = 0; i < kDepth; ++i)
    ASSERT_EQ(qp->write(2, i * 256, 256, bufs[i].data(), on_done, &waits[i]), 0) << "command " << i;
  EXPECT_EQ(qp->outstanding(), kDepth);
  EXPECT_EQ(qp->write(2, 4096, 256, bufs[kDepth].data(), on_done, &waits[kDepth]), -EBUSY);
  auto deadline = Clock::now() + kOpTimeout;
  while (qp->outstanding() > 0 && Clock::now() < deadline) qp->process_completions(1000);
  ASSERT_EQ(qp->outstanding(), 0u);
  for (uint32_t i = 0; i < kDepth; ++i) {
    EXPECT_TRUE(waits[i].done);
    EXPECT_TRUE(waits[i].cpl.status.ok()) << nvme::status_name(waits[i].cpl.status);
  }
  EXPECT_FALSE(waits[kDepth].done) << "a refused command must not complete";
  EXPECT_TRUE(QueuePairWorks(*qp, 2, 8000, 9));
}

// ---------------------------------------------------------------- 8. connect rejections

TEST(HostTarget, ConnectToUnknownNqnFails) {
  RunningTarget t;
  std::string err;
  auto ctrl = Controller::connect(t.trid("nqn.2026-11.io.nvtcp:no-such-subsystem"), ControllerOptions{}, err);
  EXPECT_FALSE(ctrl);
  EXPECT_FALSE(err.empty());
  EXPECT_NE(err.find("Connect Invalid Parameters"), std::string::npos) << err;
  // The target keeps serving others.
  auto ok = Controller::connect(t.trid(), ControllerOptions{}, err);
  ASSERT_TRUE(ok) << err;
}

TEST(HostTarget, HostAllowList) {
  const std::string nqn = "nqn.2026-11.io.nvtcp:restricted";
  const std::string allowed = "nqn.2026-11.io.nvtcp:allowed";
  target::TargetConfig cfg;
  cfg.listeners.push_back({"127.0.0.1", 0});
  cfg.discovery_port = 0;
  target::SubsystemConfig s;
  s.nqn = nqn;
  s.allow_any_host = false;
  s.hosts = {allowed};
  s.namespaces.push_back({1, "ram", 16ull << 20, "", 512});
  cfg.subsystems.push_back(s);
  RunningTarget t(cfg);

  std::string err;
  ControllerOptions other;
  other.hostnqn = "nqn.2026-11.io.nvtcp:intruder";
  auto bad = Controller::connect(t.trid(nqn), other, err);
  EXPECT_FALSE(bad);
  EXPECT_NE(err.find("Connect Invalid Host"), std::string::npos) << err;

  // A host NQN given in the transport ID is used too.
  auto trid_bad = t.trid(nqn);
  trid_bad.hostnqn = "nqn.2026-11.io.nvtcp:also-not-allowed";
  err.clear();
  EXPECT_FALSE(Controller::connect(trid_bad, ControllerOptions{}, err));
  EXPECT_FALSE(err.empty());

  // A default (uuid) host NQN is not on the list either.
  err.clear();
  EXPECT_FALSE(Controller::connect(t.trid(nqn), ControllerOptions{}, err));
  EXPECT_FALSE(err.empty());

  // The discovery log hides the subsystem from a host that may not use it...
  {
    auto disc = Controller::connect(t.trid(""), other, err);
    ASSERT_TRUE(disc) << err;
    std::vector<uint8_t> log;
    ASSERT_TRUE(disc->discovery_log(log, err)) << err;
    check_discovery_log(log, t.port(), nqn, false);
  }
  // ...and shows it to the allowed one.
  ControllerOptions good;
  good.hostnqn = allowed;
  {
    auto disc = Controller::connect(t.trid(""), good, err);
    ASSERT_TRUE(disc) << err;
    std::vector<uint8_t> log;
    ASSERT_TRUE(disc->discovery_log(log, err)) << err;
    check_discovery_log(log, t.port(), nqn, true);
  }

  auto ctrl = Controller::connect(t.trid(nqn), good, err);
  ASSERT_TRUE(ctrl) << err;
  EXPECT_EQ(ctrl->hostnqn(), allowed);
  auto qp = ctrl->create_io_qpair(8, err);
  ASSERT_TRUE(qp) << err;
  EXPECT_TRUE(QueuePairWorks(*qp, 1, 7, 7));
}

// ---------------------------------------------------------------- 9. keep-alive

TEST(HostTarget, KeepAliveKeepsIdleControllerAndTeardownRemovesIt) {
  RunningTarget t;
  auto& subsys = *t.target().state().subsystems()[0];
  EXPECT_EQ(subsys.controller_count(), 0u);
  std::string err;
  ControllerOptions o;
  // A Keep Alive every 250 ms against a KATO of 2 s: on a loaded machine either side's thread may
  // be kept off a CPU for a while, and only a stall of 1.75 s would fail this. (With the default
  // interval of KATO/2, 1 s of 2 s, the first run under a parallel build did fail.)
  o.kato_ms = 2000;
  o.keep_alive_interval_ms = 250;
  o.io_queues = 2;
  auto ctrl = Controller::connect(t.trid(), o, err);
  ASSERT_TRUE(ctrl) << err;
  EXPECT_EQ(subsys.controller_count(), 1u);

  // The target took the timeout the host asked for.
  nvme::Sqe gf{};
  gf.opc = uint8_t(nvme::AdminOpcode::GetFeatures);
  gf.cdw10 = 0x0F;  // Keep Alive Timer
  Completion c = ctrl->admin(gf, nullptr, 0, false);
  ASSERT_TRUE(c.status.ok()) << nvme::status_name(c.status);
  EXPECT_EQ(c.dw0, 2000u);

  auto qp = ctrl->create_io_qpair(8, err);
  ASSERT_TRUE(qp) << err;
  ASSERT_TRUE(QueuePairWorks(*qp, 2, 1, 1));

  // Two and a half keep-alive timeouts of idling: only the host's Keep Alive keeps it alive. Real
  // time on purpose: two real timers, the host's and the target's, must agree. Each side's logic
  // is unit-tested on a stepped clock (HostTiming.KeepAliveInterval, connection_deadlines_test.cpp).
  std::this_thread::sleep_for(std::chrono::seconds(5));
  EXPECT_FALSE(ctrl->failed());
  EXPECT_FALSE(qp->failed());
  EXPECT_EQ(subsys.controller_count(), 1u);
  EXPECT_TRUE(QueuePairWorks(*qp, 2, 2, 2));
  c = ctrl->admin(gf, nullptr, 0, false);
  EXPECT_TRUE(c.status.ok()) << nvme::status_name(c.status);

  // The host goes away: the target forgets the controller.
  qp.reset();
  ctrl.reset();
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (subsys.controller_count() != 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(subsys.controller_count(), 0u);
}

// ---------------------------------------------------------------- 10. two processes

class ChildProcess {
 public:
  bool spawn(const std::vector<std::string>& args, std::string& err) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    int rc = posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ);
    if (rc != 0) {
      err = std::string("posix_spawn: ") + strerror(rc);
      pid_ = -1;
      return false;
    }
    return true;
  }
  // Non-blocking: true (and status) once the child has exited.
  bool exited(int& status) {
    if (pid_ < 0) return true;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return true;
    }
    return false;
  }
  bool wait_for(int& status, std::chrono::milliseconds limit) {
    auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      if (exited(status)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return exited(status);
  }
  void signal(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }
  ~ChildProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

 private:
  pid_t pid_ = -1;
};

TEST(HostTarget, TwoProcessesCliTargetAndPerf) {
  const std::string nqn = "nqn.2026-11.io.nvtcp:twoproc";
  const std::string ready = "/tmp/nvtcp-host-target-ready-" + std::to_string(getpid());
  std::filesystem::remove(ready);
  struct RemoveFile {
    std::string p;
    ~RemoveFile() {
      std::error_code ec;
      std::filesystem::remove(p, ec);
    }
  } remove_ready{ready};

  ChildProcess child;
  std::string err;
  ASSERT_TRUE(child.spawn({NVTCP_BINARY, "target", "--null", "64M", "--ram", "64M", "--listen", "127.0.0.1:0",
                           "--discovery-port", "0", "--nqn", nqn, "--ready-file", ready},
                          err))
      << err;

  // The ready file holds the port, newline-terminated once complete.
  uint16_t port = 0;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < deadline) {
    int status = 0;
    ASSERT_FALSE(child.exited(status)) << "nvtcp target exited early, wait status " << status;
    std::ifstream f(ready);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (!text.empty() && text.back() == '\n') {
      port = uint16_t(std::stoul(text));
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_NE(port, 0) << "no ready file within 10 s";

  host::TransportId trid;
  trid.traddr = "127.0.0.1";
  trid.trsvcid = port;
  trid.subnqn = nqn;
  {
    auto ctrl = Controller::connect(trid, ControllerOptions{}, err);
    ASSERT_TRUE(ctrl) << err;
    EXPECT_EQ(ctrl->active_namespaces(), (std::vector<uint32_t>{1, 2}));
    auto qp = ctrl->create_io_qpair(16, err);
    ASSERT_TRUE(qp) << err;
    ASSERT_EQ(qp->block_size(2), 512u);
    for (uint32_t size : {4096u, 8192u + 512u, 1u << 20}) {
      SCOPED_TRACE("size " + std::to_string(size));
      auto data = pattern(size, size * 3);
      ASSERT_TRUE(Succeeded(do_write(*qp, 2, 4096, size / 512, data.data())));
      std::vector<uint8_t> back(size, 0xA5);
      ASSERT_TRUE(Succeeded(do_read(*qp, 2, 4096, size / 512, back.data())));
      EXPECT_EQ(first_mismatch(data, back), -1);
    }
  }

  // nvtcp perf against the same target, with verification.
  std::string cmd = std::string(NVTCP_BINARY) +
                    " perf -r \"trtype:tcp traddr:127.0.0.1 trsvcid:" + std::to_string(port) + " subnqn:" + nqn +
                    " ns:2\" -q 8 -o 4096 -w randrw -t 1 --verify --json";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr) << cmd;
  std::string out;
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof(chunk), p)) > 0) out.append(chunk, n);
  int prc = pclose(p);
  EXPECT_TRUE(WIFEXITED(prc) && WEXITSTATUS(prc) == 0) << cmd << "\nwait status " << prc << "\n" << out;
  std::string json_line;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line.front() == '{') json_line = line;
  ASSERT_FALSE(json_line.empty()) << "no JSON object in perf output:\n" << out;
  nlohmann::json j = nlohmann::json::parse(json_line, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << json_line;
  ASSERT_TRUE(j.contains("iops")) << json_line;
  ASSERT_TRUE(j.contains("verify_failures")) << json_line;
  EXPECT_GT(j["iops"].get<double>(), 0.0) << json_line;
  EXPECT_EQ(j["verify_failures"].get<uint64_t>(), 0u) << json_line;
  EXPECT_EQ(j.value("errors", uint64_t(1)), 0u) << json_line;
  EXPECT_GT(j.value("writes", uint64_t(0)), 0u) << json_line;
  EXPECT_GT(j.value("reads", uint64_t(0)), 0u) << json_line;

  // SIGTERM: the target shuts down cleanly and exits 0.
  child.signal(SIGTERM);
  int status = 0;
  ASSERT_TRUE(child.wait_for(status, std::chrono::seconds(10))) << "nvtcp target did not exit within 10 s of SIGTERM";
  EXPECT_TRUE(WIFEXITED(status)) << "wait status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace nvtcp::test::host_target_test
