// SPDX-License-Identifier: Apache-2.0
// Block devices for integration tests that need a device to misbehave on cue.
#pragma once
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "backend/block_device.hpp"
#include "nvtcp/status.hpp"
#include "reactor/reactor.hpp"
#include "target/bdevs.hpp"
#include "target/subsystem.hpp"

namespace nvtcp::test {

// Fails every read that touches block 7 with Unrecovered Read Error; other reads return
// zeros, writes are dropped.
class FailingReadDevice final : public backend::BlockDevice {
 public:
  FailingReadDevice(uint64_t size, uint32_t bs) : size_(size), bs_(bs) {}
  uint64_t size_bytes() const override { return size_; }
  uint32_t block_size() const override { return bs_; }
  const char* kind() const override { return "failing"; }
  backend::Persistence persistence() const override { return backend::Persistence::None; }
  void submit(backend::BlockIo* io, reactor::Reactor&) override {
    if (io->op == backend::BlockIo::Op::Read) {
      if (io->offset <= 7ull * bs_ && io->offset + io->length > 7ull * bs_) {
        io->done(io, nvme::sc::UnrecoveredReadError);
        return;
      }
      std::memset(io->buffer, 0, io->length);
      io->read_data = io->buffer;
    }
    io->done(io, nvme::sc::Success);
  }

 private:
  uint64_t size_;
  uint32_t bs_;
};

// Answers every Read with `status` and counts them; other commands succeed (reads and writes
// move no data). With an ANA status it is a target that contradicts its own log 0Ch: the path
// says optimized, and the namespace's reads are refused as if it were not.
class RefusingReadDevice final : public backend::BlockDevice {
 public:
  RefusingReadDevice(uint64_t size, nvme::Status status) : size_(size), status_(status) {}
  uint64_t size_bytes() const override { return size_; }
  uint32_t block_size() const override { return 512; }
  const char* kind() const override { return "refusing"; }
  backend::Persistence persistence() const override { return backend::Persistence::None; }
  void submit(backend::BlockIo* io, reactor::Reactor&) override {
    if (io->op == backend::BlockIo::Op::Read) {
      refused.fetch_add(1, std::memory_order_relaxed);
      io->done(io, status_);
      return;
    }
    io->done(io, nvme::sc::Success);
  }
  std::atomic<uint64_t> refused{0};

 private:
  uint64_t size_;
  nvme::Status status_;
};

// Holds every Deallocate until the test lets it go (completed on the reactor that asked),
// so that something can happen between the ranges of one Dataset Management command. Reads
// return zeros, writes are dropped.
class GatedDevice final : public backend::BlockDevice {
 public:
  explicit GatedDevice(uint64_t size) : size_(size) {}
  uint64_t size_bytes() const override { return size_; }
  uint32_t block_size() const override { return 512; }
  const char* kind() const override { return "gated"; }
  backend::Persistence persistence() const override { return backend::Persistence::None; }
  void submit(backend::BlockIo* io, reactor::Reactor& r) override {
    if (io->op == backend::BlockIo::Op::Read) {
      std::memset(io->buffer, 0, io->length);
      io->read_data = io->buffer;
    }
    if (io->op != backend::BlockIo::Op::Deallocate) {
      io->done(io, nvme::sc::Success);
      return;
    }
    std::lock_guard lk(mu_);
    held_.emplace_back(io, &r);
  }
  size_t held() {
    std::lock_guard lk(mu_);
    return held_.size();
  }
  // Once the Deallocate completes, the device may be gone (its bdev deleted with its namespace,
  // the device closed as the last command left): nothing of it is touched after the post.
  void release_one() {
    std::pair<backend::BlockIo*, reactor::Reactor*> one;
    {
      std::lock_guard lk(mu_);
      one = held_.front();
      held_.erase(held_.begin());
    }
    one.second->post([io = one.first] { io->done(io, nvme::sc::Success); });
  }

 private:
  uint64_t size_;
  std::mutex mu_;
  std::vector<std::pair<backend::BlockIo*, reactor::Reactor*>> held_;
};

// A device factory that makes every namespace a GatedDevice; dev points at the last one made.
inline target::DeviceFactory gated_devices(GatedDevice*& dev) {
  return [&dev](const target::NamespaceConfig& nc, std::string&) -> std::unique_ptr<backend::BlockDevice> {
    auto d = std::make_unique<GatedDevice>(nc.size);
    dev = d.get();
    return d;
  };
}

// The bdev named "gated" is a GatedDevice (Deallocate held until released); every other one is
// built in.
struct GatedFactory {
  std::atomic<GatedDevice*> dev{nullptr};
  target::DeviceFactory factory() {
    return [this](const target::NamespaceConfig& nc, std::string&) -> std::unique_ptr<backend::BlockDevice> {
      if (nc.name != "gated") return nullptr;
      auto d = std::make_unique<GatedDevice>(nc.size);
      dev = d.get();
      return d;
    };
  }
};

// Memory that carries out a fused Compare and Write itself (atomic_compare_and_write), as a
// storage cluster does for RBD; counts what it is given, so that a test sees the pair arrive as
// one CompareAndWrite and no read of the blocks by the target.
class AtomicCompareWriteDevice final : public backend::BlockDevice {
 public:
  AtomicCompareWriteDevice(uint64_t size, uint32_t bs) : mem_(size), bs_(bs) {}
  uint64_t size_bytes() const override { return mem_.size(); }
  uint32_t block_size() const override { return bs_; }
  const char* kind() const override { return "atomic-caw"; }
  backend::Persistence persistence() const override { return backend::Persistence::Process; }
  bool atomic_compare_and_write() const override { return true; }
  void submit(backend::BlockIo* io, reactor::Reactor&) override {
    using Op = backend::BlockIo::Op;
    nvme::Status st = nvme::sc::Success;
    {
      std::lock_guard lk(mu_);  // reactors of one target share it
      uint8_t* p = mem_.data() + io->offset;
      switch (io->op) {
        case Op::Read:
          reads.fetch_add(1, std::memory_order_relaxed);
          std::memcpy(io->buffer, p, io->length);
          io->read_data = io->buffer;
          break;
        case Op::Write: std::memcpy(p, io->buffer, io->length); break;
        case Op::WriteZeroes:
        case Op::Deallocate: std::memset(p, 0, io->length); break;
        case Op::Flush: break;
        case Op::CompareAndWrite:
          compare_and_writes.fetch_add(1, std::memory_order_relaxed);
          if (std::memcmp(p, io->compare, io->length) != 0) st = nvme::sc::CompareFailure;
          else std::memcpy(p, io->buffer, io->length);
          break;
      }
    }
    io->done(io, st);
  }
  std::atomic<int> reads{0}, compare_and_writes{0};

 private:
  std::mutex mu_;
  std::vector<uint8_t> mem_;
  uint32_t bs_;
};

}  // namespace nvtcp::test
