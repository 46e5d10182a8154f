// SPDX-License-Identifier: Apache-2.0
// NVMe queue pairs in memory shared between an application and the engine, with the
// semantics the NVMe base specification gives a PCIe controller and its host driver:
// 64-byte SQEs and 16-byte CQEs in rings, the controller finds new SQEs through the SQ tail
// doorbell and the host finds completions through the CQE phase tag (the CQE also carries
// the SQ head, so the host knows which slots are free again); the host returns CQ slots
// through the CQ head doorbell.
//
// Doorbells are words in shared memory (the specification's shadow doorbells, from Doorbell
// Buffer Config, meant for software controllers), each with an EventIdx the controller
// writes: the host notifies the controller (a signal on a pipe, the MMIO doorbell's analog)
// only when its new doorbell value passes the EventIdx, so a polling engine costs the
// application no system call per I/O.
//
// The two sides do not trust each other the same way. The application side (AppQueuePair)
// is a library in the application: a bug there hurts only that application. The engine side
// (EngineQueuePair) reads memory the application can change at any moment: it copies each
// SQE out before looking at it, reads each doorbell once, and treats an impossible value
// (an index outside the queue, a CQ head past the completions it has posted) as a fatal
// error of that queue pair, never as something to follow.
#pragma once
#include <atomic>
#include <cstdint>
#include <cstring>

#include "nvtcp/sqe.hpp"

namespace nvtcp::shm {

// EventIdx value that asks for no notice at all: the engine is polling the queue.
inline constexpr uint32_t kNoNotice = 0xFFFFFFFFu;

// The application moved a doorbell from old_idx to new_idx in a ring of size entries: has it
// passed event_idx, so that the controller asked to be told? (The shadow doorbell rule, in
// the ring's own arithmetic: the indices wrap at the ring size. An event_idx outside the
// ring, kNoNotice say, is never passed.)
constexpr bool need_event(uint32_t event_idx, uint32_t new_idx, uint32_t old_idx, uint32_t size) {
  if (event_idx >= size || new_idx >= size || old_idx >= size) return event_idx < size;
  return (new_idx + size - event_idx - 1) % size < (new_idx + size - old_idx) % size;
}

// One queue pair's shared words, each written by one side only.
struct alignas(64) QueueWords {
  uint32_t sq_tail;       // application: SQ tail doorbell (shadow)
  uint32_t cq_head;       // application: CQ head doorbell (shadow)
  // Application: non-zero = it is about to sleep on the CQ's interrupt vector (the
  // interrupt mask's analog: unmasked only while someone waits). The engine clears it as it
  // signals; while it is clear, completions raise no interrupt (no system call on either
  // side for an application that is polling anyway).
  uint32_t irq_armed;
  uint32_t pad0[13];      // the engine's words on their own cache line
  uint32_t sq_event_idx;  // engine: notify me when sq_tail passes this
  uint32_t cq_event_idx;  // engine: notify me when cq_head passes this (room for completions)
  uint32_t pad1[14];
};
static_assert(sizeof(QueueWords) == 128);
static_assert(offsetof(QueueWords, sq_event_idx) == 64);

// Where one queue pair lives: its words and two rings (sizes in entries, 2..65536).
struct QueueMemory {
  QueueWords* words = nullptr;
  nvme::Sqe* sq = nullptr;
  uint32_t sq_size = 0;
  nvme::Cqe* cq = nullptr;
  uint32_t cq_size = 0;
};

namespace detail {
inline uint32_t load_acquire(const uint32_t& w) {
  return std::atomic_ref<const uint32_t>(w).load(std::memory_order_acquire);
}
inline void store_release(uint32_t& w, uint32_t v) { std::atomic_ref<uint32_t>(w).store(v, std::memory_order_release); }
// The CQE's last dword (command id, then status with the phase tag in bit 16) is written
// last, so a host that sees the new phase sees the whole entry.
inline uint32_t& cqe_last_word(nvme::Cqe& c) { return reinterpret_cast<uint32_t*>(&c)[3]; }
}  // namespace detail

// The application's side: a host driver's submission and completion logic.
class AppQueuePair {
 public:
  explicit AppQueuePair(const QueueMemory& m) : m_(m) {}

  uint32_t sq_free() const { return m_.sq_size - 1 - in_sq(); }
  // Places sqe at the SQ tail; false if the SQ is full. Not visible to the engine before ring().
  bool submit(const nvme::Sqe& sqe) {
    if (sq_free() == 0) return false;
    std::memcpy(&m_.sq[sq_tail_], &sqe, sizeof(sqe));
    sq_tail_ = (sq_tail_ + 1) % m_.sq_size;
    return true;
  }
  // Submitted and not yet published by ring_sq().
  uint32_t unrung() const { return (sq_tail_ + m_.sq_size - rung_sq_tail_) % m_.sq_size; }
  // Publishes what was submitted; true when the engine asked to be notified of it (its
  // EventIdx was passed): then the caller signals the engine.
  bool ring_sq() {
    if (sq_tail_ == rung_sq_tail_) return false;
    detail::store_release(m_.words->sq_tail, sq_tail_);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // the tail before reading EventIdx
    const uint32_t ev = detail::load_acquire(m_.words->sq_event_idx);
    const bool kick = need_event(ev, sq_tail_, rung_sq_tail_, m_.sq_size);
    rung_sq_tail_ = sq_tail_;
    return kick;
  }
  // The next completion, if the engine has posted one (its phase tag is the current one).
  bool poll(nvme::Cqe& out) {
    nvme::Cqe& slot = m_.cq[cq_head_];
    const uint32_t last = detail::load_acquire(detail::cqe_last_word(slot));
    if (((last >> 16) & 1) != phase_) return false;
    std::memcpy(&out, &slot, sizeof(out));
    sq_head_ = out.sqhd % m_.sq_size;
    if (++cq_head_ == m_.cq_size) {
      cq_head_ = 0;
      phase_ ^= 1;
    }
    return true;
  }
  // About to sleep on the CQ's interrupt vector: asks the engine to signal it. Then look at
  // the CQ once more before sleeping (a completion posted just before would not signal).
  void arm_interrupt() {
    detail::store_release(m_.words->irq_armed, 1);
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  // A new SQ on the same CQ (after Delete I/O SQ): the SQ starts over at slot 0, the CQ goes on.
  void restart_sq() { sq_tail_ = sq_head_ = rung_sq_tail_ = 0; }
  // Returns consumed CQ slots to the engine; true when it asked to be told.
  bool ring_cq() {
    if (cq_head_ == rung_cq_head_) return false;
    detail::store_release(m_.words->cq_head, cq_head_);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const uint32_t ev = detail::load_acquire(m_.words->cq_event_idx);
    const bool kick = need_event(ev, cq_head_, rung_cq_head_, m_.cq_size);
    rung_cq_head_ = cq_head_;
    return kick;
  }

 private:
  uint32_t in_sq() const { return (sq_tail_ + m_.sq_size - sq_head_) % m_.sq_size; }

  QueueMemory m_;
  uint32_t sq_tail_ = 0, sq_head_ = 0, rung_sq_tail_ = 0;
  uint32_t cq_head_ = 0, rung_cq_head_ = 0;
  uint32_t phase_ = 1;  // the first pass through the CQ has phase 1 (the ring starts zeroed)
};

// The engine's side: a controller fetching SQEs and posting CQEs, trusting nothing it reads.
class EngineQueuePair {
 public:
  enum class Fault : uint8_t { None, SqTailOutOfRange, CqHeadOutOfRange, CqHeadPastPosted };

  EngineQueuePair(const QueueMemory& m, uint16_t sqid) : m_(m), sqid_(sqid) {}

  Fault fault() const { return fault_; }
  // Copies the next published SQE into out; false when there is none (or the queue faulted).
  bool fetch(nvme::Sqe& out) {
    if (fault_ != Fault::None) return false;
    if (sq_head_ == sq_tail_seen_) {
      const uint32_t tail = detail::load_acquire(m_.words->sq_tail);
      if (tail >= m_.sq_size) return fail(Fault::SqTailOutOfRange);
      sq_tail_seen_ = tail;
      if (sq_head_ == tail) return false;
    }
    std::memcpy(&out, &m_.sq[sq_head_], sizeof(out));
    sq_head_ = (sq_head_ + 1) % m_.sq_size;
    return true;
  }
  // Room for completions: CQ slots the application has given back (reads its doorbell).
  uint32_t cq_space() {
    if (fault_ != Fault::None) return 0;
    const uint32_t head = detail::load_acquire(m_.words->cq_head);
    if (head >= m_.cq_size) return fail(Fault::CqHeadOutOfRange), 0;
    // The head may only move forward over completions already posted.
    const uint32_t posted = (cq_tail_ + m_.cq_size - cq_head_seen_) % m_.cq_size;
    const uint32_t moved = (head + m_.cq_size - cq_head_seen_) % m_.cq_size;
    if (moved > posted) return fail(Fault::CqHeadPastPosted), 0;
    cq_head_seen_ = head;
    return m_.cq_size - 1 - (cq_tail_ + m_.cq_size - cq_head_seen_) % m_.cq_size;
  }
  // Posts a completion (the caller checked cq_space()); sqhd and sqid are filled in here.
  void post(nvme::Cqe cqe) {
    cqe.sqhd = uint16_t(sq_head_);
    cqe.sqid = sqid_;
    cqe.status = uint16_t((cqe.status & ~1u) | phase_);
    nvme::Cqe& slot = m_.cq[cq_tail_];
    std::memcpy(&slot, &cqe, 12);  // all but the last dword
    uint32_t last;
    std::memcpy(&last, reinterpret_cast<const uint8_t*>(&cqe) + 12, 4);
    detail::store_release(detail::cqe_last_word(slot), last);
    if (++cq_tail_ == m_.cq_size) {
      cq_tail_ = 0;
      phase_ ^= 1;
    }
  }
  // Asks to be notified when the application publishes more SQEs. Call before sleeping, then
  // try fetch() once more: a tail published just before the request would not notify.
  void want_sq_notice() {
    detail::store_release(m_.words->sq_event_idx, sq_tail_seen_);
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  // Asks to be notified when the application frees CQ slots (when the CQ is full); then
  // check cq_space() once more, for the same reason.
  void want_cq_notice() {
    detail::store_release(m_.words->cq_event_idx, cq_head_seen_);
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  // The engine polls this queue again: the application need not notify it of anything
  // (so a polling application makes no system call per I/O).
  void stop_notices() {
    detail::store_release(m_.words->sq_event_idx, kNoNotice);
    detail::store_release(m_.words->cq_event_idx, kNoNotice);
  }
  uint32_t sq_head() const { return sq_head_; }
  uint32_t cq_size() const { return m_.cq_size; }
  // Whether the application has asked for an interrupt (a plain look).
  bool interrupt_requested() const {
    std::atomic_thread_fence(std::memory_order_seq_cst);  // the CQEs before the request is read
    return detail::load_acquire(m_.words->irq_armed) != 0;
  }
  // After posting: whether the application waits for an interrupt (and takes the request:
  // one signal per arming).
  bool take_interrupt_request() {
    std::atomic_thread_fence(std::memory_order_seq_cst);  // the CQEs before the request is read
    return std::atomic_ref<uint32_t>(m_.words->irq_armed).exchange(0, std::memory_order_seq_cst) != 0;
  }

  // Where the CQ stands: a CQ outlives its SQ (Delete I/O SQ leaves it), and a new SQ on it
  // must go on posting where the last one stopped, with the same phase.
  struct CqPosition {
    uint32_t tail = 0;
    uint32_t head_seen = 0;
    uint16_t phase = 1;
  };
  CqPosition cq_position() const { return {cq_tail_, cq_head_seen_, phase_}; }
  void resume_cq(const CqPosition& p) {
    if (p.tail >= m_.cq_size || p.head_seen >= m_.cq_size) return;  // a fresh CQ then
    cq_tail_ = p.tail;
    cq_head_seen_ = p.head_seen;
    phase_ = p.phase & 1;
  }

 private:
  bool fail(Fault f) {
    fault_ = f;
    return false;
  }

  QueueMemory m_;
  uint16_t sqid_;
  uint32_t sq_head_ = 0, sq_tail_seen_ = 0;
  uint32_t cq_tail_ = 0, cq_head_seen_ = 0;
  uint16_t phase_ = 1;
  Fault fault_ = Fault::None;
};

}  // namespace nvtcp::shm
