// SPDX-License-Identifier: Apache-2.0
// Data buffers for admin commands the engine forwards to a remote controller (Get Log Page,
// Identify, Get Features: up to 1 MiB each), from one budget for the whole engine.
//
// Each buffer is its own anonymous mapping, unmapped when the command is done: the memory
// goes back to the system at once (a heap block of 1 MiB would stay in the allocator's
// arenas after a flood has drained), and the budget bounds what is held at any time. A
// command whose buffer does not fit waits in its application's SQ, as a controller fetches
// commands only as it has room for them. An admin command is not the data path: one mmap
// and munmap each is cheap beside its trip to the remote controller.
//
// Buffers are taken on the engine's control thread and may be given back on any thread.
#pragma once
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <utility>

namespace nvtcp::engine {

class AdminBufferPool;

// One admin command's data buffer (zeroed when taken); empty when the command moves none.
class AdminBuffer {
 public:
  AdminBuffer() = default;
  ~AdminBuffer() { reset(); }
  AdminBuffer(AdminBuffer&& o) noexcept { *this = std::move(o); }
  AdminBuffer& operator=(AdminBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      pool_ = std::exchange(o.pool_, nullptr);
      data_ = std::exchange(o.data_, nullptr);
      len_ = std::exchange(o.len_, 0);
      mapped_ = std::exchange(o.mapped_, 0);
    }
    return *this;
  }
  AdminBuffer(const AdminBuffer&) = delete;
  AdminBuffer& operator=(const AdminBuffer&) = delete;

  uint8_t* data() const { return data_; }
  uint32_t size() const { return len_; }
  bool empty() const { return len_ == 0; }
  inline void reset();

 private:
  friend class AdminBufferPool;
  AdminBufferPool* pool_ = nullptr;
  uint8_t* data_ = nullptr;
  uint32_t len_ = 0;
  uint64_t mapped_ = 0;  // bytes mapped (and charged to the budget): len_ in whole pages
};

class AdminBufferPool {
 public:
  explicit AdminBufferPool(uint64_t budget_bytes) : budget_(budget_bytes) {}
  AdminBufferPool(const AdminBufferPool&) = delete;
  AdminBufferPool& operator=(const AdminBufferPool&) = delete;

  enum class Take {
    Taken,     // out holds the buffer
    Wait,      // not now: the budget is held by commands in flight; try again when one ends
    TooLarge,  // never: larger than the whole budget
    NoMemory,  // the system has no memory for it now
  };
  static uint64_t charge(uint32_t len) { return (uint64_t(len) + 4095) & ~uint64_t(4095); }

  Take take(uint32_t len, AdminBuffer& out) {
    out.reset();
    if (len == 0) return Take::Taken;
    const uint64_t bytes = charge(len);
    if (bytes > budget_) return Take::TooLarge;
    uint64_t used = in_use_.load(std::memory_order_relaxed);
    do {
      if (used + bytes > budget_) return Take::Wait;
    } while (!in_use_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      in_use_.fetch_sub(bytes, std::memory_order_relaxed);
      return Take::NoMemory;
    }
    uint64_t peak = peak_.load(std::memory_order_relaxed);
    while (used + bytes > peak && !peak_.compare_exchange_weak(peak, used + bytes, std::memory_order_relaxed)) {
    }
    out.pool_ = this;
    out.data_ = static_cast<uint8_t*>(p);
    out.len_ = len;
    out.mapped_ = bytes;
    return Take::Taken;
  }

  uint64_t budget() const { return budget_; }
  uint64_t in_use() const { return in_use_.load(std::memory_order_relaxed); }
  uint64_t peak() const { return peak_.load(std::memory_order_relaxed); }

 private:
  friend class AdminBuffer;
  void give_back(uint8_t* p, uint64_t bytes) {
    ::munmap(p, bytes);
    in_use_.fetch_sub(bytes, std::memory_order_relaxed);
  }

  const uint64_t budget_;
  std::atomic<uint64_t> in_use_{0};
  std::atomic<uint64_t> peak_{0};
};

inline void AdminBuffer::reset() {
  if (pool_ && data_) pool_->give_back(data_, mapped_);
  pool_ = nullptr;
  data_ = nullptr;
  len_ = 0;
  mapped_ = 0;
}

}  // namespace nvtcp::engine
