// SPDX-License-Identifier: Apache-2.0
// Host controller: the admin queue on a thread of its own (so Keep Alive keeps going
// whatever the application does), and I/O queue pairs on the application's threads. This file
// holds the public Controller and QueuePair methods; what the admin thread does is declared in
// controller_state.hpp and defined by concern next to it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <sys/mman.h>

#include <fmt/format.h>

#include "auth/tls_psk.hpp"
#include "host/block_size_table.hpp"
#include "host/controller_state.hpp"
#include "host/engine_client.hpp"
#include "host/namespace_scan.hpp"
#include "host/queue_pair_impl.hpp"
#include "host/reauthenticate.hpp"
#include "host/test_seams.hpp"
#include "host/timing.hpp"
#include "nvtcp/host.hpp"
#include "nvtcp/identify.hpp"
#include "nvtcp/log_pages.hpp"
#include "util/log.hpp"
#include "wire/commands.hpp"
#include "wire/fabrics.hpp"

namespace nvtcp::host {

using namespace nvtcp::wire;
using detail::QueueParams;
using detail::QueuePairImpl;
using detail::ScanWait;

namespace {
// One reactor per application thread, shared by that thread's queue pairs.
reactor::Reactor& thread_reactor(const ControllerOptions& o) {
  thread_local std::unique_ptr<reactor::Reactor> r;
  if (!r) r = std::make_unique<reactor::Reactor>(4096, PollMode::Interrupt, o.sqpoll);
  // The last controller set up on this thread decides for all of its queue pairs; Default is
  // Hybrid over TCP (see ControllerOptions::poll).
  r->set_poll_mode(o.poll == PollMode::Default ? PollMode::Hybrid : o.poll);
  return *r;
}

struct AdminWait {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Completion cpl;
  // The command's data lives here, not in the caller's buffer: a caller that gave up
  // waiting must not have its memory written by a completion that comes late.
  std::vector<uint8_t> bounce;
};

// The TLS PSK of opts (its configured key, read and checked here so that a bad one fails
// connect() before any network) derived for hostnqn and subnqn into psk_out; and, unless a
// derivation is forced, the same key derived the legacy way into fallback.
bool derive_tls_psks(const ControllerOptions& opts, const std::string& hostnqn, const std::string& subnqn,
                     std::shared_ptr<const tls::Psk>& psk_out, std::shared_ptr<const tls::Psk>& fallback,
                     std::string& err) {
  if (opts.tls_key.empty()) {
    err = "TLS needs the PSK (--tls-key KEY or @FILE, as nvme-cli's gen-tls-key writes it)";
    return false;
  }
  if (opts.tls_identity_version != 0 && opts.tls_identity_version != 1) {
    err = fmt::format("TLS PSK identity version {}: 0 or 1", opts.tls_identity_version);
    return false;
  }
  auth::SecretString text;
  auth::ConfiguredPsk configured;
  std::string e;
  if (!auth::read_key_value(opts.tls_key, text, e) || !auth::parse_tls_psk(text.view(), configured, e)) {
    err = fmt::format("TLS PSK: {}", e);
    return false;
  }
  if (opts.tls_legacy_derivation && opts.tls_rfc8446_derivation) {
    err = "TLS PSK: the legacy derivation or RFC 8446's, not both";
    return false;
  }
  auto derive = [&](auth::LabelEncoding enc) -> std::shared_ptr<tls::Psk> {
    auth::OfferedPsk offered;
    if (!auth::host_tls_psk(configured, hostnqn, subnqn, opts.tls_identity_version, enc, offered))
      return nullptr;
    auto psk = std::make_shared<tls::Psk>();
    psk->identity = std::move(offered.identity);
    // tlshd 1.0 binds every PSK with SHA-256 and a Linux target's refuses any other binder.
    psk->hash = opts.tls_sha256_binder ? 1 : offered.hash;
    psk->key = std::move(offered.key);
    psk->derivation = enc == auth::LabelEncoding::Libnvme ? "libnvme's legacy labels" : "RFC 8446 labels";
    return psk;
  };
  // The specification's derivation first; unless one is forced, the legacy one waits for a
  // target that refuses the first (associate()).
  psk_out = derive(opts.tls_legacy_derivation ? auth::LabelEncoding::Libnvme : auth::LabelEncoding::Rfc8446);
  if (!opts.tls_legacy_derivation && !opts.tls_rfc8446_derivation)
    fallback = derive(auth::LabelEncoding::Libnvme);
  if (!psk_out || (!opts.tls_legacy_derivation && !opts.tls_rfc8446_derivation && !fallback)) {
    err = "TLS PSK: deriving the TLS PSK failed";
    return false;
  }
  return true;
}
}  // namespace

Controller::Controller() = default;

std::unique_ptr<Controller> Controller::connect(const TransportId& trid, const ControllerOptions& opts,
                                                std::string& err) {
  std::unique_ptr<Controller> c(new Controller());
  if (trid.trtype == "engine") {
    detail::HostError attach_err;
    c->engine_ = detail::EngineClient::connect(trid, opts, attach_err);
    if (!c->engine_) {
      err = attach_err.message;  // connect()'s public shape
      return nullptr;
    }
    log::debug("attached to {} through the engine at {} (controller {}, {} I/O queues)", trid.subnqn, trid.traddr,
               c->cntlid(), c->io_queues_granted());
    return c;
  }
  c->s_ = std::make_shared<State>();
  State& st = *c->s_;
  st.trid = trid;
  st.opts = opts;
  st.opts.hdgst = opts.hdgst || trid.hdgst;
  st.opts.ddgst = opts.ddgst || trid.ddgst;
  st.discovery = trid.subnqn.empty() || trid.subnqn == kDiscoveryNqn;
  if (st.discovery) st.trid.subnqn = kDiscoveryNqn;
  std::memcpy(st.hostid, opts.hostid, 16);
  if (std::all_of(st.hostid, st.hostid + 16, [](uint8_t b) { return b == 0; })) {
    std::random_device rd;
    for (auto& b : st.hostid) b = uint8_t(rd());
    st.hostid[6] = uint8_t((st.hostid[6] & 0x0F) | 0x40);
    st.hostid[8] = uint8_t((st.hostid[8] & 0x3F) | 0x80);
  }
  st.hostnqn = !trid.hostnqn.empty() ? trid.hostnqn : !opts.hostnqn.empty() ? opts.hostnqn : default_hostnqn(st.hostid);
  // The secrets are read and checked here, so a bad one fails connect() before any network.
  auto read_secret = [&](const std::string& value, const char* what, std::shared_ptr<const auth::DhchapSecret>& out) {
    if (value.empty()) return true;
    auth::SecretString text;
    auto s = std::make_shared<auth::DhchapSecret>();
    std::string e;
    if (!auth::read_key_value(value, text, e) || !auth::parse_dhchap_secret(text.view(), *s, e)) {
      err = fmt::format("{}: {}", what, e);
      return false;
    }
    out = std::move(s);
    return true;
  };
  if (!read_secret(opts.dhchap_secret, "DH-HMAC-CHAP host secret", st.dhchap_secret) ||
      !read_secret(opts.dhchap_ctrl_secret, "DH-HMAC-CHAP controller secret", st.dhchap_ctrl_secret))
    return nullptr;
  if (st.dhchap_ctrl_secret && !st.dhchap_secret) {
    err = "a DH-HMAC-CHAP controller secret needs the host secret too (the host authenticates first)";
    return nullptr;
  }
  if ((opts.tls || !opts.tls_key.empty()) &&
      !derive_tls_psks(opts, st.hostnqn, st.trid.subnqn, st.tls_psk, st.tls_psk_fallback, err))
    return nullptr;
  st.opts.tls_key.clear();
  st.opts.dhchap_secret.clear();  // the parsed keys are what stays
  st.opts.dhchap_ctrl_secret.clear();
  st.ka_timer.st = &st;
  st.ka_timer.fn = State::keep_alive;
  if (detail::ControllerSeam* seam = detail::ControllerSeam::current()) {  // a test's clock
    st.clock = &seam->clock();
    seam->post_to_admin_ = [ws = std::weak_ptr<State>(c->s_)](std::function<void()> fn) {
      std::shared_ptr<State> sp = ws.lock();
      if (!sp) return false;
      std::lock_guard lk(sp->mu);
      if (!sp->reactor) return false;
      sp->reactor->post(std::move(fn));
      return true;
    };
  }

  // The admin thread connects and enables the controller, then serves until stopped.
  std::promise<detail::HostError> connected;
  auto connected_f = connected.get_future();
  st.thread = std::thread([sp = &st, &connected] { sp->run(&connected); });
  const detail::HostError e = connected_f.get();
  if (!e.ok()) {
    err = e.message;  // connect()'s public shape
    st.stop = true;
    st.thread.join();
    return nullptr;
  }
  log::debug("connected to {} (controller {}, {} I/O queues)", st.trid.subnqn, c->cntlid(), st.ioq_granted);
  return c;
}

Controller::~Controller() {
  if (engine_) engine_->stop_notices();  // on_namespace_change is this controller's user's
  if (!s_) return;
  State& st = *s_;
  if (st.link_state() == State::LinkState::Live) {
    // Normal shutdown: CC.SHN = 01b, then poll CSTS until SHST says complete. Polling is what
    // the specification asks of a host here (no event announces it); the wait is bounded by what
    // the controller itself promises (RTD3E, else CAP.TO), read on the injectable clock.
    uint32_t cc = prop::kCcEnableNvm | prop::kCcShnNormal;
    Completion cpl = admin(cmd::property_set(prop::CC, cc), nullptr, 0, false);
    if (cpl.status.ok()) {
      const auto* id = reinterpret_cast<const IdentifyController*>(st.ident);
      const uint64_t limit_ns = uint64_t(detail::shutdown_timeout_ms(id->rtd3e, st.cap)) * detail::kNsPerMs;
      const uint64_t deadline = st.now_ns() + limit_ns;
      for (;;) {
        cpl = admin(cmd::property_get(prop::CSTS, false), nullptr, 0, false);
        if (!cpl.status.ok() || (cpl.dw0 & prop::kCstsShstMask) == prop::kCstsShstComplete) break;
        if (st.now_ns() >= deadline) {
          log::warn("{}: shutdown not complete after {} ms; closing anyway", st.trid.subnqn,
                    limit_ns / detail::kNsPerMs);
          break;
        }
        // Between two Property Gets (each a round trip): a short pause, not a busy loop.
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }
  st.stop = true;
  st.post_to_admin([] {});
  if (st.thread.joinable()) st.thread.join();
  // Queue pairs may outlive this object: nothing will reconnect them any more.
  if (st.link_state() != State::LinkState::Deleted) st.set_link_state(State::LinkState::Deleted);
}

Completion Controller::admin(const Sqe& sqe, void* data, uint32_t len, bool to_controller) {
  if (engine_) return engine_->admin(sqe, data, len, to_controller);
  State& st = *s_;
  // From the admin thread itself (an on_namespace_change callback): waiting for that thread
  // would wait for ourselves.
  if (std::this_thread::get_id() == st.admin_tid) return st.admin_sync(sqe, data, len, to_controller);
  auto w = std::make_shared<AdminWait>();
  Completion fail_cpl;
  fail_cpl.status = sc::TransportError;
  if (st.link_state() != State::LinkState::Live) return fail_cpl;
  w->bounce.assign(len, 0);
  if (to_controller && len) std::memcpy(w->bounce.data(), data, len);
  st.post_to_admin([&st, w, sqe, len, to_controller] {
    auto* holder = new std::shared_ptr<AdminWait>(w);
    void* buf = len ? w->bounce.data() : nullptr;
    bool live = st.admin && st.link_state() == State::LinkState::Live;
    auto on_done = [](void* ctx, const Completion& c) {
      auto* h = static_cast<std::shared_ptr<AdminWait>*>(ctx);
      {
        std::lock_guard lk((*h)->mu);
        (*h)->cpl = c;
        (*h)->done = true;
      }
      (*h)->cv.notify_all();
      delete h;
    };
    if (!live || !st.admin->submit(sqe, buf, len, to_controller, on_done, holder).ok()) {
      delete holder;
      std::lock_guard lk(w->mu);
      w->cpl.status = sc::TransportError;
      w->done = true;
      w->cv.notify_all();
    }
  });
  std::unique_lock lk(w->mu);
  // The admin queue times commands out itself (and then resets); this is a backstop for
  // an admin thread that is gone.
  uint32_t limit_ms = st.opts.admin_timeout_ms * 2 + 5000;
  if (!w->cv.wait_for(lk, std::chrono::milliseconds(limit_ms), [&] { return w->done; })) {
    log::warn("admin command 0x{:02x} not answered after {} ms", sqe.opc, limit_ms);
    return fail_cpl;
  }
  // Completed: the admin thread is done with the bounce buffer.
  if (!to_controller && len) std::memcpy(data, w->bounce.data(), len);
  return w->cpl;
}

Completion Controller::identify(uint8_t cns, uint32_t nsid, void* buf, uint32_t cdw11) {
  return admin(cmd::identify(cns, nsid, cdw11), buf, kIdentifyLen, false);
}

Completion Controller::get_log_page(uint8_t lid, uint32_t nsid, void* buf, uint32_t len, uint64_t offset) {
  return admin(cmd::get_log_page(lid, nsid, len, offset, false), buf, len, false);
}

std::vector<uint32_t> Controller::active_namespaces() {
  if (!engine_) {
    std::lock_guard lk(s_->ns_mu);
    std::vector<uint32_t> out;
    for (const auto& [nsid, ni] : s_->namespaces) out.push_back(nsid);
    return out;
  }
  return engine_->active_namespaces();
}

bool Controller::namespace_info(uint32_t nsid, NamespaceInfo& out, std::string& err) {
  if (!engine_) {
    std::lock_guard lk(s_->ns_mu);
    auto it = s_->namespaces.find(nsid);
    if (it == s_->namespaces.end()) {
      err = fmt::format("namespace {} is not active (as of the last scan)", nsid);
      return false;
    }
    out = it->second;
    return true;
  }
  return engine_->namespace_info(nsid, out, err);
}

nvme::AnaState Controller::ana_state(uint32_t nsid) const {
  return engine_ ? nvme::AnaState::Optimized : s_->ana->state(nsid);
}
uint64_t Controller::ana_generation() const { return engine_ ? 0 : s_->ana->generation(); }

void Controller::request_ana_refresh() {
  if (engine_ || s_->ana_refresh_asked.exchange(true, std::memory_order_acq_rel)) return;  // one at a time
  s_->post_to_admin([st = s_.get()] {
    st->ana_refresh_asked.store(false, std::memory_order_release);
    st->ev.ana_changed = true;  // the run loop's service_events() reads the log
  });
}

uint64_t Controller::namespace_generation() const {
  return engine_ ? engine_->namespace_generation() : s_->ns_generation.load(std::memory_order_acquire);
}

bool Controller::rescan_namespaces(std::string& err) {
  if (engine_) return engine_->rescan_namespaces(err);
  State& st = *s_;
  if (std::this_thread::get_id() == st.admin_tid) {
    err = "rescan_namespaces() called on the admin thread (from on_namespace_change?)";
    return false;
  }
  if (st.discovery) {
    err = "a discovery controller has no namespaces";
    return false;
  }
  if (!live()) {
    err = failed() ? "the controller is lost" : "the controller is resetting";
    return false;
  }
  auto w = std::make_shared<ScanWait>();
  st.post_to_admin([&st, w] { st.rescan_waiters.push_back(w); });
  std::unique_lock lk(w->mu);
  // Bounded like admin(): each command of the scan is bounded by the admin timeout.
  const uint32_t limit_ms = st.opts.admin_timeout_ms * 4 + 5000;
  if (!w->cv.wait_for(lk, std::chrono::milliseconds(limit_ms), [&] { return w->done; })) {
    err = fmt::format("namespace rescan not finished after {} ms", limit_ms);
    return false;
  }
  if (w->err.ok()) return true;
  err = w->err.message;  // rescan_namespaces()' public shape
  return false;
}

bool Controller::discovery_log(std::vector<uint8_t>& out, std::string& err) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::vector<uint8_t> head(sizeof(DiscoveryLogHeader));
    Completion c = get_log_page(uint8_t(LogPageId::Discovery), 0, head.data(), uint32_t(head.size()));
    if (!c.status.ok()) {
      err = fmt::format("Get Log Page (discovery): {}", status_name(c.status));
      return false;
    }
    const auto* h = reinterpret_cast<const DiscoveryLogHeader*>(head.data());
    uint64_t numrec = std::min<uint64_t>(h->numrec, 1000);
    uint64_t genctr = h->genctr;
    out.assign(sizeof(DiscoveryLogHeader) + numrec * sizeof(DiscoveryLogEntry), 0);
    if (numrec) {
      c = get_log_page(uint8_t(LogPageId::Discovery), 0, out.data(), uint32_t(out.size()));
      if (!c.status.ok()) {
        err = fmt::format("Get Log Page (discovery entries): {}", status_name(c.status));
        return false;
      }
    } else {
      out = head;
    }
    // The log changed between the two reads: read it again.
    if (reinterpret_cast<const DiscoveryLogHeader*>(out.data())->genctr == genctr) return true;
  }
  err = "discovery log kept changing while being read";
  return false;
}

std::unique_ptr<QueuePair> Controller::create_io_qpair(uint32_t depth, std::string& err) {
  return make_io_qpair(depth, true, err);
}

std::unique_ptr<QueuePair> Controller::start_io_qpair(uint32_t depth, std::string& err) {
  return make_io_qpair(depth, false, err);
}

std::unique_ptr<QueuePair> Controller::make_io_qpair(uint32_t depth, bool wait, std::string& err) {
  if (engine_) {
    detail::HostError e;
    auto q = engine_->create_io_queue(depth, e);
    if (!q) {
      err = e.message;  // create_io_qpair()'s public shape
      return nullptr;
    }
    return std::unique_ptr<QueuePair>(new QueuePair(std::move(q), max_transfer_bytes()));
  }
  State& st = *s_;
  if (st.discovery) {
    err = "a discovery controller has no I/O queues";
    return nullptr;
  }
  if (!live()) {
    err = failed() ? "the controller is lost" : "the controller is resetting";
    return nullptr;
  }
  uint32_t mqes = prop::cap_mqes(st.cap);
  if (depth < 1 || depth > mqes) {
    err = fmt::format("queue depth {} out of range (1..{}, from CAP.MQES)", depth, mqes);
    return nullptr;
  }
  uint16_t qid = 0;
  {
    std::lock_guard lk(st.mu);
    for (uint32_t q = 1; q < st.qid_used.size(); ++q) {
      if (!st.qid_used[q]) {
        st.qid_used[q] = true;
        qid = uint16_t(q);
        break;
      }
    }
  }
  if (qid == 0) {
    err = fmt::format("all {} I/O queues the controller granted are in use", st.ioq_granted);
    return nullptr;
  }
  auto lease = std::shared_ptr<void>(nullptr, [keep = s_, qid](void*) {
    std::lock_guard lk(keep->mu);
    keep->qid_used[qid] = false;
  });
  QueueParams p;
  p.trid = st.trid;
  p.qid = qid;
  p.cntlid = cntlid();
  p.depth = depth;
  std::memcpy(p.hostid, st.hostid, 16);
  p.hostnqn = st.hostnqn;
  p.hdgst = st.opts.hdgst;
  p.ddgst = st.opts.ddgst;
  p.in_capsule_max = st.in_capsule_max;
  p.max_transfer = st.max_transfer;
  p.timeout_ms = st.opts.connect_timeout_ms;
  p.tcp_congestion = st.opts.tcp_congestion;
  p.socket_buffer_bytes = st.opts.socket_buffer_bytes;
  p.send_buffer_bytes = st.opts.send_buffer_bytes;
  p.dhchap_secret = st.dhchap_secret;
  p.dhchap_ctrl_secret = st.dhchap_ctrl_secret;
  p.tls_psk = st.tls_psk;
  p.ktls = st.opts.ktls;
  p.ctrl_loss_tmo_ms = st.opts.ctrl_loss_tmo_ms;
  p.reconnect_delay_ms = st.opts.reconnect_delay_ms;
  p.fast_io_fail_tmo_ms = st.opts.fast_io_fail_tmo_ms;
  p.io_timeout_ms = st.opts.io_timeout_ms;
  p.max_retries = st.opts.max_retries;
  p.clock = st.clock;
  auto impl = std::make_unique<QueuePairImpl>(thread_reactor(st.opts), p, s_);
  impl->lease = lease;
  impl->block_sizes = st.block_sizes;
  detail::HostError e;
  if (!(wait ? impl->connect(e) : impl->start_unwaited(e))) {
    err = e.message;  // create_io_qpair()'s public shape
    return nullptr;
  }
  return std::unique_ptr<QueuePair>(new QueuePair(std::move(impl), max_transfer_bytes()));
}

const uint8_t* Controller::identify_data() const { return engine_ ? engine_->identify_data() : s_->ident; }
uint16_t Controller::cntlid() const { return engine_ ? engine_->cntlid() : s_->link_cntlid(); }
uint32_t Controller::io_queues_granted() const { return engine_ ? engine_->io_queues_granted() : s_->ioq_granted; }
uint32_t Controller::max_transfer_bytes() const { return engine_ ? engine_->max_transfer_bytes() : s_->max_transfer; }
uint64_t Controller::cap() const { return engine_ ? engine_->cap() : s_->cap; }
uint32_t Controller::version() const { return engine_ ? engine_->version() : s_->vs; }
const TransportId& Controller::trid() const { return engine_ ? engine_->trid() : s_->trid; }
const std::string& Controller::hostnqn() const { return engine_ ? engine_->hostnqn() : s_->hostnqn; }
bool Controller::failed() const {
  return engine_ ? engine_->failed() : s_->link_state() == State::LinkState::Deleted;
}
bool Controller::live() const { return engine_ ? !engine_->failed() : s_->link_state() == State::LinkState::Live; }
uint32_t Controller::resets() const { return engine_ ? 0 : s_->reset_count.load(std::memory_order_relaxed); }

void* Controller::alloc_io_buffer(size_t len) {
  if (engine_) return engine_->alloc(len);
  // Large buffers start on a 2-MiB boundary and ask for transparent huge pages (honoured when
  // the system's THP setting is "madvise" or "always"). 32 queues x 32 x 128 KiB are 32,768
  // pages of 4 KiB: their page faults and TLB misses cost nvtcp perf 10-25% of its 128 KiB
  // throughput and 0.1-0.4 s of start-up on this VM (RESULTS 2026-12-06 08:00).
  constexpr size_t kHugePage = size_t(2) << 20;
  if (len >= kHugePage) {
    const size_t bytes = (len + kHugePage - 1) & ~(kHugePage - 1);
    void* p = std::aligned_alloc(kHugePage, bytes);
    if (p) ::madvise(p, bytes, MADV_HUGEPAGE);  // EINVAL where THP is compiled out: 4 KiB pages, as before
    return p;
  }
  return std::aligned_alloc(4096, (len + 4095) & ~size_t(4095));
}

void Controller::free_io_buffer(void* p) {
  if (engine_) return engine_->free(p);
  std::free(p);
}

// ---------------------------------------------------------------- QueuePair

namespace detail {
// Split reads and writes in flight on one queue pair: at most one per slot, made once.
class SplitPool {
 public:
  explicit SplitPool(uint32_t n) : slots_(n) {
    for (auto& s : slots_) {
      s.pool = this;
      s.next = free_;
      free_ = &s;
    }
  }
  struct Split {
    SplitPool* pool = nullptr;
    Split* next = nullptr;
    CompletionFn cb = nullptr;
    void* ctx = nullptr;
    uint32_t remaining = 0;  // parts not yet completed
    Completion result;       // the first failure, else success
  };
  Split* take() {
    Split* s = free_;
    if (s) free_ = s->next;
    return s;
  }
  void give_back(Split* s) {
    s->next = free_;
    free_ = s;
  }
  // One part done; the caller hears once, after the last.
  static void on_part(void* ctx, const Completion& c) {
    auto* s = static_cast<Split*>(ctx);
    if (!c.status.ok() && s->result.status.ok()) s->result = c;
    if (--s->remaining == 0) s->pool->finish(s);
  }
  void finish(Split* s) {
    const CompletionFn cb = s->cb;
    void* const ctx = s->ctx;
    const Completion result = s->result;
    give_back(s);
    cb(ctx, result);
  }

 private:
  std::vector<Split> slots_;
  Split* free_ = nullptr;
};
}  // namespace detail

QueuePair::QueuePair(std::unique_ptr<detail::IoQueue> impl, uint32_t max_transfer)
    : max_transfer_(max_transfer), impl_(std::move(impl)) {}
QueuePair::~QueuePair() {
  impl_.reset();  // its outstanding commands complete now, while the split pool still exists
}

int QueuePair::submit(const Sqe& sqe, void* data, uint32_t len, bool to_controller, CompletionFn cb, void* ctx) {
  return impl_->submit(sqe, data, len, to_controller, cb, ctx).to_errno();  // the public -errno shape
}

uint32_t QueuePair::block_size(uint32_t nsid) const {
  return impl_->block_sizes ? impl_->block_sizes->find(nsid) : 0;
}

int QueuePair::read(uint32_t nsid, uint64_t slba, uint32_t nlb, void* buf, CompletionFn cb, void* ctx) {
  return read_write(IoOpcode::Read, nsid, slba, nlb, buf, false, 0, cb, ctx);
}

int QueuePair::write(uint32_t nsid, uint64_t slba, uint32_t nlb, const void* buf, CompletionFn cb, void* ctx,
                     WriteFlags flags) {
  return read_write(IoOpcode::Write, nsid, slba, nlb, const_cast<void*>(buf), true, flags.fua ? Sqe::kRwFua : 0,
                    cb, ctx);
}

int QueuePair::read_write(IoOpcode op, uint32_t nsid, uint64_t slba, uint32_t nlb, void* buf, bool to_controller,
                          uint32_t cdw12_flags, CompletionFn cb, void* ctx) {
  const uint32_t bs = block_size(nsid);
  if (!bs || nlb == 0 || nlb > 65536) return -EINVAL;
  const uint32_t per = max_transfer_ / bs;  // blocks one command may carry
  if (max_transfer_ == 0 || per == 0 || nlb <= per) {
    return impl_->submit(cmd::block_range(op, nsid, slba, nlb, cdw12_flags), buf, nlb * bs, to_controller, cb, ctx)
        .to_errno();
  }
  const uint32_t parts = (nlb + per - 1) / per;
  if (parts > impl_->depth()) return -EINVAL;  // could never be in flight at once
  if (impl_->depth() - impl_->outstanding() < parts) return -EBUSY;
  if (!splits_) splits_ = std::make_unique<detail::SplitPool>(impl_->depth());  // once per queue pair
  detail::SplitPool::Split* split = splits_->take();
  if (!split) return -EBUSY;
  split->cb = cb;
  split->ctx = ctx;
  split->remaining = parts;
  split->result = {};
  for (uint32_t i = 0; i < parts; ++i) {
    const uint32_t n = std::min(per, nlb - i * per);
    const Sqe s = cmd::block_range(op, nsid, slba + uint64_t(i) * per, n, cdw12_flags);
    const detail::HostError refused = impl_->submit(s, static_cast<uint8_t*>(buf) + uint64_t(i) * per * bs, n * bs,
                                                    to_controller, &detail::SplitPool::on_part, split);
    if (refused.ok()) continue;
    if (i == 0) {
      splits_->give_back(split);
      return refused.to_errno();
    }
    // Some parts are out: they complete, and the caller hears the failure of the rest then.
    split->remaining -= parts - i;
    if (split->result.status.ok()) split->result.status = sc::TransportError;
    break;
  }
  return 0;
}

int QueuePair::flush(uint32_t nsid, CompletionFn cb, void* ctx) {
  return impl_->submit(cmd::flush(nsid), nullptr, 0, false, cb, ctx).to_errno();
}

int QueuePair::write_zeroes(uint32_t nsid, uint64_t slba, uint32_t nlb, CompletionFn cb, void* ctx) {
  if (nlb == 0 || nlb > 65536) return -EINVAL;
  return impl_->submit(cmd::block_range(IoOpcode::WriteZeroes, nsid, slba, nlb), nullptr, 0, false, cb, ctx).to_errno();
}

int QueuePair::deallocate(uint32_t nsid, const DsmRange* ranges, uint32_t n, CompletionFn cb, void* ctx) {
  if (n == 0 || n > 256) return -EINVAL;
  return impl_->submit(cmd::deallocate(nsid, n), const_cast<DsmRange*>(ranges), n * uint32_t(sizeof(DsmRange)), true,
                       cb, ctx)
      .to_errno();
}

int QueuePair::process_completions(uint32_t timeout_us) { return impl_->poll(timeout_us); }

int QueuePair::reauthenticate(std::string& err) { return impl_->reauthenticate(err); }

int Controller::reauthenticate(std::string& err) {
  if (engine_) {
    err = "through the offload engine, the engine's connections authenticate on their own";
    return -ENOTSUP;
  }
  State& st = *s_;
  if (!st.dhchap_secret) {
    err = "no DH-HMAC-CHAP secret was given for this controller";
    return -EINVAL;
  }
  if (st.link_state() != State::LinkState::Live) {
    err = "the admin queue is not connected";
    return -ENOTCONN;
  }
  auto exchange = [this](bool send, std::vector<uint8_t>& buf) {
    return admin(detail::auth_transfer_sqe(send, uint32_t(buf.size())), buf.data(), uint32_t(buf.size()), send).status;
  };
  auth::DhchapKeys keys{st.dhchap_secret.get(), st.dhchap_ctrl_secret.get(), st.hostnqn, st.trid.subnqn};
  const int rc = detail::run_dhchap(keys, st.next_auth_transaction(), exchange, err);
  if (rc == 0) log::debug("{}: admin queue re-authenticated (DH-HMAC-CHAP)", st.trid.subnqn);
  else log::warn("{}: admin queue re-authentication failed: {}", st.trid.subnqn, err);
  return rc;
}
uint16_t QueuePair::qid() const { return impl_->qid(); }
uint32_t QueuePair::depth() const { return impl_->depth(); }
uint32_t QueuePair::outstanding() const { return impl_->outstanding(); }
bool QueuePair::failed() const { return impl_->failed(); }
bool QueuePair::connected() const { return impl_->ready(); }
uint32_t QueuePair::reconnects() const { return impl_->reconnects(); }

}  // namespace nvtcp::host
