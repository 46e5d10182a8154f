// Host controller: the admin queue on a thread of its own (so Keep Alive keeps going
// whatever the application does), and I/O queue pairs on the application's threads.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "host/queue_pair_impl.hpp"
#include "nvtcp/host.hpp"
#include "util/log.hpp"
#include "wire/fabrics.hpp"
#include "wire/identify.hpp"
#include "wire/log_pages.hpp"

namespace nvtcp::host {

using namespace nvtcp::wire;
using detail::QueueParams;
using detail::QueuePairImpl;

namespace {
// One reactor per application thread, shared by that thread's queue pairs.
reactor::Reactor& thread_reactor(const ControllerOptions& o) {
  thread_local std::unique_ptr<reactor::Reactor> r;
  if (!r) r = std::make_unique<reactor::Reactor>(4096);
  if (o.busy_poll) r->set_poll_mode(reactor::PollMode::BusyPoll);
  else if (o.hybrid_poll) r->set_poll_mode(reactor::PollMode::Hybrid);
  return *r;
}

Sqe property_get_cmd(uint32_t ofst, bool eight) {
  PropertyGetCmd c{};
  c.opc = uint8_t(AdminOpcode::Fabrics);
  c.fctype = uint8_t(FabricsType::PropertyGet);
  c.attrib = eight ? 1 : 0;
  c.ofst = ofst;
  Sqe s;
  std::memcpy(&s, &c, sizeof(s));
  return s;
}

Sqe property_set_cmd(uint32_t ofst, uint32_t value) {
  PropertySetCmd c{};
  c.opc = uint8_t(AdminOpcode::Fabrics);
  c.fctype = uint8_t(FabricsType::PropertySet);
  c.ofst = ofst;
  c.value = value;
  Sqe s;
  std::memcpy(&s, &c, sizeof(s));
  return s;
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
}  // namespace

struct Controller::State {
  TransportId trid;
  ControllerOptions opts;
  std::string hostnqn;
  uint8_t hostid[16] = {};
  bool discovery = false;

  std::thread thread;
  std::atomic<bool> stop{false};
  reactor::Reactor* reactor = nullptr;   // lives on the admin thread
  std::unique_ptr<QueuePairImpl> admin;
  struct KaTimer : reactor::Timer {
    State* st = nullptr;
  } ka_timer;
  bool ka_outstanding = false;

  alignas(8) uint8_t ident[kIdentifyLen] = {};
  uint64_t cap = 0;
  uint32_t vs = 0;
  uint32_t ioq_granted = 0;
  uint32_t max_transfer = 1u << 20;
  uint32_t in_capsule_max = 0;
  std::map<uint32_t, NamespaceInfo> namespaces;

  std::mutex mu;
  std::vector<bool> qid_used;

  void arm_keep_alive() {
    uint32_t kato = opts.kato_ms;
    if (kato == 0 || discovery) return;
    // By default send at half the timeout, so one late packet is no loss.
    uint64_t interval_ms = opts.keep_alive_interval_ms ? opts.keep_alive_interval_ms : kato / 2;
    reactor->arm_timer(&ka_timer, std::max<uint64_t>(interval_ms, 1) * 1000000ull);
  }
  static void keep_alive(reactor::Timer* t) {
    State* st = static_cast<KaTimer*>(t)->st;
    if (st->admin->failed()) return;
    if (!st->ka_outstanding) {
      Sqe sqe{};
      sqe.opc = uint8_t(AdminOpcode::KeepAlive);
      st->ka_outstanding = true;
      int rc = st->admin->submit(sqe, nullptr, 0, false,
                                 [](void* ctx, const Completion& c) {
                                   auto* s = static_cast<State*>(ctx);
                                   s->ka_outstanding = false;
                                   if (!c.status.ok()) log::warn("Keep Alive failed: {}", status_name(c.status));
                                 },
                                 st);
      if (rc != 0) st->ka_outstanding = false;
    }
    st->arm_keep_alive();
  }
};

Controller::Controller() = default;

std::unique_ptr<Controller> Controller::connect(const TransportId& trid, const ControllerOptions& opts,
                                                std::string& err) {
  std::unique_ptr<Controller> c(new Controller());
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
  st.ka_timer.st = &st;
  st.ka_timer.fn = State::keep_alive;

  // The admin thread: connect the admin queue there, then serve until stopped.
  std::promise<std::string> connected;
  auto connected_f = connected.get_future();
  State* sp = &st;
  st.thread = std::thread([sp, &connected] {
    reactor::Reactor r(256);
    sp->reactor = &r;
    QueueParams p;
    p.trid = sp->trid;
    p.qid = 0;
    p.depth = std::max<uint16_t>(sp->opts.admin_queue_depth, 4);
    p.kato_ms = sp->discovery ? 0 : sp->opts.kato_ms;
    std::memcpy(p.hostid, sp->hostid, 16);
    p.hostnqn = sp->hostnqn;
    p.hdgst = sp->opts.hdgst;
    p.ddgst = sp->opts.ddgst;
    p.in_capsule_max = 8192;
    p.max_transfer = 1u << 20;
    p.timeout_ms = sp->opts.connect_timeout_ms;
    p.tcp_congestion = sp->opts.tcp_congestion;
    sp->admin = std::make_unique<QueuePairImpl>(r, p);
    std::string e;
    bool ok = sp->admin->connect(e);
    connected.set_value(ok ? std::string() : e);
    if (ok) {
      sp->arm_keep_alive();
      while (!sp->stop.load(std::memory_order_relaxed)) r.run_once(50000);
    }
    sp->reactor->cancel_timer(&sp->ka_timer);
    sp->admin.reset();
    sp->reactor = nullptr;
  });
  err = connected_f.get();
  if (!err.empty()) {
    st.stop = true;
    st.thread.join();
    return nullptr;
  }

  // Bring the controller up the way the specification orders it.
  auto fail = [&](const std::string& what, const Completion& cpl) {
    err = fmt::format("{}: {}", what, status_name(cpl.status));
    return nullptr;
  };
  uint64_t v = 0;
  Completion cpl = c->admin(property_get_cmd(prop::CAP, true), nullptr, 0, false);
  if (!cpl.status.ok()) return fail("Property Get CAP", cpl);
  st.cap = (uint64_t(cpl.dw1) << 32) | cpl.dw0;
  cpl = c->admin(property_get_cmd(prop::VS, false), nullptr, 0, false);
  if (!cpl.status.ok()) return fail("Property Get VS", cpl);
  st.vs = cpl.dw0;
  // CC: enable, NVM command set, 4 KiB pages, round robin, 64-byte SQEs, 16-byte CQEs.
  uint32_t cc = prop::kCcEnable | (6u << 16) | (4u << 20);
  cpl = c->admin(property_set_cmd(prop::CC, cc), nullptr, 0, false);
  if (!cpl.status.ok()) return fail("Property Set CC", cpl);
  uint32_t timeout_ms = std::max<uint32_t>(prop::cap_timeout_ms(st.cap), 500);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    cpl = c->admin(property_get_cmd(prop::CSTS, false), nullptr, 0, false);
    if (!cpl.status.ok()) return fail("Property Get CSTS", cpl);
    v = cpl.dw0;
    if (v & prop::kCstsFatal) {
      err = "controller reported a fatal status (CSTS.CFS) while enabling";
      return nullptr;
    }
    if (v & prop::kCstsReady) break;
    if (std::chrono::steady_clock::now() > deadline) {
      err = fmt::format("controller not ready after {} ms (CAP.TO)", timeout_ms);
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  cpl = c->identify(uint8_t(Cns::Controller), 0, st.ident);
  if (!cpl.status.ok()) return fail("Identify Controller", cpl);
  const auto* id = reinterpret_cast<const IdentifyController*>(st.ident);
  // MDTS is in units of the minimum page size (CAP.MPSMIN, 4 KiB << n); 0 = no limit.
  uint32_t mpsmin = 4096u << ((st.cap >> 48) & 0xF);
  st.max_transfer = id->mdts ? std::min<uint64_t>(uint64_t(mpsmin) << id->mdts, 8u << 20) : (8u << 20);
  st.in_capsule_max = id->ioccsz >= 4 ? id->ioccsz * 16 - 64 : 0;
  if (!st.discovery) {
    Sqe sf{};
    sf.opc = uint8_t(AdminOpcode::SetFeatures);
    sf.cdw10 = 0x07;
    uint32_t n = std::max<uint32_t>(opts.io_queues, 1) - 1;
    sf.cdw11 = n | (n << 16);
    cpl = c->admin(sf, nullptr, 0, false);
    if (!cpl.status.ok()) return fail("Set Features (Number of Queues)", cpl);
    st.ioq_granted = std::min(cpl.dw0 & 0xFFFF, cpl.dw0 >> 16) + 1;
    st.qid_used.assign(st.ioq_granted + 1, false);
    for (uint32_t nsid : c->active_namespaces()) {
      NamespaceInfo ni;
      std::string e;
      if (c->namespace_info(nsid, ni, e)) st.namespaces[nsid] = ni;
    }
  }
  log::debug("connected to {} (controller {}, {} I/O queues)", st.trid.subnqn, c->cntlid(), st.ioq_granted);
  return c;
}

Controller::~Controller() {
  if (!s_) return;
  State& st = *s_;
  if (st.admin && !st.admin->failed()) {
    // Normal shutdown: CC.SHN = 01b, then wait briefly for CSTS.SHST = complete.
    uint32_t cc = prop::kCcEnable | (6u << 16) | (4u << 20) | (1u << prop::kCcShnShift);
    Completion cpl = admin(property_set_cmd(prop::CC, cc), nullptr, 0, false);
    if (cpl.status.ok()) {
      for (int i = 0; i < 100; ++i) {
        cpl = admin(property_get_cmd(prop::CSTS, false), nullptr, 0, false);
        if (!cpl.status.ok() || (cpl.dw0 & prop::kCstsShstMask) == prop::kCstsShstComplete) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }
  st.stop = true;
  if (st.thread.joinable()) st.thread.join();
}

Completion Controller::admin(const Sqe& sqe, void* data, uint32_t len, bool to_controller) {
  State& st = *s_;
  auto w = std::make_shared<AdminWait>();
  Completion fail_cpl;
  fail_cpl.status = sc::TransportError;
  if (!st.reactor) return fail_cpl;
  w->bounce.assign(len, 0);
  if (to_controller && len) std::memcpy(w->bounce.data(), data, len);
  st.reactor->post([&st, w, sqe, len, to_controller] {
    auto* holder = new std::shared_ptr<AdminWait>(w);
    void* buf = len ? w->bounce.data() : nullptr;
    int rc = st.admin ? st.admin->submit(sqe, buf, len, to_controller,
                                         [](void* ctx, const Completion& c) {
                                           auto* h = static_cast<std::shared_ptr<AdminWait>*>(ctx);
                                           {
                                             std::lock_guard lk((*h)->mu);
                                             (*h)->cpl = c;
                                             (*h)->done = true;
                                           }
                                           (*h)->cv.notify_all();
                                           delete h;
                                         },
                                         holder)
                      : -ENOTCONN;
    if (rc != 0) {
      delete holder;
      std::lock_guard lk(w->mu);
      w->cpl.status = sc::TransportError;
      w->done = true;
      w->cv.notify_all();
    }
  });
  std::unique_lock lk(w->mu);
  // An admin command that never completes would hang the caller; bound it.
  uint32_t limit_ms = std::max<uint32_t>(st.opts.connect_timeout_ms * 2, 10000);
  if (!w->cv.wait_for(lk, std::chrono::milliseconds(limit_ms), [&] { return w->done; })) {
    log::warn("admin command 0x{:02x} timed out after {} ms", sqe.opc, limit_ms);
    return fail_cpl;
  }
  // Completed: the admin thread is done with the bounce buffer.
  if (!to_controller && len) std::memcpy(data, w->bounce.data(), len);
  return w->cpl;
}

Completion Controller::identify(uint8_t cns, uint32_t nsid, void* buf, uint32_t cdw11) {
  Sqe sqe{};
  sqe.opc = uint8_t(AdminOpcode::Identify);
  sqe.nsid = nsid;
  sqe.cdw10 = cns;
  sqe.cdw11 = cdw11;
  return admin(sqe, buf, kIdentifyLen, false);
}

Completion Controller::get_log_page(uint8_t lid, uint32_t nsid, void* buf, uint32_t len, uint64_t offset) {
  Sqe sqe{};
  sqe.opc = uint8_t(AdminOpcode::GetLogPage);
  sqe.nsid = nsid;
  uint32_t numd = len / 4 - 1;
  sqe.cdw10 = lid | ((numd & 0xFFFF) << 16);
  sqe.cdw11 = numd >> 16;
  sqe.cdw12 = uint32_t(offset);
  sqe.cdw13 = uint32_t(offset >> 32);
  return admin(sqe, buf, len, false);
}

std::vector<uint32_t> Controller::active_namespaces() {
  std::vector<uint32_t> out;
  alignas(8) uint8_t buf[kIdentifyLen];
  uint32_t after = 0;
  for (;;) {
    Completion c = identify(uint8_t(Cns::ActiveNamespaceList), after, buf);
    if (!c.status.ok()) break;
    const auto* ids = reinterpret_cast<const uint32_t*>(buf);
    size_t n = 0;
    while (n < kIdentifyLen / 4 && ids[n]) out.push_back(ids[n++]);
    if (n < kIdentifyLen / 4) break;
    after = ids[n - 1];
  }
  return out;
}

bool Controller::namespace_info(uint32_t nsid, NamespaceInfo& out, std::string& err) {
  alignas(8) uint8_t buf[kIdentifyLen];
  Completion c = identify(uint8_t(Cns::Namespace), nsid, buf);
  if (!c.status.ok()) {
    err = fmt::format("Identify Namespace {}: {}", nsid, status_name(c.status));
    return false;
  }
  const auto* id = reinterpret_cast<const IdentifyNamespace*>(buf);
  if (id->nsze == 0) {
    err = fmt::format("namespace {} is not active", nsid);
    return false;
  }
  out.nsid = nsid;
  out.blocks = id->nsze;
  out.block_size = 1u << id->lbaf[id->flbas & 0xF].lbads;
  std::memcpy(out.nguid, id->nguid, 16);
  std::memcpy(out.eui64, id->eui64, 8);
  return true;
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
  State& st = *s_;
  if (st.discovery) {
    err = "a discovery controller has no I/O queues";
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
  auto impl = std::make_unique<QueuePairImpl>(thread_reactor(st.opts), p);
  impl->lease = lease;
  for (const auto& [nsid, ni] : st.namespaces) impl->block_sizes.emplace_back(nsid, ni.block_size);
  if (!impl->connect(err)) return nullptr;
  return std::unique_ptr<QueuePair>(new QueuePair(std::move(impl)));
}

const uint8_t* Controller::identify_data() const { return s_->ident; }
uint16_t Controller::cntlid() const { return s_->admin ? s_->admin->cntlid() : 0; }
uint32_t Controller::io_queues_granted() const { return s_->ioq_granted; }
uint32_t Controller::max_transfer_bytes() const { return s_->max_transfer; }
uint64_t Controller::cap() const { return s_->cap; }
uint32_t Controller::version() const { return s_->vs; }
const TransportId& Controller::trid() const { return s_->trid; }
const std::string& Controller::hostnqn() const { return s_->hostnqn; }
bool Controller::failed() const { return !s_->admin || s_->admin->failed(); }

// ---------------------------------------------------------------- QueuePair

QueuePair::QueuePair(std::unique_ptr<detail::QueuePairImpl> impl) : impl_(std::move(impl)) {}
QueuePair::~QueuePair() = default;

int QueuePair::submit(const Sqe& sqe, void* data, uint32_t len, bool to_controller, CompletionFn cb, void* ctx) {
  return impl_->submit(sqe, data, len, to_controller, cb, ctx);
}

uint32_t QueuePair::block_size(uint32_t nsid) const {
  for (const auto& [id, bs] : impl_->block_sizes)
    if (id == nsid) return bs;
  return 0;
}

namespace {
Sqe rw_cmd(IoOpcode op, uint32_t nsid, uint64_t slba, uint32_t nlb) {
  Sqe s{};
  s.opc = uint8_t(op);
  s.nsid = nsid;
  s.cdw10 = uint32_t(slba);
  s.cdw11 = uint32_t(slba >> 32);
  s.cdw12 = (nlb - 1) & 0xFFFF;
  return s;
}
}  // namespace

int QueuePair::read(uint32_t nsid, uint64_t slba, uint32_t nlb, void* buf, CompletionFn cb, void* ctx) {
  uint32_t bs = block_size(nsid);
  if (!bs || nlb == 0 || nlb > 65536) return -EINVAL;
  return impl_->submit(rw_cmd(IoOpcode::Read, nsid, slba, nlb), buf, nlb * bs, false, cb, ctx);
}

int QueuePair::write(uint32_t nsid, uint64_t slba, uint32_t nlb, const void* buf, CompletionFn cb, void* ctx) {
  uint32_t bs = block_size(nsid);
  if (!bs || nlb == 0 || nlb > 65536) return -EINVAL;
  return impl_->submit(rw_cmd(IoOpcode::Write, nsid, slba, nlb), const_cast<void*>(buf), nlb * bs, true, cb, ctx);
}

int QueuePair::flush(uint32_t nsid, CompletionFn cb, void* ctx) {
  Sqe s{};
  s.opc = uint8_t(IoOpcode::Flush);
  s.nsid = nsid;
  return impl_->submit(s, nullptr, 0, false, cb, ctx);
}

int QueuePair::write_zeroes(uint32_t nsid, uint64_t slba, uint32_t nlb, CompletionFn cb, void* ctx) {
  if (nlb == 0 || nlb > 65536) return -EINVAL;
  return impl_->submit(rw_cmd(IoOpcode::WriteZeroes, nsid, slba, nlb), nullptr, 0, false, cb, ctx);
}

int QueuePair::deallocate(uint32_t nsid, const DsmRange* ranges, uint32_t n, CompletionFn cb, void* ctx) {
  if (n == 0 || n > 256) return -EINVAL;
  Sqe s{};
  s.opc = uint8_t(IoOpcode::DatasetManagement);
  s.nsid = nsid;
  s.cdw10 = n - 1;
  s.cdw11 = 1u << 2;  // AD: deallocate
  return impl_->submit(s, const_cast<DsmRange*>(ranges), n * uint32_t(sizeof(DsmRange)), true, cb, ctx);
}

int QueuePair::process_completions(uint32_t timeout_us) { return impl_->poll(timeout_us); }
uint16_t QueuePair::qid() const { return impl_->qid(); }
uint32_t QueuePair::depth() const { return impl_->depth(); }
uint32_t QueuePair::outstanding() const { return impl_->outstanding(); }
bool QueuePair::failed() const { return impl_->failed(); }

}  // namespace nvtcp::host
