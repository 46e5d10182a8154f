// SPDX-License-Identifier: Apache-2.0
// Per-core event loop on io_uring. One Reactor is owned by one thread; everything it drives
// (sockets, timers, file I/O) belongs to that thread, so the data path needs no locks.
// Other threads reach a reactor only through post(), which is for the control path.
#pragma once
#include <liburing.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <mutex>
#include <vector>

#include "nvtcp/poll_mode.hpp"

namespace nvtcp::reactor {

// Every io_uring submission carries a pointer to one of these as user_data; the reactor
// calls fn with the CQE result. Owners embed Completions, so nothing is allocated per I/O.
struct Completion {
  void (*fn)(Completion* self, int res, uint32_t cqe_flags) = nullptr;
};

// A Completion that knows its owner, for owners that need more than one.
template <class T>
struct OwnedCompletion : Completion {
  T* owner = nullptr;
};

// Work to run once at the end of the current loop turn, just before the ring is submitted:
// owners queue sends here so that everything produced in one turn leaves in one batch.
struct Deferred {
  void (*fn)(Deferred* self) = nullptr;
  Deferred* next = nullptr;
  bool queued = false;
};

template <class T>
struct OwnedDeferred : Deferred {
  T* owner = nullptr;
};

// Work another thread finishes for this reactor: a library that completes on a thread of its
// own (librbd's callbacks) hands it back with Reactor::complete_from_any_thread, and fn runs on
// the reactor's thread, in the order they were handed back. Owners embed it; no allocation.
struct RemoteCompletion {
  void (*fn)(RemoteCompletion* self) = nullptr;
  RemoteCompletion* next = nullptr;
};

// A periodic or one-shot deadline checked by the loop; owners embed it. The reactor keeps the
// armed ones in a binary heap by deadline (heap_index: its place there): a target with thousands
// of connections has a few timers each, and a loop turn looks only at the earliest.
struct Timer {
  uint64_t deadline_ns = 0;        // 0 = not armed
  void (*fn)(Timer* self) = nullptr;
  uint32_t heap_index = 0;
  bool linked = false;             // armed
};

// A receive that a spinning reactor performs itself, with one non-blocking recv per loop
// turn, instead of leaving it to io_uring (ReactorOptions::spin_recv). Owners embed it.
struct SpinRecv {
  // One non-blocking attempt; true if bytes (or an error) came, in which case the owner
  // has unlinked it before handling them.
  bool (*poll)(SpinRecv* self) = nullptr;
  // The reactor is about to sleep (or has too many of these): submit the receive to
  // io_uring instead. Called after the reactor has unlinked it.
  void (*arm)(SpinRecv* self) = nullptr;
  SpinRecv* next = nullptr;
  SpinRecv* prev = nullptr;
  bool linked = false;
};


// How a reactor drives io_uring and the streams on it.
struct ReactorOptions {
  // nvtcp::PollMode, the one the host's options take: Hybrid spins for spin_window; Default
  // sleeps as Interrupt does.
  PollMode poll = PollMode::Interrupt;
  // IORING_SETUP_SQPOLL: a kernel thread picks up submissions (and runs their completion
  // work), so a spinning reactor makes no system call at all. The thread sleeps after
  // sq_thread_idle_ms without work; sq_thread_cpu pins it (-1: wherever the kernel likes).
  bool sqpoll = false;
  uint32_t sq_thread_idle_ms = 2;
  int sq_thread_cpu = -1;
  // TcpStream: a gathered send that carries a segment of at least this many bytes leaves
  // with IORING_OP_SENDMSG_ZC (the kernel sends from the owner's pages, and the segments'
  // SendDone waits for its notification that it no longer needs them). 0 = never.
  uint32_t send_zc_threshold = 0;
  // TcpStream: receive with one multishot recv per connection into a ring of provided
  // buffers (recv_buffers of recv_buffer_size bytes, per reactor, shared by its streams)
  // instead of one receive (and one 128 KiB buffer) per connection per arrival. Large
  // payloads are still received in place.
  bool recv_multishot = false;
  uint32_t recv_buffers = 256;          // a power of two
  uint32_t recv_buffer_size = 32 * 1024;
  // TcpStream, busy and hybrid polling: while the reactor spins, a latency-bound stream
  // (its last receive was small and had to wait) is polled with a plain non-blocking recv
  // each turn rather than through an io_uring receive. io_uring must arm a poll, take the
  // wake-up as task work and then receive; a spinning recv just finds the bytes. Streams
  // moving bulk bytes keep io_uring, batched with their sends. Up to spin_recv_max streams
  // per reactor (each costs a system call per idle turn); the rest, and every stream once
  // the reactor goes to sleep, use io_uring as usual.
  bool spin_recv = true;
  uint32_t spin_recv_max = 8;

  // Process-wide defaults for reactors that a library creates on its own (the host's
  // per-thread reactors): set once at start-up, before such reactors exist.
  static ReactorOptions defaults();
  static void set_defaults(const ReactorOptions& o);
};

// What the data-path modes did, counted by the reactor's own thread (no atomics): for
// tests and benchmarks to see that a mode really ran.
struct ReactorStats {
  uint64_t zc_sends = 0;          // SENDMSG_ZC submissions
  uint64_t zc_notifs = 0;         // their notifications
  uint64_t zc_copied = 0;         // notifications saying the kernel copied after all
  uint64_t multishot_arms = 0;    // multishot receives submitted
  uint64_t multishot_cqes = 0;    // receives completed into provided buffers
  uint64_t multishot_nobufs = 0;  // the ring ran dry (the receive is re-armed)
  uint64_t direct_recvs = 0;      // receives straight into the owner's memory
  uint64_t spin_recvs = 0;        // receives that a spinning reactor's recv() completed
  uint64_t direct_sends = 0;      // sends that a spinning reactor made with sendmsg() itself
  uint64_t spin_yields = 0;       // sched_yield()s of a spinning reactor that found nothing to do
};

// The provided-buffer ring behind multishot receives: equal buffers the kernel picks from,
// each given back as soon as the stream's owner has consumed its bytes.
class ProvidedBuffers {
 public:
  static constexpr uint16_t kGroup = 0;
  ProvidedBuffers() = default;
  ~ProvidedBuffers();
  ProvidedBuffers(const ProvidedBuffers&) = delete;
  ProvidedBuffers& operator=(const ProvidedBuffers&) = delete;
  // Maps the buffers and registers the ring; returns an error or empty.
  std::string init(io_uring* ring, uint32_t count, uint32_t size);
  uint8_t* buffer(uint16_t bid) { return mem_ + size_t(bid) * size_; }
  void recycle(uint16_t bid) {
    io_uring_buf_ring_add(br_, buffer(bid), size_, bid, io_uring_buf_ring_mask(count_), 0);
    io_uring_buf_ring_advance(br_, 1);
  }

 private:
  io_uring_buf_ring* br_ = nullptr;
  size_t ring_bytes_ = 0;
  uint8_t* mem_ = nullptr;
  size_t mem_bytes_ = 0;
  uint32_t count_ = 0, size_ = 0;
};

uint64_t monotonic_ns();

class Reactor {
 public:
  // The process defaults, with this poll mode and SQPOLL choice.
  explicit Reactor(unsigned entries = 4096, PollMode mode = PollMode::Interrupt, bool sqpoll = false);
  Reactor(unsigned entries, const ReactorOptions& o);
  ~Reactor();
  Reactor(const Reactor&) = delete;
  Reactor& operator=(const Reactor&) = delete;

  // An SQE to fill; submits queued entries first when the ring is full.
  io_uring_sqe* get_sqe();
  void prep(io_uring_sqe* sqe, Completion* c) { io_uring_sqe_set_data(sqe, c); }

  // One loop turn: submit what is queued, wait up to timeout_us (0 = don't block) for a
  // completion, dispatch every completion, run due timers and posted tasks.
  // Returns the number of completions handled.
  unsigned run_once(uint32_t timeout_us);
  // Loops until stop becomes true.
  void run(const std::atomic<bool>& stop);

  // Any thread: c->fn runs on this reactor's thread within a turn. No lock: a push onto a
  // list the reactor takes whole each turn, and a wake-up (the eventfd post() uses) only when
  // the list was empty, so a burst of completions costs the other thread one write.
  void complete_from_any_thread(RemoteCompletion* c);

  // FIFO: work runs in the order it was deferred.
  void defer(Deferred* d) {
    if (d->queued) return;
    d->queued = true;
    d->next = nullptr;
    if (deferred_tail_) deferred_tail_->next = d; else deferred_ = d;
    deferred_tail_ = d;
  }
  // Removes d if queued (for owners destroyed while work is pending).
  void undefer(Deferred* d);
  // Runs deferred work now (done automatically at the start of every loop turn).
  void run_deferred();

  void arm_timer(Timer* t, uint64_t delay_ns);
  void cancel_timer(Timer* t);

  // Cross-thread hand-off (control path only: accepted connections, shutdown, teardown).
  void post(std::function<void()> fn);

  uint64_t now_ns() const { return now_ns_; }
  const ReactorOptions& options() const { return opts_; }
  ReactorStats& stats() { return stats_; }
  // The reactor's provided-buffer ring, made on first use; nullptr if the kernel refused.
  ProvidedBuffers* provided_buffers();
  // True when the ring really runs with an SQ thread (the kernel may refuse one).
  bool sqpoll() const { return sqpoll_; }
  PollMode poll_mode() const { return mode_; }
  void set_poll_mode(PollMode m) { mode_ = m; }
  void set_spin_window_ns(uint64_t ns) { spin_window_ns_ = ns; }
  // Counts loop turns (run_once calls).
  uint64_t turn() const { return turn_; }
  // Time spent in turns that had work (a completion or a polled receive), from the clock
  // readings the loop makes anyway: a turn with work counts from when it started handling to
  // when the next turn starts. Read by the reactor's thread (it may publish it).
  uint64_t busy_ns() const { return busy_ns_; }
  // True while this loop turn spins and streams may receive by SpinRecv.
  bool spin_receiving() const { return spin_receiving_; }
  // Links r for polling each turn; false (and nothing linked) when the reactor is not
  // spinning or already polls spin_recv_max receives.
  bool add_spin_recv(SpinRecv* r);
  void remove_spin_recv(SpinRecv* r);
  uint32_t spin_recvs_linked() const { return spin_recv_count_; }
  io_uring* ring() { return &ring_; }
  int ring_fd() const { return ring_.ring_fd; }

  // The reactor that the calling thread is running, if any.
  static Reactor* current();

 private:
  void run_timers();
  void run_posted();
  void run_remote();
  void arm_wakeup();
  void init_ring(unsigned entries);
  unsigned poll_spin_recvs();
  void arm_spin_recvs();

  io_uring ring_{};
  ReactorOptions opts_;
  ReactorStats stats_;
  std::unique_ptr<ProvidedBuffers> pbuf_;
  bool pbuf_failed_ = false;
  PollMode mode_;
  bool sqpoll_ = false;
  bool taskrun_flag_ = false;     // the kernel flags pending completion work (see run_once)
  uint64_t now_ns_ = 0;
  uint64_t last_activity_ns_ = 0;
  uint64_t spin_window_ns_ = 50'000;
  uint64_t last_yield_ns_ = 0;
  bool spin_receiving_ = false;
  uint64_t turn_ = 0;
  uint64_t busy_ns_ = 0;
  uint64_t work_start_ns_ = 0;   // when this turn's handling started
  bool turn_had_work_ = false;   // the previous turn's, until the clock is read
  SpinRecv* spin_recvs_ = nullptr;  // doubly linked
  SpinRecv* spin_cursor_ = nullptr;  // the next to poll during poll_spin_recvs
  uint32_t spin_recv_count_ = 0;
  std::vector<Timer*> timers_;  // armed timers, a binary min-heap by deadline
  Deferred* deferred_ = nullptr;
  Deferred* deferred_tail_ = nullptr;

  int wake_fd_ = -1;               // eventfd: post() wakes a reactor blocked in io_uring
  uint64_t wake_buf_ = 0;
  OwnedCompletion<Reactor> wake_completion_{};
  std::mutex posted_mu_;
  std::vector<std::function<void()>> posted_;
  std::vector<std::function<void()>> running_;
  std::atomic<bool> has_posted_{false};
  std::atomic<RemoteCompletion*> remote_{nullptr};  // newest first; taken whole by run_remote
};

}  // namespace nvtcp::reactor
