// A namespace kept in memory: data survives for the life of the target process.
#include <sys/mman.h>

#include <cstring>

#include <fmt/format.h>

#include "backend/block_device.hpp"

namespace nvtcp::backend {

namespace {
class RamDevice final : public BlockDevice {
 public:
  RamDevice(uint8_t* mem, uint64_t size, uint32_t bs) : mem_(mem), size_(size), bs_(bs) {}
  ~RamDevice() override { munmap(mem_, size_); }
  uint64_t size_bytes() const override { return size_; }
  uint32_t block_size() const override { return bs_; }
  const char* kind() const override { return "ram"; }
  bool zero_copy_reads() const override { return true; }
  void submit(BlockIo* io, reactor::Reactor&) override {
    uint8_t* p = mem_ + io->offset;
    switch (io->op) {
      case BlockIo::Op::Read: io->read_data = p; break;
      case BlockIo::Op::Write: std::memcpy(p, io->buffer, io->length); break;
      case BlockIo::Op::WriteZeroes:
      case BlockIo::Op::Deallocate: std::memset(p, 0, io->length); break;  // deallocated blocks read as zeros
      case BlockIo::Op::Flush: break;
    }
    io->done(io, wire::sc::Success);
  }

 private:
  uint8_t* mem_;
  uint64_t size_;
  uint32_t bs_;
};
}  // namespace

std::unique_ptr<BlockDevice> make_ram(uint64_t size, uint32_t block_size, std::string& err) {
  // Anonymous memory in transparent huge pages where the kernel allows them. A page
  // touched for the first time costs a fault, which on a VM is tens of microseconds, so
  // namespaces up to kPrefaultLimit are faulted in now rather than on the data path;
  // larger ones materialise as they are used (and untouched blocks read as zeros).
  constexpr uint64_t kPrefaultLimit = 8ull << 30;
  void* mem = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) {
    err = fmt::format("cannot reserve {} bytes for a RAM namespace", size);
    return nullptr;
  }
  madvise(mem, size, MADV_HUGEPAGE);
  if (size <= kPrefaultLimit) madvise(mem, size, MADV_POPULATE_WRITE);
  return std::make_unique<RamDevice>(static_cast<uint8_t*>(mem), size, block_size);
}

}  // namespace nvtcp::backend
