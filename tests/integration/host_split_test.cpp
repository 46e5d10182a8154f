// SPDX-License-Identifier: Apache-2.0
// Reads and writes larger than the controller's MDTS (128 KiB here, SPDK's default): the host
// library sends them as several commands and completes the caller's request once, as the
// Linux block layer and SPDK's driver do.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "nvtcp/host.hpp"
#include "test_target.hpp"

namespace nvtcp::test::host_split_test {
namespace {

namespace sc = nvme::sc;
constexpr uint32_t kMdts = 128u << 10;

class HostSplit : public ::testing::Test {
 protected:
  void SetUp() override {
    target::TargetConfig cfg = default_config();
    cfg.mdts_bytes = kMdts;
    t_ = std::make_unique<RunningTarget>(cfg);
    std::string err;
    ctrl_ = host::Controller::connect(t_->trid(), {}, err);
    ASSERT_TRUE(ctrl_) << err;
    ASSERT_EQ(ctrl_->max_transfer_bytes(), kMdts);
    qp_ = ctrl_->create_io_qpair(32, err);
    ASSERT_TRUE(qp_) << err;
  }
  // Counts completions of the caller's requests (not of the commands they became).
  using Calls = CompletionCounter;
  static constexpr auto count = &CompletionCounter::cb;
  void drive(const Calls& calls, int want) {
    // Bounded by time, not by calls: a spinning reactor's turn returns at once.
    wait_for([&] {
      qp_->process_completions(1000);
      return calls.done >= want;
    }, 10000);
  }

  std::unique_ptr<RunningTarget> t_;
  std::unique_ptr<host::Controller> ctrl_;
  std::unique_ptr<host::QueuePair> qp_;
};

TEST_F(HostSplit, OneMebibyteIsEightCommandsAndOneCompletion) {
  const std::vector<uint8_t> data = pattern(1u << 20, 7);
  const uint64_t ios = t_->target().io_count(), fua = t_->target().fua_write_count();
  Calls w;
  ASSERT_EQ(qp_->write(kRamNsid, 1000, 2048, data.data(), count, &w, host::WriteFlags{true}), 0);
  drive(w, 1);
  ASSERT_EQ(w.done, 1);
  EXPECT_TRUE(w.st.ok()) << nvme::status_name(w.st);
  EXPECT_EQ(t_->target().io_count() - ios, 8u) << "1 MiB in 128 KiB commands";
  EXPECT_EQ(t_->target().fua_write_count() - fua, 8u) << "FUA on every part";

  std::vector<uint8_t> back(1u << 20);
  Calls r;
  ASSERT_EQ(qp_->read(kRamNsid, 1000, 2048, back.data(), count, &r), 0);
  drive(r, 1);
  ASSERT_EQ(r.done, 1);
  EXPECT_TRUE(r.st.ok());
  EXPECT_EQ(back, data);
  // An odd size: 300 KiB is 128 + 128 + 44.
  std::vector<uint8_t> odd(300u << 10);
  Calls o;
  ASSERT_EQ(qp_->read(kRamNsid, 1000, 600, odd.data(), count, &o), 0);
  drive(o, 1);
  EXPECT_TRUE(o.st.ok());
  EXPECT_TRUE(std::equal(odd.begin(), odd.end(), data.begin()));
  EXPECT_EQ(qp_->outstanding(), 0u);
}

TEST_F(HostSplit, APartThatFailsFailsTheRequestOnce) {
  const uint64_t blocks = (64ull << 20) / 512;
  std::vector<uint8_t> buf(1u << 20);
  Calls r;
  // The last parts run past the end of the namespace.
  ASSERT_EQ(qp_->read(kRamNsid, blocks - 1000, 2048, buf.data(), count, &r), 0);
  drive(r, 1);
  for (int i = 0; i < 50; ++i) qp_->process_completions(1000);  // no second call comes
  ASSERT_EQ(r.done, 1);
  EXPECT_EQ(r.st, sc::LbaOutOfRange);
  EXPECT_FALSE(qp_->failed());
}

TEST_F(HostSplit, MoreSlotsThanTheQueueHasIsRefused) {
  std::string err;
  auto small = ctrl_->create_io_qpair(4, err);
  ASSERT_TRUE(small) << err;
  std::vector<uint8_t> buf(1u << 20);
  Calls r;
  EXPECT_EQ(small->read(kRamNsid, 0, 2048, buf.data(), count, &r), -EINVAL) << "8 parts never fit in 4 slots";
  EXPECT_EQ(small->read(kRamNsid, 0, 1024, buf.data(), count, &r), 0) << "4 parts do";
  // The queue is full now: the next split waits for room.
  EXPECT_EQ(small->read(kRamNsid, 0, 512, buf.data(), count, &r), -EBUSY);
  wait_for([&] {
    small->process_completions(1000);
    return r.done >= 1;
  }, 10000);
  EXPECT_EQ(r.done, 1);
  EXPECT_TRUE(r.st.ok());
}

}  // namespace
}  // namespace nvtcp::test::host_split_test
