// SPDX-License-Identifier: Apache-2.0
#include "host/engine_client.hpp"

#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include <fmt/format.h>

#include <fmt/ranges.h>

#include "host/namespace_scan.hpp"
#include "nvtcp/identify.hpp"
#include "nvtcp/log_pages.hpp"
#include "reactor/reactor.hpp"
#include "util/log.hpp"
#include "wire/commands.hpp"
#include "wire/fabrics.hpp"
#include "wire/features.hpp"

namespace nvtcp::host::detail {

using nvme::Sqe;
namespace prop = nvme::prop;

namespace {
constexpr uint32_t kQueueEntries = 1024;        // of every queue the engine lays out
constexpr uint32_t kAdminBufferBytes = 1u << 20; // admin data, at the start of the region
constexpr uint32_t kMaxIoQueues = 128;

using shm::detail::load_acquire;
using shm::detail::store_release;
using reactor::monotonic_ns;

// Waits up to timeout_ms for an interrupt vector (a pipe's read end) to be signalled, and
// takes the signal.
void wait_vector(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) > 0) shm::drain_fd(fd);
}

// Linux 5.14 and later wake an edge-triggered epoll waiter on every write to a pipe; 5.5 to
// 5.13 only when the pipe was empty, which a pipe that keeps its bytes (VectorWait) rarely is.
bool pipe_writes_always_wake() {
  utsname u{};
  unsigned major = 0, minor = 0;
  if (::uname(&u) != 0 || std::sscanf(u.release, "%u.%u", &major, &minor) != 2) return false;
  return major > 5 || (major == 5 && minor >= 14);
}

// Sleeps on an I/O queue's interrupt vector through an edge-triggered epoll: a wake costs one
// system call, where poll() and then read() cost two and set up and took down poll's wait
// queue each time (three quarters of fio's CPU per I/O through the engine went to sleeping
// and waking, RESULTS 2026-12-06). Each signal written to the pipe is an edge, so the bytes
// can stay: the pipe is emptied every kDrainEvery waits and after every wait that timed out.
// The engine writes a byte per arm_interrupt() that a completion meets, and a queue may arm
// and then find its completion without waiting, so bytes can outrun waits; a pipe that fills
// takes no more signals and makes no edge, and the first wait that times out empties it.
// Emptying after a wait, never before one, loses no wake of this queue (it looks at its CQ
// next); on a vector shared by several queues it can take another queue's byte before that
// queue's epoll sees it, which costs that queue one wait of its timeout (1 ms on a shared
// vector), as poll() and read() could. Where epoll cannot be used, poll() and read().
class VectorWait {
 public:
  explicit VectorWait(int fd) : fd_(fd) {
    static const bool edges = pipe_writes_always_wake();
    if (fd < 0 || !edges) return;
    ep_ = ::epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLET;
    if (ep_ >= 0 && ::epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      ::close(ep_);
      ep_ = -1;
    }
  }
  ~VectorWait() {
    if (ep_ >= 0) ::close(ep_);
  }
  VectorWait(const VectorWait&) = delete;
  VectorWait& operator=(const VectorWait&) = delete;

  void wait(int timeout_ms) {
    if (ep_ < 0) return wait_vector(fd_, timeout_ms);
    epoll_event ev;
    const int n = ::epoll_wait(ep_, &ev, 1, timeout_ms);
    if (n <= 0 || ++waits_ % kDrainEvery == 0) shm::drain_fd(fd_);
  }

 private:
  static constexpr uint32_t kDrainEvery = 256;
  int fd_;
  int ep_ = -1;
  uint32_t waits_ = 0;
};

void set_sgl(Sqe& s, uint64_t offset, uint32_t len) {
  s.flags = uint8_t((s.flags & ~nvme::kSqeFlagsPsdtMask) | nvme::kSqeFlagsPsdtSgl);
  std::memset(&s.sgl, 0, sizeof(s.sgl));
  if (len == 0) return;
  s.sgl.addr = offset;
  s.sgl.length = len;
  s.sgl.type = 0x00;  // Data Block: the address is an offset into the data region
}
}  // namespace

// ---------------------------------------------------------------- I/O queue

class EngineIoQueue final : public IoQueue {
 public:
  EngineIoQueue(std::shared_ptr<EngineClient> c, uint16_t qid, uint32_t depth, int vector_fd,
                const shm::QueueMemory& m)
      : c_(std::move(c)), qid_(qid), depth_(depth), vector_fd_(vector_fd), vector_wait_(vector_fd), app_(m),
        reqs_(depth) {
    for (uint32_t i = depth; i-- > 0;) free_.push_back(uint16_t(i));
  }

  // The engine is gone (its lifeline closed) or its controller failed: every command still
  // outstanding completes with a transport error, as over a lost connection that will not
  // come back, so that no application waits forever.
  bool engine_gone() {
    if (!c_->failed() && !c_->lifeline_closed(0)) return false;
    fail_outstanding();
    return true;
  }
  void fail_outstanding() {
    for (uint16_t cid = 0; cid < depth_; ++cid) {
      Req& r = reqs_[cid];
      if (!r.cb) continue;
      CompletionFn cb = r.cb;
      r.cb = nullptr;
      free_.push_back(cid);
      --outstanding_;
      cb(r.ctx, Completion{nvme::sc::TransportError});
    }
  }

  ~EngineIoQueue() override {
    // Delete I/O SQ answers once every command of the queue is answered (however long the
    // engine's recovery takes: the data buffers are in use until then); those answers are
    // delivered here, then the CQ goes.
    ring();  // commands submitted since the last poll: the engine answers them too
    Sqe del{};
    del.opc = uint8_t(nvme::AdminOpcode::DeleteIoSq);
    del.cdw10 = qid_;
    const Completion d = c_->admin(del, nullptr, 0, false, EngineClient::kUntilGone);
    reap();
    if (d.status.ok()) {
      del.opc = uint8_t(nvme::AdminOpcode::DeleteIoCq);
      c_->admin(del, nullptr, 0, false);
    }
    fail_outstanding();
  }

  HostError submit(const Sqe& sqe, void* data, uint32_t len, bool, CompletionFn cb, void* ctx) override {
    // No fabrics command on an I/O queue (the engine would answer Invalid Opcode anyway).
    if (sqe.opc == uint8_t(nvme::AdminOpcode::Fabrics)) return HostError::refused(HostError::Kind::Invalid, EINVAL);
    int64_t off = 0;
    if (len && (off = c_->offset_of(data, len)) < 0) return HostError::refused(HostError::Kind::Invalid, EFAULT);
    if (c_->failed()) return HostError::refused(HostError::Kind::Transport, ENOTCONN);
    if (free_.empty()) return HostError::refused(HostError::Kind::Busy, EBUSY);
    const uint16_t cid = free_.back();
    free_.pop_back();
    reqs_[cid] = {cb, ctx};
    if (outstanding_ == 0) last_progress_ns_ = monotonic_ns();
    Sqe s = sqe;
    s.cid = cid;
    set_sgl(s, uint64_t(off), len);
    app_.submit(s);  // the SQ has a slot more than the queue's depth
    ++outstanding_;
    // The doorbell (a store the engine's core polls, then a full fence before reading its
    // EventIdx) is rung once per batch: every kDoorbellBatch commands, and at the next poll
    // for the rest, as the TCP queue pairs send what was queued at their next poll. Rung per
    // command, its fence was the most expensive instruction of fio's job thread.
    if (app_.unrung() >= kDoorbellBatch) ring();
    return {};
  }

  int poll(uint32_t timeout_us) override {
    ring();
    int n = reap();
    if (n) return n;
    if (outstanding_ == 0) return 0;
    // A dead engine answers nothing. A polling application looks at its lifeline (a system
    // call) only once no answer has come for kLifelineCheckNs, so that a healthy engine
    // costs it none; a sleeping one looks whenever a wait ends empty-handed.
    const uint64_t now = monotonic_ns();
    if (now - last_progress_ns_ > kLifelineCheckNs) {
      last_progress_ns_ = now;
      if (engine_gone()) return 0;
    }
    if (timeout_us == 0) return 0;
    const uint64_t deadline = monotonic_ns() + uint64_t(timeout_us) * 1000;
    // Polling (no interrupts asked for), or hybrid: spin a while before sleeping.
    const uint64_t spin_until = vector_fd_ < 0 ? deadline : c_->polling() ? monotonic_ns() + 50'000 : 0;
    while (monotonic_ns() < spin_until) {
      if ((n = reap())) return n;
    }
    while (vector_fd_ >= 0 && monotonic_ns() < deadline) {
      const uint64_t left_us = (deadline - monotonic_ns()) / 1000;
      const uint64_t wait_ms = c_->vectors_shared() ? 1 : std::max<uint64_t>(1, left_us / 1000);
      app_.arm_interrupt();  // then one more look: a completion posted just before raised none
      if ((n = reap())) return n;
      vector_wait_.wait(int(wait_ms));
      if ((n = reap())) return n;
      if (engine_gone()) return 0;
    }
    return n;
  }

  uint16_t qid() const override { return qid_; }
  uint32_t depth() const override { return depth_; }
  uint32_t outstanding() const override { return outstanding_; }
  bool failed() const override { return c_->failed(); }
  bool ready() const override { return !c_->failed(); }
  uint32_t reconnects() const override { return 0; }  // the engine reconnects; the queue stays

 private:
  struct Req {
    CompletionFn cb = nullptr;
    void* ctx = nullptr;
  };

  void ring() {
    if (app_.ring_sq()) c_->kick();
  }

  int reap() {
    int n = 0;
    nvme::Cqe cqe;
    while (app_.poll(cqe)) {
      if (cqe.cid >= depth_ || !reqs_[cqe.cid].cb) {
        log::warn("engine queue {}: completion for command {} that is not outstanding", qid_, cqe.cid);
        continue;
      }
      Req r = reqs_[cqe.cid];
      reqs_[cqe.cid].cb = nullptr;
      free_.push_back(cqe.cid);
      --outstanding_;
      ++n;
      r.cb(r.ctx, Completion{nvme::Status::from_cqe(cqe.status), cqe.dw0, cqe.dw1});
    }
    if (n) last_progress_ns_ = monotonic_ns();
    if (n && app_.ring_cq()) c_->kick();
    return n;
  }

  std::shared_ptr<EngineClient> c_;
  uint16_t qid_;
  uint32_t depth_;
  int vector_fd_;
  VectorWait vector_wait_;
  shm::AppQueuePair app_;
  std::vector<Req> reqs_;
  std::vector<uint16_t> free_;  // command IDs (index into reqs_)
  uint32_t outstanding_ = 0;
  static constexpr uint64_t kLifelineCheckNs = 1'000'000'000;
  static constexpr uint32_t kDoorbellBatch = 8;
  uint64_t last_progress_ns_ = 0;  // the last answer, or the first command into an idle queue
};

// ---------------------------------------------------------------- controller

std::shared_ptr<EngineClient> EngineClient::connect(const TransportId& trid, const ControllerOptions& opts,
                                                    HostError& err) {
  std::shared_ptr<EngineClient> c(new EngineClient());
  c->trid_ = trid;
  c->opts_ = opts;
  // Default: interrupts (see ControllerOptions::poll).
  c->polling_ = opts.poll == PollMode::Busy || opts.poll == PollMode::Hybrid;
  if (!trid.hostnqn.empty() || !opts.hostnqn.empty()) {
    c->hostnqn_ = !trid.hostnqn.empty() ? trid.hostnqn : opts.hostnqn;
  } else {
    uint8_t id[16];
    std::random_device rd;
    for (auto& b : id) b = uint8_t(rd());
    c->hostnqn_ = default_hostnqn(id);
  }
  if (opts.engine_region_bytes < 2 * kAdminBufferBytes) {
    err = HostError::make(HostError::Kind::Address,
                          fmt::format("engine_region_bytes {} is below the {} bytes minimum", opts.engine_region_bytes,
                                      2 * kAdminBufferBytes));
    return nullptr;
  }
  shm::AttachRequest req;
  const uint32_t io = std::clamp<uint32_t>(opts.io_queues, 1, kMaxIoQueues);
  req.queue_pairs = io + 1;
  req.queue_entries = kQueueEntries;
  req.vectors = std::min<uint32_t>(req.queue_pairs, shm::kMaxVectors);
  req.data_bytes = opts.engine_region_bytes;
  std::strncpy(req.subnqn, trid.subnqn.c_str(), sizeof(req.subnqn) - 1);
  std::string why;
  if (!shm::attach(trid.traddr, req, c->at_, why)) {
    // The engine is reached through the address (a UNIX socket path): not reaching it, or
    // being refused by it, is the address not being usable.
    err = HostError::make(HostError::Kind::Address, std::move(why));
    return nullptr;
  }

  c->data_ = c->at_.data();
  c->admin_buf_ = c->data_;
  c->admin_buf_len_ = kAdminBufferBytes;
  c->io_base_ = c->data_ + kAdminBufferBytes;
  c->io_end_ = c->data_ + c->at_.layout().data_bytes;
  c->free_[kAdminBufferBytes] = c->at_.layout().data_bytes - kAdminBufferBytes;
  c->admin_ = std::make_unique<shm::AppQueuePair>(c->at_.queue_pair(0));
  if (!c->enable(err)) return nullptr;

  Sqe id{};
  id.opc = uint8_t(nvme::AdminOpcode::Identify);
  id.cdw10 = 0x01;
  Completion cpl = c->admin(id, c->ident_, sizeof(c->ident_), false);
  if (!cpl.status.ok()) {
    err = HostError::from_status(
        cpl.status, fmt::format("Identify Controller through the engine: {}", nvme::status_name(cpl.status)));
    return nullptr;
  }
  const auto* ic = reinterpret_cast<const nvme::IdentifyController*>(c->ident_);
  // The engine's controller copies the target's MDTS: any value up to 255 (4 KiB pages, as
  // the engine's own CAP.MPSMIN is 0).
  c->max_transfer_ = detail::largest_transfer(ic->mdts, 0, 1u << 30);
  Sqe nq{};
  nq.opc = uint8_t(nvme::AdminOpcode::SetFeatures);
  nq.cdw10 = wire::kFeatureNumberOfQueues;
  nq.cdw11 = (io - 1) | ((io - 1) << 16);
  cpl = c->admin(nq, nullptr, 0, false);
  if (!cpl.status.ok()) {
    err = HostError::from_status(cpl.status, fmt::format("Set Features (Number of Queues) through the engine: {}",
                                                         nvme::status_name(cpl.status)));
    return nullptr;
  }
  c->granted_ = std::min(cpl.dw0 & 0xFFFF, cpl.dw0 >> 16) + 1;
  c->qid_used_.assign(c->granted_ + 1, false);
  // Notices first, then the scan: a change in between is reported, not lost.
  c->start_notices();
  std::string why_not;
  std::lock_guard lk(c->scan_mu_);
  if (!c->scan_locked(nullptr, false, why_not) && c->failed()) {
    err = HostError::make(HostError::Kind::Transport, "scanning the namespaces through the engine: " + why_not);
    return nullptr;
  }
  return c;
}

EngineClient::~EngineClient() {
  shutdown();
  if (notice_fd_ >= 0) ::close(notice_fd_);
}

void EngineClient::stop_notices() {
  notice_stop_.store(true);
  if (notice_fd_ >= 0) shm::signal_eventfd(notice_fd_);
  if (!notice_thread_.joinable()) return;
  if (notice_thread_.get_id() == std::this_thread::get_id()) notice_thread_.detach();  // see the header
  else notice_thread_.join();
}

void EngineClient::shutdown() {
  stop_notices();
  if (!at_.region() || gone_.load()) return;
  // A normal shutdown notice (CC.SHN = 01b); the engine says when it is done.
  shm::ControllerRegisters& r = at_.registers();
  store_release(r.cc, load_acquire(r.cc) | (1u << prop::kCcShnShift));
  kick();
  wait_csts(prop::kCstsShstMask, prop::kCstsShstComplete, 2000);
  gone_.store(true);
}

void EngineClient::kick() const { shm::signal_fd(at_.kick_fd()); }

bool EngineClient::failed() const {
  return gone_.load(std::memory_order_relaxed) || (load_acquire(at_.registers().csts) & prop::kCstsFatal);
}

uint16_t EngineClient::cntlid() const { return reinterpret_cast<const nvme::IdentifyController*>(ident_)->cntlid; }

bool EngineClient::wait_csts(uint32_t mask, uint32_t want, uint32_t timeout_ms) {
  const uint64_t deadline = monotonic_ns() + uint64_t(timeout_ms) * 1'000'000;
  for (;;) {
    const uint32_t csts = load_acquire(at_.registers().csts);
    if ((csts & mask) == want) return true;
    if ((csts & prop::kCstsFatal) && !(mask & prop::kCstsFatal)) return false;
    if (monotonic_ns() > deadline) return false;
    if (lifeline_closed(1)) return false;
  }
}

bool EngineClient::enable(HostError& err) {
  // IOSQES 6 (64 bytes), IOCQES 4 (16 bytes), then EN.
  store_release(at_.registers().cc, prop::kCcEnableNvm);
  kick();
  if (!wait_csts(prop::kCstsReady, prop::kCstsReady, opts_.connect_timeout_ms)) {
    err = gone_ ? HostError::make(HostError::Kind::Transport, "the engine closed the attachment")
                : HostError::make(HostError::Kind::Timeout, "the engine's controller did not become ready (CSTS.RDY)");
    return false;
  }
  return true;
}

Completion EngineClient::admin(const Sqe& sqe, void* data, uint32_t len, bool to_controller, uint32_t wait_ms) {
  std::lock_guard lk(admin_mu_);
  if (len > admin_buf_len_) return Completion{nvme::sc::InvalidField};
  if (failed()) return Completion{nvme::sc::TransportError};
  Sqe s = sqe;
  if (++admin_cid_ == kAerCid) admin_cid_ = 0;
  s.cid = admin_cid_;
  set_sgl(s, 0, len);
  if (len && to_controller) std::memcpy(admin_buf_, data, len);
  admin_->submit(s);
  admin_->ring_sq();
  kick();  // admin commands always wake the engine's control thread
  const uint64_t deadline = wait_ms == kUntilGone ? UINT64_MAX
                            : monotonic_ns() + uint64_t(wait_ms ? wait_ms : opts_.admin_timeout_ms) * 1'000'000;
  const int vec0 = at_.vector_fds().empty() ? -1 : at_.vector_fds()[0];
  nvme::Cqe c;
  for (;;) {
    while (admin_->poll(c)) {
      admin_->ring_cq();
      if (c.cid == kAerCid) route_admin_cqe_locked(c);
      if (c.cid != s.cid) continue;  // the AER's, or a late answer to a command given up on
      const Completion out{nvme::Status::from_cqe(c.status), c.dw0, c.dw1};
      if (out.status.ok() && len && !to_controller) std::memcpy(data, admin_buf_, len);
      return out;
    }
    if (monotonic_ns() > deadline || failed()) return Completion{nvme::sc::TransportError};
    if (vec0 >= 0) wait_vector(vec0, 1);
    lifeline_closed(0);
  }
}

// ---------------------------------------------------------------- namespace notices

void EngineClient::start_notices() {
  const auto* id = reinterpret_cast<const nvme::IdentifyController*>(ident_);
  if (!(id->oaes & wire::kAecNamespaceAttribute)) {
    log::info("{} through the engine: no namespace attribute notices (OAES {:#x}); namespace changes will be seen "
              "only at rescan_namespaces()", trid_.subnqn, uint32_t(id->oaes));
    return;
  }
  const Completion c = admin(wire::cmd::set_features(wire::kFeatureAsyncEventConfig, wire::kAecNamespaceAttribute),
                             nullptr, 0, false);
  if (!c.status.ok()) {
    log::warn("{} through the engine: Set Features (Asynchronous Event Configuration): {}; namespace changes will be "
              "seen only at rescan_namespaces()", trid_.subnqn, nvme::status_name(c.status));
    return;
  }
  notice_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (notice_fd_ < 0) {
    log::warn("{} through the engine: eventfd: {}; namespace changes will be seen only at rescan_namespaces()",
              trid_.subnqn, std::strerror(errno));
    return;
  }
  notice_thread_ = std::thread([this] { notice_loop(); });
}

void EngineClient::submit_aer_locked() {
  if (aer_outstanding_ || failed()) return;
  Sqe s = wire::cmd::async_event_request();
  s.cid = kAerCid;
  set_sgl(s, 0, 0);
  admin_->submit(s);
  admin_->ring_sq();
  kick();
  aer_outstanding_ = true;
}

void EngineClient::route_admin_cqe_locked(const nvme::Cqe& c) {
  aer_outstanding_ = false;
  aer_done_ = true;
  aer_cqe_ = c;
  shm::signal_eventfd(notice_fd_);
}

// The AER's answer comes on the admin CQ, read by whoever holds admin_mu_: a synchronous
// command in flight routes it here (and signals notice_fd_); with none, this thread reads the
// CQ itself when vector 0 or the lifeline wakes it (and once a second, in case another waiter
// took the vector's signal).
void EngineClient::notice_loop() {
  pthread_setname_np(pthread_self(), "nvtcp-engevt");
  {
    std::lock_guard lk(admin_mu_);
    submit_aer_locked();
  }
  const int vec0 = at_.vector_fds().empty() ? -1 : at_.vector_fds()[0];
  while (!notice_stop_.load()) {
    pollfd p[3] = {{notice_fd_, POLLIN, 0}, {at_.socket(), POLLRDHUP, 0}, {vec0, POLLIN, 0}};
    ::poll(p, vec0 >= 0 ? 3 : 2, 1000);
    if (notice_stop_.load()) return;
    if (p[0].revents & POLLIN) shm::drain_fd(notice_fd_);
    if (vec0 >= 0 && (p[2].revents & POLLIN)) shm::drain_fd(vec0);
    if (lifeline_closed(0) || failed()) return;  // nothing more will come
    nvme::Cqe c{};
    bool answered = false;
    {
      std::lock_guard lk(admin_mu_);
      nvme::Cqe x;
      while (admin_->poll(x)) {
        admin_->ring_cq();
        if (x.cid == kAerCid) route_admin_cqe_locked(x);  // anything else: a command given up on
      }
      answered = std::exchange(aer_done_, false);
      c = aer_cqe_;
      if (answered && nvme::Status::from_cqe(c.status).ok()) submit_aer_locked();  // the next event may wait for it
    }
    if (!answered) continue;
    const nvme::Status st = nvme::Status::from_cqe(c.status);
    if (!st.ok()) {
      // Any other status would only come back again: not asking again is what hosts do.
      if (!failed())
        log::warn("{} through the engine: Asynchronous Event Request failed: {}; namespace changes will be seen only "
                  "at rescan_namespaces()", trid_.subnqn, nvme::status_name(st));
      return;
    }
    const uint8_t type = c.dw0 & 0x7, info = (c.dw0 >> 8) & 0xFF;
    if (type == uint8_t(nvme::AsyncEventType::Notice) && info == nvme::kAsyncNoticeNamespaceChanged)
      rescan_after_notice();
    else
      log::info("{} through the engine: asynchronous event {:#010x} ignored", trid_.subnqn, c.dw0);
  }
}

void EngineClient::rescan_after_notice() {
  std::vector<uint8_t> log(nvme::kChangedNamespacesMax * 4);
  const uint32_t len = uint32_t(log.size());
  // RAE cleared: reading the list lets the engine report the next change.
  const Completion c = admin(wire::cmd::get_log_page(uint8_t(nvme::LogPageId::ChangedNamespaces), nvme::kNsidAll, len),
                             log.data(), len, false);
  bool all = true;
  std::vector<uint32_t> listed;
  if (c.status.ok()) listed = parse_changed_namespaces(log.data(), len, all);
  else log::warn("{} through the engine: reading the changed-namespace log: {}", trid_.subnqn, nvme::status_name(c.status));
  all = all || listed.empty();
  log::info("{} through the engine: namespace attribute notice: rescanning {}", trid_.subnqn,
            all ? std::string("every namespace") : fmt::format("namespace(s) {}", fmt::join(listed, ", ")));
  std::string err;
  std::lock_guard lk(scan_mu_);
  if (!scan_locked(all ? nullptr : &listed, true, err))
    log::warn("{} through the engine: namespace rescan failed: {}", trid_.subnqn, err);
}

std::vector<uint32_t> EngineClient::active_namespaces() const {
  std::lock_guard lk(known_mu_);
  std::vector<uint32_t> out;
  for (const auto& [nsid, ni] : known_) out.push_back(nsid);
  return out;
}

bool EngineClient::namespace_info(uint32_t nsid, NamespaceInfo& out, std::string& err) const {
  std::lock_guard lk(known_mu_);
  auto it = known_.find(nsid);
  if (it == known_.end()) {
    err = fmt::format("namespace {} is not active (as of the last scan)", nsid);
    return false;
  }
  out = it->second;
  return true;
}

std::vector<uint32_t> EngineClient::query_active_namespaces() {
  std::vector<uint32_t> out;
  alignas(8) uint8_t buf[4096];
  // The engine passes on what its target says: the same bounds as the controller's own scan
  // (NN/1024 pages, kMaxActiveNamespaces NSIDs, NSIDs rising within NN).
  const uint32_t nn = reinterpret_cast<const nvme::IdentifyController*>(ident_)->nn;
  const uint32_t max_pages = active_list_max_pages(nn);
  uint32_t after = 0;
  for (uint32_t page = 0; page < max_pages; ++page) {
    const Completion c = admin(wire::cmd::identify(uint8_t(nvme::Cns::ActiveNamespaceList), after), buf, sizeof(buf),
                               false);
    if (!c.status.ok()) break;
    std::string why;
    const ActiveListPage r = append_active_list_page(buf, after, nn, out, why);
    if (r == ActiveListPage::Malformed) {
      log::warn("{} through the engine: active namespace list, page {}: {}; using the {} NSIDs before it", trid_.subnqn,
                page + 1, why, out.size());
      break;
    }
    if (r == ActiveListPage::End) break;
    after = out.back();
  }
  return out;
}

bool EngineClient::identify_namespace(uint32_t nsid, NamespaceInfo& out, std::string& err) {
  alignas(8) uint8_t buf[4096];
  const Completion c = admin(wire::cmd::identify(uint8_t(nvme::Cns::Namespace), nsid), buf, sizeof(buf), false);
  if (!c.status.ok()) {
    err = fmt::format("Identify Namespace {}: {}", nsid, nvme::status_name(c.status));
    return false;
  }
  HostError e;
  if (namespace_from_identify(nsid, *reinterpret_cast<const nvme::IdentifyNamespace*>(buf), out, e)) return true;
  err = e.message;
  return false;
}

bool EngineClient::rescan_namespaces(std::string& err) {
  if (notice_thread_.joinable() && std::this_thread::get_id() == notice_thread_.get_id()) {
    err = "rescan_namespaces() called on the notice thread (from on_namespace_change?)";
    return false;
  }
  std::lock_guard lk(scan_mu_);
  return scan_locked(nullptr, true, err);
}

bool EngineClient::scan_locked(const std::vector<uint32_t>* listed, bool report, std::string& err) {
  if (failed()) {
    err = "the engine's controller has stopped";
    return false;
  }
  std::map<uint32_t, NamespaceInfo> now;
  if (listed) now = known_;
  const std::vector<uint32_t> ids = listed ? *listed : query_active_namespaces();
  for (uint32_t nsid : ids) {
    NamespaceInfo ni;
    std::string why;
    // Inactive now (NSZE 0), or a format a host cannot use: not a namespace to do I/O on.
    if (identify_namespace(nsid, ni, why)) now[nsid] = ni;
    else now.erase(nsid);
    // A scan the engine did not answer says nothing about the namespaces: nothing changes.
    if (failed()) {
      err = "the engine's controller stopped during the scan";
      return false;
    }
  }
  const std::vector<NamespaceChange> changes = diff_namespaces(known_, now);
  std::vector<std::pair<uint32_t, uint32_t>> sizes;
  for (const auto& [nsid, ni] : now) sizes.emplace_back(nsid, ni.block_size);
  // The data path first: a namespace listed is one I/O can already be sent to.
  block_sizes_->publish(sizes);
  {
    // Under the lock with the new state: whoever lists a namespace sees the generation moved.
    std::lock_guard lk(known_mu_);
    known_ = std::move(now);
    if (!changes.empty()) ns_generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  if (changes.empty()) return true;
  for (const NamespaceChange& ch : changes) {
    log::info("{} through the engine: {}", trid_.subnqn, describe(ch));
    if (report && opts_.on_namespace_change) opts_.on_namespace_change(ch.nsid);
  }
  return true;
}

// The engine's lifeline closing (within wait_ms) means it is gone.
bool EngineClient::lifeline_closed(int wait_ms) {
  pollfd p{at_.socket(), POLLRDHUP, 0};
  if (::poll(&p, 1, wait_ms) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) gone_.store(true);
  return gone_.load();
}

std::unique_ptr<IoQueue> EngineClient::create_io_queue(uint32_t depth, HostError& err) {
  if (depth < 1 || depth > kQueueEntries - 1) {
    err = HostError::refused(HostError::Kind::Invalid, EINVAL);
    err.message = fmt::format("queue depth {} out of range (1..{} through the engine)", depth, kQueueEntries - 1);
    return nullptr;
  }
  if (failed()) {
    err = HostError::make(HostError::Kind::Controller, "the engine's controller has stopped");
    return nullptr;
  }
  uint16_t qid = 0;
  {
    std::lock_guard lk(qid_mu_);
    for (uint32_t q = 1; q < qid_used_.size(); ++q) {
      if (!qid_used_[q]) {
        qid_used_[q] = true;
        qid = uint16_t(q);
        break;
      }
    }
  }
  if (qid == 0) {
    err = HostError::refused(HostError::Kind::Busy, EBUSY);
    err.message = fmt::format("all {} I/O queues the engine granted are in use", granted_);
    return nullptr;
  }
  auto lease = std::shared_ptr<void>(nullptr, [self = shared_from_this(), qid](void*) { self->release_qid(qid); });
  const uint32_t vectors = uint32_t(at_.vector_fds().size());
  // Interrupts unless the queue busy-polls; vector 0 is the admin queue's, the I/O queues
  // share the others.
  const bool ien = opts_.poll != PollMode::Busy && vectors > 0;
  const uint32_t iv = vectors > 1 ? 1 + (qid - 1) % (vectors - 1) : 0;
  Sqe cq{};
  cq.opc = uint8_t(nvme::AdminOpcode::CreateIoCq);
  cq.cdw10 = qid | (depth << 16);  // depth + 1 entries (0's based)
  cq.cdw11 = 1u | (ien ? 2u : 0u) | (iv << 16);
  Completion c = admin(cq, nullptr, 0, false);
  if (!c.status.ok()) {
    err = HostError::from_status(c.status,
                                 fmt::format("Create I/O Completion Queue {}: {}", qid, nvme::status_name(c.status)));
    return nullptr;
  }
  Sqe sq{};
  sq.opc = uint8_t(nvme::AdminOpcode::CreateIoSq);
  sq.cdw10 = qid | (depth << 16);
  sq.cdw11 = 1u | (uint32_t(qid) << 16);
  c = admin(sq, nullptr, 0, false);
  if (!c.status.ok()) {
    err = HostError::from_status(c.status,
                                 fmt::format("Create I/O Submission Queue {}: {}", qid, nvme::status_name(c.status)));
    Sqe del{};
    del.opc = uint8_t(nvme::AdminOpcode::DeleteIoCq);
    del.cdw10 = qid;
    admin(del, nullptr, 0, false);
    return nullptr;
  }
  shm::QueueMemory m = at_.queue_pair(qid);
  m.sq_size = depth + 1;
  m.cq_size = depth + 1;
  auto q = std::make_unique<EngineIoQueue>(shared_from_this(), qid, depth, ien ? at_.vector_fds()[iv] : -1, m);
  q->lease = lease;
  q->block_sizes = block_sizes_;
  return q;
}

void EngineClient::release_qid(uint16_t qid) {
  std::lock_guard lk(qid_mu_);
  if (qid < qid_used_.size()) qid_used_[qid] = false;
}

void* EngineClient::alloc(size_t len) {
  const uint64_t want = (uint64_t(len) + 4095) & ~uint64_t(4095);
  if (want == 0) return nullptr;
  std::lock_guard lk(alloc_mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < want) continue;
    const uint64_t off = it->first;
    const uint64_t rest = it->second - want;
    free_.erase(it);
    if (rest) free_[off + want] = rest;
    given_[off] = want;
    return data_ + off;
  }
  return nullptr;
}

void EngineClient::free(void* p) {
  if (!p) return;
  std::lock_guard lk(alloc_mu_);
  const uint64_t off = uint64_t(static_cast<uint8_t*>(p) - data_);
  auto g = given_.find(off);
  if (g == given_.end()) return;
  uint64_t start = off, len = g->second;
  given_.erase(g);
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + len) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = len;
}

}  // namespace nvtcp::host::detail
