// A namespace kept in memory: data survives for the life of the target process.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include <fmt/format.h>

#include "backend/block_device.hpp"

namespace nvtcp::backend {

namespace {

// With more than one reactor, commands on the same blocks run on different threads at
// once. NVMe promises that a one-block write is atomic against other commands (AWUN and
// AWUPF are 0): a read sees the old block or the new one, never a mix, and of two writes
// one survives whole. So each 64 KiB region of the namespace maps to one of a table of
// spinlocks, and a command copies region by region under that region's lock. One lock is
// held at a time (no ordering to get wrong); a block never straddles a region. Reads copy
// too, since a zero-copy read would let the kernel read the memory later, while a write
// may be under way. With one reactor, commands run one after another and none of this is
// needed: reads stay zero-copy and nothing is locked.
class RegionLocks {
 public:
  static constexpr unsigned kRegionShift = 16;  // 64 KiB
  static constexpr size_t kLocks = 1024;

  // Calls fn(offset, length) for each region-sized piece of [offset, offset + length),
  // holding that region's lock.
  template <class Fn>
  void for_each_locked(uint64_t offset, uint64_t length, Fn&& fn) {
    while (length > 0) {
      uint64_t region_end = ((offset >> kRegionShift) + 1) << kRegionShift;
      uint64_t n = std::min(length, region_end - offset);
      Lock& l = locks_[(offset >> kRegionShift) % kLocks];
      while (l.held.exchange(true, std::memory_order_acquire))
        while (l.held.load(std::memory_order_relaxed)) pause();
      fn(offset, n);
      l.held.store(false, std::memory_order_release);
      offset += n;
      length -= n;
    }
  }

 private:
  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  struct alignas(64) Lock {  // one per cache line: regions do not contend by neighbourhood
    std::atomic<bool> held{false};
  };
  Lock locks_[kLocks];
};

class RamDevice final : public BlockDevice {
 public:
  RamDevice(uint8_t* mem, uint64_t size, uint32_t bs, bool shared)
      : mem_(mem), size_(size), bs_(bs), locks_(shared ? std::make_unique<RegionLocks>() : nullptr) {}
  ~RamDevice() override { munmap(mem_, size_); }
  uint64_t size_bytes() const override { return size_; }
  uint32_t block_size() const override { return bs_; }
  const char* kind() const override { return "ram"; }
  // Memory is the medium: a write is as durable as it will ever be once copied (until the
  // process exits), so there is no volatile cache and Flush has nothing to do.
  Persistence persistence() const override { return Persistence::Process; }
  bool zero_copy_reads() const override { return !locks_; }
  void submit(BlockIo* io, reactor::Reactor&) override {
    uint8_t* p = mem_ + io->offset;
    if (locks_) {
      submit_shared(io);
    } else {
      switch (io->op) {
        case BlockIo::Op::Read: io->read_data = p; break;
        case BlockIo::Op::Write: std::memcpy(p, io->buffer, io->length); break;
        case BlockIo::Op::WriteZeroes:
        case BlockIo::Op::Deallocate: std::memset(p, 0, io->length); break;  // deallocated blocks read as zeros
        case BlockIo::Op::Flush: break;
      }
    }
    io->done(io, wire::sc::Success);
  }

 private:
  void submit_shared(BlockIo* io) {
    const uint64_t base = io->offset;
    switch (io->op) {
      case BlockIo::Op::Read:
        locks_->for_each_locked(base, io->length, [&](uint64_t off, uint64_t n) {
          std::memcpy(io->buffer + (off - base), mem_ + off, n);
        });
        io->read_data = io->buffer;
        break;
      case BlockIo::Op::Write:
        locks_->for_each_locked(base, io->length, [&](uint64_t off, uint64_t n) {
          std::memcpy(mem_ + off, io->buffer + (off - base), n);
        });
        break;
      case BlockIo::Op::WriteZeroes:
      case BlockIo::Op::Deallocate:
        locks_->for_each_locked(base, io->length, [&](uint64_t off, uint64_t n) { std::memset(mem_ + off, 0, n); });
        break;
      case BlockIo::Op::Flush: break;
    }
  }

  uint8_t* mem_;
  uint64_t size_;
  uint32_t bs_;
  std::unique_ptr<RegionLocks> locks_;  // set when several reactors share the namespace
};
}  // namespace

std::unique_ptr<BlockDevice> make_ram(uint64_t size, uint32_t block_size, unsigned reactors, std::string& err) {
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
  return std::make_unique<RamDevice>(static_cast<uint8_t*>(mem), size, block_size, reactors > 1);
}

}  // namespace nvtcp::backend
