// SPDX-License-Identifier: Apache-2.0
// The reference study's NULL device: reads return zeros, writes are discarded.
#include <atomic>

#include "backend/block_device.hpp"
#include "util/log.hpp"
#include "util/zeros.hpp"

namespace nvtcp::backend {

namespace {
// Reads point straight at one shared zero region, so a null read costs no copy at all. The
// region is as long as the largest transfer a target accepts (util/zeros.hpp), so every read
// is served from it: a zero-copy device gets no buffer of its own from the target.
class NullDevice final : public BlockDevice {
 public:
  NullDevice(uint64_t size, uint32_t bs) : size_(size), bs_(bs) {}
  uint64_t size_bytes() const override { return size_.load(std::memory_order_relaxed); }
  bool resize(uint64_t bytes) override {
    size_.store(bytes - bytes % bs_, std::memory_order_relaxed);
    return true;
  }
  uint32_t block_size() const override { return bs_; }
  const char* kind() const override { return "null"; }
  Persistence persistence() const override { return Persistence::None; }
  bool zero_copy_reads() const override { return true; }
  bool ignores_write_data() const override { return true; }
  void submit(BlockIo* io, reactor::Reactor&) override {
    if (io->op == BlockIo::Op::Read) {
      if (io->length > kZeroBytesLen) {  // the target bounds reads by MDTS; never trust that here
        log::error("null namespace: a {}-byte read is beyond the {}-byte zero region", io->length, kZeroBytesLen);
        io->done(io, nvme::sc::InternalError);
        return;
      }
      io->read_data = zero_bytes();
    }
    io->done(io, nvme::sc::Success);
  }

 private:
  std::atomic<uint64_t> size_;  // resized live (bdev_null_resize)
  uint32_t bs_;
};
}  // namespace

std::unique_ptr<BlockDevice> make_null(uint64_t size, uint32_t block_size) {
  return std::make_unique<NullDevice>(size, block_size);
}

}  // namespace nvtcp::backend
