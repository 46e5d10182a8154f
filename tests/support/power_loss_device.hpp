// SPDX-License-Identifier: Apache-2.0
// A namespace device that behaves like a disk with a volatile write cache, for power-loss
// tests (the idea of xfstests' dm-log-writes): it keeps two images, what reads see and what
// would survive a power cut. A completed write goes into the first only; it reaches the
// durable image when it carried FUA, or when a Flush completes after it. power_cut() drops
// everything that is not durable, at whatever instant the test calls it, from any thread.
//
// Every request completes a random number of reactor turns after it was submitted (chained
// io_uring NOPs, seeded), so a target that answers before its device is done, or never asks
// the device, loses data here exactly as it would on a real disk. Requests the device holds
// when power is cut are lost: they complete with a write fault and change nothing.
#pragma once
#include <cstdint>
#include <mutex>
#include <random>
#include <vector>

#include "backend/block_device.hpp"

namespace nvtcp::test {

class PowerLossDevice final : public backend::BlockDevice {
 public:
  PowerLossDevice(uint64_t size, uint32_t block_size, uint64_t seed, uint32_t max_delay_turns = 8);

  uint64_t size_bytes() const override { return size_; }
  uint32_t block_size() const override { return bs_; }
  const char* kind() const override { return "power-loss simulator"; }
  backend::Persistence persistence() const override { return backend::Persistence::Media; }
  bool volatile_write_cache() const override { return true; }
  bool write_cache_enabled() const override { return true; }
  void submit(backend::BlockIo* io, reactor::Reactor& r) override;

  // Cuts power: returns the durable image (what a reboot finds) and makes it the content
  // reads see from now on. Requests in flight are lost.
  std::vector<uint8_t> power_cut();
  // What reads see now (the volatile image).
  std::vector<uint8_t> current_image();

  struct Counts {
    uint64_t writes = 0, fua_writes = 0, flushes = 0, lost_in_flight = 0, cuts = 0;
  };
  Counts counts();

 private:
  void step(backend::BlockIo* io);   // one turn of delay has passed
  void apply(backend::BlockIo* io);  // the request completes now (device state changes)

  const uint64_t size_;
  const uint32_t bs_;
  const uint32_t max_delay_;
  std::mutex mu_;                    // the reactor completes, the test thread cuts power
  std::mt19937_64 rng_;
  std::vector<uint8_t> volatile_, durable_;
  std::vector<bool> dirty_;          // per block: the volatile image differs from the durable one
  uint32_t epoch_ = 0;               // power cycles so far
  Counts counts_;
};

}  // namespace nvtcp::test
