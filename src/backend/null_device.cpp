// The reference study's NULL device: reads return zeros, writes are discarded.
#include <cstring>

#include "backend/block_device.hpp"
#include "util/zeros.hpp"

namespace nvtcp::backend {

namespace {
// Reads point straight at one shared zero region, so a null read costs no copy at all
// (reads larger than the region are zeroed in the caller's buffer).
class NullDevice final : public BlockDevice {
 public:
  NullDevice(uint64_t size, uint32_t bs) : size_(size), bs_(bs) {}
  uint64_t size_bytes() const override { return size_; }
  uint32_t block_size() const override { return bs_; }
  const char* kind() const override { return "null"; }
  Persistence persistence() const override { return Persistence::None; }
  bool zero_copy_reads() const override { return true; }
  void submit(BlockIo* io, reactor::Reactor&) override {
    if (io->op == BlockIo::Op::Read) {
      if (io->length <= kZeroBytesLen) {
        io->read_data = kZeroBytes;
      } else {
        std::memset(io->buffer, 0, io->length);
        io->read_data = io->buffer;
      }
    }
    io->done(io, wire::sc::Success);
  }

 private:
  uint64_t size_;
  uint32_t bs_;
};
}  // namespace

std::unique_ptr<BlockDevice> make_null(uint64_t size, uint32_t block_size) {
  return std::make_unique<NullDevice>(size, block_size);
}

}  // namespace nvtcp::backend
