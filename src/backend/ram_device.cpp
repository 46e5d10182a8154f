// SPDX-License-Identifier: Apache-2.0
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
// held at a time (no ordering to get wrong); a block never straddles a region. With one
// reactor, commands run one after another and nothing is locked.
//
// Reads copy into the request's buffer in both cases. A read sent straight from namespace
// memory would be read by the kernel only as the socket drains, turns later, after a write
// that completed meanwhile had changed those blocks: the host would get a block half old,
// half new. The copy is taken at the read's own moment, which is what makes it atomic.
// (NULL namespaces, whose blocks never change, stay zero-copy.)
class RegionLocks {
 public:
  static constexpr unsigned kRegionShift = 16;  // 64 KiB
  static constexpr size_t kLocks = 1024;

  // Calls fn(offset, length) for each region-sized piece of [offset, offset + length),
  // holding that region's lock.
  // Calls fn() holding the locks of every region [offset, offset + length) touches, taken
  // in ascending order (a holder of one lock never waits for a second, so no deadlock).
  // The range spans at most kLocks regions, so each lock is taken once.
  template <class Fn>
  void with_range_locked(uint64_t offset, uint64_t length, Fn&& fn) {
    const uint64_t first = offset >> kRegionShift, last = (offset + length - 1) >> kRegionShift;
    for (uint64_t r = first; r <= last; ++r) acquire(locks_[r % kLocks]);
    fn();
    for (uint64_t r = first; r <= last; ++r) locks_[r % kLocks].held.store(false, std::memory_order_release);
  }

  template <class Fn>
  void for_each_locked(uint64_t offset, uint64_t length, Fn&& fn) {
    while (length > 0) {
      uint64_t region_end = ((offset >> kRegionShift) + 1) << kRegionShift;
      uint64_t n = std::min(length, region_end - offset);
      Lock& l = locks_[(offset >> kRegionShift) % kLocks];
      acquire(l);
      fn(offset, n);
      l.held.store(false, std::memory_order_release);
      offset += n;
      length -= n;
    }
  }

 private:
  struct Lock;
  static void acquire(Lock& l) {
    while (l.held.exchange(true, std::memory_order_acquire))
      while (l.held.load(std::memory_order_relaxed)) pause();
  }
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
  bool copies_on_reactor() const override { return true; }
  // Memory is the medium: a write is as durable as it will ever be once copied (until the
  // process exits), so there is no volatile cache and Flush has nothing to do.
  Persistence persistence() const override { return Persistence::Process; }
  void submit(BlockIo* io, reactor::Reactor& r) override {
    if (io->op == BlockIo::Op::CompareAndWrite) {  // not atomic_compare_and_write(): never sent here
      io->done(io, nvme::sc::InternalError);
      return;
    }
    if (io->op == BlockIo::Op::WriteZeroes || io->op == BlockIo::Op::Deallocate) {
      io->device = this;
      io->reactor = &r;
      io->progress = 0;
      zero_step(io);
      return;
    }
    uint8_t* p = mem_ + io->offset;
    if (locks_) {
      submit_shared(io);
    } else {
      switch (io->op) {
        case BlockIo::Op::Read:
          std::memcpy(io->buffer, p, io->length);
          io->read_data = io->buffer;
          break;
        case BlockIo::Op::Write: std::memcpy(p, io->buffer, io->length); break;
        case BlockIo::Op::WriteZeroes:
        case BlockIo::Op::Deallocate:
        case BlockIo::Op::Flush:
        case BlockIo::Op::CompareAndWrite: break;  // refused in submit
      }
    }
    io->done(io, nvme::sc::Success);
  }

  // Write Zeroes and Deallocate: whole pages go back to the kernel (they read as zeros
  // afterwards and cost no memory until written again), partial pages at the edges are
  // cleared only if they are in memory at all (a page never written is zeros already, and
  // touching it would fault it in). A whole-namespace Deallocate (mkfs trims) can span
  // gigabytes: it runs kZeroSlice at a time, yielding to the reactor between slices (an
  // io_uring NOP) so that other commands on this reactor are served meanwhile.
  static constexpr uint64_t kZeroSlice = 4ull << 20;
  static_assert(kZeroSlice >> RegionLocks::kRegionShift < RegionLocks::kLocks);

  void zero_step(BlockIo* io) {
    const uint64_t off = io->offset + io->progress;
    const uint64_t n = std::min(io->length - io->progress, kZeroSlice);
    if (n > 0) {
      if (locks_) locks_->with_range_locked(off, n, [&] { zero_range(off, n); });
      else zero_range(off, n);
    }
    io->progress += n;
    if (io->progress == io->length) {
      io->done(io, nvme::sc::Success);
      return;
    }
    io->completion.owner = io;
    io->completion.fn = [](reactor::Completion* c, int, uint32_t) {
      BlockIo* bio = static_cast<reactor::OwnedCompletion<BlockIo>*>(c)->owner;
      static_cast<RamDevice*>(bio->device)->zero_step(bio);
    };
    io_uring_sqe* sqe = io->reactor->get_sqe();
    io_uring_prep_nop(sqe);
    io->reactor->prep(sqe, &io->completion);
  }

  void zero_range(uint64_t off, uint64_t n) {
    const uint64_t first_page = (off + kPage - 1) & ~(kPage - 1);
    const uint64_t end_page = (off + n) & ~(kPage - 1);
    if (first_page >= end_page) {  // within one page, or across one page boundary
      clear_if_resident(off, n);
      return;
    }
    clear_if_resident(off, first_page - off);
    madvise(mem_ + first_page, end_page - first_page, MADV_DONTNEED);
    clear_if_resident(end_page, off + n - end_page);
  }

  // Clears [off, off + n) (n below two pages), page by page, skipping pages not in memory.
  void clear_if_resident(uint64_t off, uint64_t n) {
    while (n > 0) {
      const uint64_t page = off & ~(kPage - 1);
      const uint64_t chunk = std::min(n, page + kPage - off);
      unsigned char vec = 1;
      if (mincore(mem_ + page, kPage, &vec) != 0 || (vec & 1)) std::memset(mem_ + off, 0, chunk);
      off += chunk;
      n -= chunk;
    }
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
      case BlockIo::Op::Deallocate:  // zero_step
      case BlockIo::Op::Flush:
      case BlockIo::Op::CompareAndWrite: break;  // refused in submit
    }
  }

  static constexpr uint64_t kPage = 4096;
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
