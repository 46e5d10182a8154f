// SPDX-License-Identifier: Apache-2.0
#include "reactor/reactor.hpp"

#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "util/log.hpp"

namespace nvtcp::reactor {

namespace {
thread_local Reactor* tls_current = nullptr;
// How long a spinning reactor polls empty turns between two sched_yield()s.
constexpr uint64_t kSpinYieldNs = 10'000;
}

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

namespace {
std::mutex g_defaults_mu;
ReactorOptions g_defaults;
}  // namespace

ReactorOptions ReactorOptions::defaults() {
  std::lock_guard lk(g_defaults_mu);
  return g_defaults;
}

void ReactorOptions::set_defaults(const ReactorOptions& o) {
  std::lock_guard lk(g_defaults_mu);
  g_defaults = o;
}

namespace {
ReactorOptions with(ReactorOptions o, PollMode mode, bool sqpoll) {
  o.poll = mode;
  o.sqpoll = sqpoll;
  return o;
}
}  // namespace

Reactor* Reactor::current() { return tls_current; }

Reactor::Reactor(unsigned entries, PollMode mode, bool sqpoll)
    : Reactor(entries, with(ReactorOptions::defaults(), mode, sqpoll)) {}

void Reactor::init_ring(unsigned entries) {
  int rc = -EINVAL;
  if (opts_.sqpoll) {
    // The SQ thread submits and runs completion work itself, so the task-run flags (which
    // are about the submitting task) do not apply; one issuer still holds.
    io_uring_params p{};
    p.flags = IORING_SETUP_SQPOLL | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_CQSIZE;
    p.cq_entries = entries * 4;
    p.sq_thread_idle = opts_.sq_thread_idle_ms;
    if (opts_.sq_thread_cpu >= 0) {
      p.flags |= IORING_SETUP_SQ_AFF;
      p.sq_thread_cpu = unsigned(opts_.sq_thread_cpu);
    }
    rc = io_uring_queue_init_params(entries, &ring_, &p);
    if (rc == 0) {
      sqpoll_ = true;
      return;
    }
    log::warn("io_uring SQPOLL refused ({}); running without an SQ thread", strerror(-rc));
  }
  io_uring_params p{};
  // TASKRUN_FLAG: the kernel raises IORING_SQ_TASKRUN when completion work is waiting for
  // us, so a polling loop can skip io_uring_enter while there is none.
  p.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SINGLE_ISSUER |
            IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
  p.cq_entries = entries * 4;
  p.flags |= IORING_SETUP_CQSIZE;
  rc = io_uring_queue_init_params(entries, &ring_, &p);
  taskrun_flag_ = rc == 0;
  if (rc < 0) {
    // Older kernels lack some flags; fall back to a plain ring.
    io_uring_params plain{};
    plain.flags = IORING_SETUP_CQSIZE;
    plain.cq_entries = entries * 4;
    rc = io_uring_queue_init_params(entries, &ring_, &plain);
  }
  if (rc < 0) throw std::runtime_error(std::string("io_uring_queue_init: ") + strerror(-rc));
}

Reactor::Reactor(unsigned entries, const ReactorOptions& o) : opts_(o), mode_(o.poll) {
  init_ring(entries);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) throw std::runtime_error("eventfd failed");
  wake_completion_.owner = this;
  wake_completion_.fn = [](Completion* c, int, uint32_t) {
    static_cast<OwnedCompletion<Reactor>*>(c)->owner->arm_wakeup();
  };
  // Every io_uring_enter then skips looking the ring's file up (one thread uses it).
  io_uring_register_ring_fd(&ring_);
  now_ns_ = monotonic_ns();
  // DEFER_TASKRUN requires that only the creating thread submits; the owner thread calls
  // run()/run_once(), and a reactor is created on the thread that runs it.
  tls_current = this;
  arm_wakeup();
}

ProvidedBuffers::~ProvidedBuffers() {
  // The ring is unregistered with the io_uring it belongs to (which is gone, or goes first).
  if (br_) munmap(br_, ring_bytes_);
  if (mem_) munmap(mem_, mem_bytes_);
}

std::string ProvidedBuffers::init(io_uring* ring, uint32_t count, uint32_t size) {
  if (count == 0 || count > 32768 || (count & (count - 1)) || size == 0)
    return "recv_buffers must be a power of two up to 32768, recv_buffer_size above 0";
  count_ = count;
  size_ = size;
  ring_bytes_ = (size_t(count) * sizeof(io_uring_buf) + 4095) & ~size_t(4095);
  void* r = mmap(nullptr, ring_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (r == MAP_FAILED) return std::string("mmap: ") + strerror(errno);
  br_ = static_cast<io_uring_buf_ring*>(r);
  mem_bytes_ = size_t(count) * size;
  void* m = mmap(nullptr, mem_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (m == MAP_FAILED) return std::string("mmap: ") + strerror(errno);
  mem_ = static_cast<uint8_t*>(m);
  madvise(mem_, mem_bytes_, MADV_HUGEPAGE);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<uint64_t>(br_);
  reg.ring_entries = count;
  reg.bgid = kGroup;
  int rc = io_uring_register_buf_ring(ring, &reg, 0);
  if (rc < 0) return std::string("io_uring_register_buf_ring: ") + strerror(-rc);
  io_uring_buf_ring_init(br_);
  for (uint32_t i = 0; i < count; ++i)
    io_uring_buf_ring_add(br_, buffer(uint16_t(i)), size, uint16_t(i), io_uring_buf_ring_mask(count), int(i));
  io_uring_buf_ring_advance(br_, int(count));
  return {};
}

ProvidedBuffers* Reactor::provided_buffers() {
  if (pbuf_ || pbuf_failed_) return pbuf_.get();
  auto p = std::make_unique<ProvidedBuffers>();
  std::string err = p->init(&ring_, opts_.recv_buffers, opts_.recv_buffer_size);
  if (!err.empty()) {
    log::warn("multishot receive unavailable ({}); receiving one buffer at a time", err);
    pbuf_failed_ = true;
    return nullptr;
  }
  pbuf_ = std::move(p);
  return pbuf_.get();
}

Reactor::~Reactor() {
  if (tls_current == this) tls_current = nullptr;
  io_uring_queue_exit(&ring_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void Reactor::arm_wakeup() {
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_read(sqe, wake_fd_, &wake_buf_, sizeof(wake_buf_), 0);
  prep(sqe, &wake_completion_);
}

io_uring_sqe* Reactor::get_sqe() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  while (!sqe) {
    io_uring_submit(&ring_);
    // With an SQ thread the entries leave the ring only once it has read them.
    if (sqpoll_) io_uring_sqring_wait(&ring_);
    sqe = io_uring_get_sqe(&ring_);
  }
  return sqe;
}

unsigned Reactor::run_once(uint32_t timeout_us) {
  tls_current = this;
  ++turn_;
  io_uring_cqe* cqe = nullptr;
  run_deferred();
  // One clock reading per polling turn (a clock read in this VM costs ~100 ns: two a turn were
  // 3-7% of a spinning target's core); a turn that sleeps reads it again when it wakes. The
  // turn's handlers see the time the turn started, a few microseconds old at most.
  now_ns_ = monotonic_ns();
  if (turn_had_work_) busy_ns_ += now_ns_ - work_start_ns_;
  bool spin = mode_ == PollMode::Busy ||
              (mode_ == PollMode::Hybrid && now_ns_ - last_activity_ns_ < spin_window_ns_);
  spin_receiving_ = spin && opts_.spin_recv && !sqpoll_;
  // Going to sleep: the receives this reactor was polling go to io_uring, to wake it.
  if (!spin_receiving_ && spin_recvs_) arm_spin_recvs();
  if (spin || timeout_us == 0) {
    // The SQ thread posts completions by itself: look at the CQ ring, no system call
    // (io_uring_submit enters the kernel only to wake a sleeping SQ thread).
    if (sqpoll_ && !io_uring_cq_has_overflow(&ring_)) {
      io_uring_submit(&ring_);
    } else if (taskrun_flag_ && io_uring_sq_ready(&ring_) == 0 &&
               !(IO_URING_READ_ONCE(*ring_.sq.kflags) & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW))) {
      // Nothing to submit and no completion work pending in the kernel: a polling turn
      // costs no system call (CQEs already posted are read below).
    } else {
      io_uring_submit_and_get_events(&ring_);
    }
  } else {
    // Don't sleep past the next timer.
    const uint64_t now = now_ns_;
    uint64_t wait_ns = uint64_t(timeout_us) * 1000;
    if (!timers_.empty()) {
      const uint64_t due = timers_.front()->deadline_ns;
      wait_ns = std::min(wait_ns, due > now ? due - now : 0);
    }
    __kernel_timespec ts{};
    ts.tv_sec = static_cast<long long>(wait_ns / 1000000000ull);
    ts.tv_nsec = static_cast<long long>(wait_ns % 1000000000ull);
    io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
    now_ns_ = monotonic_ns();
  }
  work_start_ns_ = now_ns_;
  unsigned handled = 0;
  unsigned head;
  // Completions may queue new SQEs; those go out on the next turn, batched.
  io_uring_for_each_cqe(&ring_, head, cqe) {
    auto* c = static_cast<Completion*>(io_uring_cqe_get_data(cqe));
    int res = cqe->res;
    uint32_t flags = cqe->flags;
    io_uring_cq_advance(&ring_, 1);
    if (c && c->fn) c->fn(c, res, flags);
    ++handled;
  }
  if (spin_recvs_) handled += poll_spin_recvs();
  turn_had_work_ = handled != 0;
  if (handled) {
    last_activity_ns_ = now_ns_;
  } else if (spin && (sqpoll_ || now_ns_ - last_yield_ns_ >= kSpinYieldNs)) {
    // A spinning reactor with an SQ thread on the same core would starve it: let it run.
    // Without one, a spinning reactor still lets whatever else is runnable on its core go
    // first, on an empty turn at most every kSpinYieldNs: a peer it waits for on the same
    // core (a target and an offload engine on one CPU) then runs within microseconds, not
    // after the scheduler's time slice. Counting from the last yield rather than from the
    // start of a run of empty turns matters: a reactor with a little to do on most turns
    // would otherwise never yield, and the peer it feeds would wait (an engine sharing the
    // target's core carried 250 K IOPS that way against 350-410 K). Alone on its core,
    // sched_yield() returns at once: at most one system call per kSpinYieldNs.
    sched_yield();
    last_yield_ns_ = now_ns_;
    ++stats_.spin_yields;
  }
  if (!timers_.empty() && timers_.front()->deadline_ns <= now_ns_) run_timers();
  if (has_posted_.load(std::memory_order_acquire)) run_posted();
  if (remote_.load(std::memory_order_acquire)) run_remote();
  return handled;
}

void Reactor::run(const std::atomic<bool>& stop) {
  while (!stop.load(std::memory_order_relaxed)) run_once(100000);
}

bool Reactor::add_spin_recv(SpinRecv* r) {
  if (r->linked) return true;
  if (!spin_receiving_ || spin_recv_count_ >= opts_.spin_recv_max) return false;
  // Pushed at the front, as timers are: a pass (poll_spin_recvs) walks on from where it
  // is, so a receive linked again during it waits for the next pass.
  r->prev = nullptr;
  r->next = spin_recvs_;
  if (spin_recvs_) spin_recvs_->prev = r;
  spin_recvs_ = r;
  r->linked = true;
  ++spin_recv_count_;
  return true;
}

void Reactor::remove_spin_recv(SpinRecv* r) {
  if (!r->linked) return;
  if (r == spin_cursor_) spin_cursor_ = r->next;
  if (r->prev) r->prev->next = r->next; else spin_recvs_ = r->next;
  if (r->next) r->next->prev = r->prev;
  r->next = r->prev = nullptr;
  r->linked = false;
  --spin_recv_count_;
}

unsigned Reactor::poll_spin_recvs() {
  // One pass over the receives linked now. One that completes is usually linked again at
  // the front (its next receive), behind the cursor. The cursor lives in the reactor so
  // that a receive unlinked by another's handler (a stream closed or destroyed) moves it
  // on rather than leaving it dangling.
  unsigned progressed = 0;
  spin_cursor_ = spin_recvs_;
  while (spin_cursor_) {
    SpinRecv* r = spin_cursor_;
    spin_cursor_ = r->next;
    if (r->poll(r)) ++progressed;
  }
  spin_cursor_ = nullptr;
  return progressed;
}

void Reactor::arm_spin_recvs() {
  while (spin_recvs_) {
    SpinRecv* r = spin_recvs_;
    remove_spin_recv(r);
    r->arm(r);
  }
}

void Reactor::undefer(Deferred* d) {
  if (!d->queued) return;
  Deferred* prev = nullptr;
  for (Deferred* it = deferred_; it; prev = it, it = it->next) {
    if (it != d) continue;
    if (prev) prev->next = it->next; else deferred_ = it->next;
    if (deferred_tail_ == it) deferred_tail_ = prev;
    break;
  }
  d->next = nullptr;
  d->queued = false;
}

void Reactor::run_deferred() {
  while (deferred_) {
    Deferred* d = deferred_;
    deferred_ = d->next;
    if (!deferred_) deferred_tail_ = nullptr;
    d->next = nullptr;
    d->queued = false;
    d->fn(d);
  }
}

namespace {

// The timer heap's moves: a timer whose deadline went down goes up, and the other way.
void place(std::vector<Timer*>& heap, uint32_t i, Timer* t) {
  heap[i] = t;
  t->heap_index = i;
}

void sift_up(std::vector<Timer*>& heap, uint32_t i) {
  Timer* t = heap[i];
  while (i > 0) {
    const uint32_t parent = (i - 1) / 2;
    if (heap[parent]->deadline_ns <= t->deadline_ns) break;
    place(heap, i, heap[parent]);
    i = parent;
  }
  place(heap, i, t);
}

void sift_down(std::vector<Timer*>& heap, uint32_t i) {
  Timer* t = heap[i];
  const auto n = uint32_t(heap.size());
  for (;;) {
    uint32_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && heap[child + 1]->deadline_ns < heap[child]->deadline_ns) ++child;
    if (heap[child]->deadline_ns >= t->deadline_ns) break;
    place(heap, i, heap[child]);
    i = child;
  }
  place(heap, i, t);
}

}  // namespace

void Reactor::arm_timer(Timer* t, uint64_t delay_ns) {
  const uint64_t before = t->deadline_ns;
  t->deadline_ns = monotonic_ns() + delay_ns;
  if (!t->linked) {
    t->linked = true;
    timers_.push_back(t);
    sift_up(timers_, uint32_t(timers_.size() - 1));
  } else if (t->deadline_ns < before) {
    sift_up(timers_, t->heap_index);
  } else {
    sift_down(timers_, t->heap_index);
  }
}

void Reactor::cancel_timer(Timer* t) {
  if (!t->linked) return;
  const uint32_t i = t->heap_index;
  Timer* last = timers_.back();
  timers_.pop_back();
  if (last != t) {
    place(timers_, i, last);
    sift_down(timers_, i);
    sift_up(timers_, last->heap_index);
  }
  t->linked = false;
  t->deadline_ns = 0;
}

void Reactor::run_timers() {
  // A fired timer leaves the heap before its callback, so that the callback may re-arm or
  // destroy it; one re-armed for now or earlier runs again in this turn.
  while (!timers_.empty() && timers_.front()->deadline_ns <= now_ns_) {
    Timer* t = timers_.front();
    cancel_timer(t);
    t->fn(t);
  }
}

void Reactor::post(std::function<void()> fn) {
  {
    std::lock_guard lk(posted_mu_);
    posted_.push_back(std::move(fn));
  }
  has_posted_.store(true, std::memory_order_release);
  uint64_t one = 1;
  ssize_t n = write(wake_fd_, &one, sizeof(one));
  (void)n;
}

void Reactor::complete_from_any_thread(RemoteCompletion* c) {
  RemoteCompletion* head = remote_.load(std::memory_order_relaxed);
  do {
    c->next = head;
  } while (!remote_.compare_exchange_weak(head, c, std::memory_order_release, std::memory_order_relaxed));
  // The list was empty: the reactor may be asleep and nothing else will wake it. Otherwise
  // the push that made it non-empty wrote, and the reactor takes this one with it.
  if (!head) {
    uint64_t one = 1;
    ssize_t n = write(wake_fd_, &one, sizeof(one));
    (void)n;
  }
}

void Reactor::run_remote() {
  // Taking the whole list needs no compare-and-swap loop (and has no ABA): pushes that come
  // meanwhile start a new list, and wake the reactor again.
  RemoteCompletion* newest_first = remote_.exchange(nullptr, std::memory_order_acquire);
  RemoteCompletion* oldest_first = nullptr;
  while (newest_first) {
    RemoteCompletion* next = newest_first->next;
    newest_first->next = oldest_first;
    oldest_first = newest_first;
    newest_first = next;
  }
  while (oldest_first) {
    RemoteCompletion* next = oldest_first->next;
    oldest_first->fn(oldest_first);
    oldest_first = next;
  }
}

void Reactor::run_posted() {
  {
    std::lock_guard lk(posted_mu_);
    running_.swap(posted_);
    has_posted_.store(false, std::memory_order_release);
  }
  for (auto& fn : running_) fn();
  running_.clear();
}

}  // namespace nvtcp::reactor
