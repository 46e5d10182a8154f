// SPDX-License-Identifier: Apache-2.0
// The file backend's durability, on its own reactor: which requests it syncs, that a sync
// completes before the request does, and what a file on tmpfs reports.
#include <gtest/gtest.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <linux/magic.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend/block_device.hpp"
#include "reactor/reactor.hpp"

namespace nvtcp::backend::file_device_test {
namespace {

bool on_tmpfs(const std::string& dir) {
  struct statfs fs{};
  return statfs(dir.c_str(), &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC);
}

std::string dir_where(bool tmpfs) {
  for (const std::string& d : std::vector<std::string>{"/dev/shm", "/run", "/var/tmp", "/tmp",
                                                       std::filesystem::current_path().string()}) {
    if (access(d.c_str(), W_OK) == 0 && on_tmpfs(d) == tmpfs) return d;
  }
  return {};
}

struct Trace;

struct Request {
  BlockIo io;
  uintptr_t n = 0;  // the request's name in the trace
  bool done = false;
  nvme::Status status;
  Trace* trace = nullptr;
};

// Records, in one sequence, each sync the device reports and each request's completion.
struct Trace : SyncObserver {
  std::vector<std::string> events;
  void on_sync_complete(const BlockIo& io) override { events.push_back("sync:" + name(io)); }
  static std::string name(const BlockIo& io) { return std::to_string(static_cast<const Request*>(io.user)->n); }
};

class FileDeviceTest : public ::testing::Test {
 protected:
  void open_in(const std::string& dir) {
    path_ = dir + "/nvtcp-file-device-" + std::to_string(getpid()) + ".img";
    std::string err;
    dev_ = make_file(path_, 1 << 20, 512, err);
    ASSERT_TRUE(dev_) << err;
    dev_->set_sync_observer(&trace_);
  }
  // (persistence, volatile write cache, write cache enabled) of the device, as one value.
  std::tuple<Persistence, bool, bool> cache() const {
    return {dev_->persistence(), dev_->volatile_write_cache(), dev_->write_cache_enabled()};
  }
  void TearDown() override {
    dev_.reset();
    if (!path_.empty()) std::remove(path_.c_str());
  }

  // Runs one request to completion; the trace gets "done:<n>" when it completes.
  nvme::Status run(BlockIo::Op op, uint64_t offset, uint64_t length, bool fua, uintptr_t n) {
    auto req = std::make_unique<Request>();
    req->trace = &trace_;
    req->io.op = op;
    req->io.offset = offset;
    req->io.length = length;
    req->io.fua = fua;
    req->io.buffer = buf_.data();
    req->n = n;
    req->io.user = req.get();
    req->io.done = [](BlockIo* io, nvme::Status st) {
      auto* r = static_cast<Request*>(io->user);
      r->done = true;
      r->status = st;
      r->trace->events.push_back("done:" + Trace::name(*io));
    };
    dev_->submit(&req->io, reactor_);
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!req->done && std::chrono::steady_clock::now() < until) reactor_.run_once(1000);
    EXPECT_TRUE(req->done);
    return req->status;
  }

  reactor::Reactor reactor_{64};
  std::unique_ptr<BlockDevice> dev_;
  std::string path_;
  Trace trace_;
  alignas(4096) std::array<uint8_t, 65536> buf_{};
};

TEST_F(FileDeviceTest, OnStorageFuaFlushAndWriteThroughSyncBeforeCompleting) {
  std::string dir = dir_where(false);
  if (dir.empty()) GTEST_SKIP() << "no writable directory on storage";
  ASSERT_NO_FATAL_FAILURE(open_in(dir));
  EXPECT_EQ(cache(), std::tuple(Persistence::Media, true, true));

  EXPECT_TRUE(run(BlockIo::Op::Write, 0, 4096, false, 1).ok());   // cached: no sync
  EXPECT_TRUE(run(BlockIo::Op::Write, 4096, 8192, true, 2).ok());  // FUA
  EXPECT_TRUE(run(BlockIo::Op::Flush, 0, 0, false, 3).ok());
  EXPECT_TRUE(run(BlockIo::Op::WriteZeroes, 0, 4096, true, 4).ok());  // fallocate, then a sync
  EXPECT_TRUE(run(BlockIo::Op::Read, 0, 4096, false, 5).ok());
  dev_->set_write_cache_enabled(false);
  EXPECT_FALSE(dev_->write_cache_enabled());
  EXPECT_TRUE(run(BlockIo::Op::Write, 0, 512, false, 6).ok());        // written through
  EXPECT_TRUE(run(BlockIo::Op::Deallocate, 0, 4096, false, 7).ok());  // punched, then synced
  EXPECT_EQ(trace_.events, (std::vector<std::string>{"done:1", "sync:2", "done:2", "sync:3", "done:3", "sync:4",
                                                     "done:4", "done:5", "sync:6", "done:6", "sync:7", "done:7"}));
}

TEST_F(FileDeviceTest, OnTmpfsThereIsNoCacheAndNothingToSync) {
  std::string dir = dir_where(true);
  if (dir.empty()) GTEST_SKIP() << "no writable tmpfs";
  ASSERT_NO_FATAL_FAILURE(open_in(dir));
  EXPECT_EQ(cache(), std::tuple(Persistence::Machine, false, false));
  EXPECT_TRUE(run(BlockIo::Op::Write, 0, 4096, true, 1).ok());
  EXPECT_TRUE(run(BlockIo::Op::Flush, 0, 0, false, 2).ok());
  EXPECT_EQ(trace_.events, (std::vector<std::string>{"done:1", "done:2"}));
}

TEST(BackendPersistence, RamAndNullSayWhatTheyAre) {
  std::string err;
  auto ram = make_ram(1 << 20, 512, 1, err);
  ASSERT_TRUE(ram) << err;
  EXPECT_EQ(ram->persistence(), Persistence::Process);
  EXPECT_FALSE(ram->volatile_write_cache());
  auto null = make_null(1 << 20, 512);
  EXPECT_EQ(null->persistence(), Persistence::None);
  EXPECT_FALSE(null->volatile_write_cache());
}

}  // namespace
}  // namespace nvtcp::backend::file_device_test
