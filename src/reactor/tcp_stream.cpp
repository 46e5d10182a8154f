// SPDX-License-Identifier: Apache-2.0
#include "reactor/tcp_stream.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "util/log.hpp"

namespace nvtcp::reactor {

namespace {
// Kernel ABI values newer than Debian's liburing 2.3 headers (io_uring.h, Linux 6.2).
constexpr uint16_t kSendZcReportUsage = 1u << 3;    // IORING_SEND_ZC_REPORT_USAGE
constexpr uint32_t kNotifUsageZcCopied = 1u << 31;  // IORING_NOTIF_USAGE_ZC_COPIED
}  // namespace

uint64_t net_core_rmem_max() {
  static const uint64_t value = [] {
    uint64_t v = 0;
    if (FILE* f = std::fopen("/proc/sys/net/core/rmem_max", "r")) {
      unsigned long long x = 0;
      if (std::fscanf(f, "%llu", &x) == 1) v = x;
      std::fclose(f);
    }
    if (v < kDefaultReceiveBufferBytes)
      log::info(
          "receive buffers autotune: net.core.rmem_max is {} bytes, below the {} a connection's receive "
          "buffer is fixed at (raise it, or set the socket buffer size, for steady large transfers)",
          v, kDefaultReceiveBufferBytes);
    return v;
  }();
  return value;
}

std::string apply_socket_options(int fd, const SocketOptions& o) {
  int one = 1;
  if (o.nodelay && setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
    return fmt::format("TCP_NODELAY: {}", strerror(errno));
  if (o.sndbuf > 0 && setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &o.sndbuf, sizeof(o.sndbuf)) < 0)
    return fmt::format("SO_SNDBUF: {}", strerror(errno));
  if (o.rcvbuf > 0 && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &o.rcvbuf, sizeof(o.rcvbuf)) < 0)
    return fmt::format("SO_RCVBUF: {}", strerror(errno));
  if (!o.congestion.empty() &&
      setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, o.congestion.data(), socklen_t(o.congestion.size())) < 0)
    return fmt::format("TCP_CONGESTION {}: {}", o.congestion, strerror(errno));
  return {};
}

TcpStream::TcpStream(Reactor& r, int fd, StreamOwner* owner, size_t rx_buffer)
    : reactor_(r), fd_(fd), owner_(owner), rx_size_(rx_buffer), seg_(256) {
  // In multishot mode bytes land in the reactor's shared buffers (or in place), so the
  // stream needs no receive buffer of its own.
  if (r.options().recv_multishot) pbuf_ = r.provided_buffers();
  if (!pbuf_) rx_.reset(new uint8_t[rx_buffer]);
  recv_c_.owner = this;
  recv_c_.fn = [](Completion* c, int res, uint32_t flags) {
    static_cast<OwnedCompletion<TcpStream>*>(c)->owner->on_recv(res, flags);
  };
  send_c_.owner = this;
  send_c_.fn = [](Completion* c, int res, uint32_t) {
    static_cast<OwnedCompletion<TcpStream>*>(c)->owner->on_send(res);
  };
  spin_.owner = this;
  spin_.poll = spin_poll;
  spin_.arm = [](SpinRecv* s) {
    auto* self = static_cast<OwnedSpinRecv*>(s)->owner;
    self->submit_recv(self->recv_dst_, self->recv_len_);
  };
  flush_d_.owner = this;
  flush_d_.fn = [](Deferred* d) { static_cast<OwnedDeferred<TcpStream>*>(d)->owner->flush(); };
  close_d_.owner = this;
  close_d_.fn = [](Deferred* d) {
    auto* self = static_cast<OwnedDeferred<TcpStream>*>(d)->owner;
    self->owner_->on_closed(self->close_err_);
  };
  zc_threshold_ = r.options().send_zc_threshold;
  if (zc_threshold_) {
    for (auto& z : zc_) {
      z.owner = this;
      z.fn = on_zc_cqe;
    }
    pending_.resize(256);
    zc_close_timer_.owner = this;
    zc_close_timer_.fn = [](Timer* t) { static_cast<OwnedTimer*>(t)->owner->force_close_fd(); };
  }
}

TcpStream::~TcpStream() {
  reactor_.remove_spin_recv(&spin_);
  reactor_.undefer(&flush_d_);
  reactor_.undefer(&close_d_);
  reactor_.cancel_timer(&zc_close_timer_);
  if (fd_ >= 0) ::close(fd_);
}

void TcpStream::start() { post_recv(); }

void TcpStream::post_recv() {
  if (closing_ || recv_inflight_) return;
  uint8_t* dst = rx_.get();
  size_t len = rx_size_;
  recv_direct_ = owner_->recv_direct(dst, len);
  recv_inflight_ = true;
  if (recv_direct_) ++reactor_.stats().direct_recvs;
  recv_dst_ = dst;
  recv_len_ = len;
  multishot_ = !recv_direct_ && pbuf_;
  // A spinning reactor polls the socket itself (see ReactorOptions::spin_recv) while the
  // stream is latency-bound.
  spin_missed_ = false;
  if (!multishot_ && poll_next_ && reactor_.add_spin_recv(&spin_)) return;
  submit_recv(dst, len);
}

void TcpStream::submit_recv(uint8_t* dst, size_t len) {
  io_uring_sqe* sqe = reactor_.get_sqe();
  if (multishot_) {
    // Stays armed across arrivals: one CQE per arrival, each in a buffer of the ring.
    io_uring_prep_recv_multishot(sqe, fd_, nullptr, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = ProvidedBuffers::kGroup;
    cancel_sent_ = false;
    ++reactor_.stats().multishot_arms;
  } else {
    io_uring_prep_recv(sqe, fd_, dst, len, 0);
  }
  reactor_.prep(sqe, &recv_c_);
  recv_turn_ = reactor_.turn();
}

bool TcpStream::latency_bound(ssize_t received) const {
  // A small receive that had to wait: a request/response stream with an idle pipe, where
  // finding the bytes a few microseconds sooner is the round trip. Bulk bytes (a large
  // payload, or many replies at once) are throughput-bound: there a recv() spinning on the
  // socket only takes its lock from the kernel's receive path, which must then leave
  // arriving segments (and their ACKs) to the backlog.
  return !recv_direct_ && received > 0 && size_t(received) < kSpinRecvMaxBytes;
}

bool TcpStream::spin_poll(SpinRecv* r) {
  auto* self = static_cast<OwnedSpinRecv*>(r)->owner;
  ssize_t n = ::recv(self->fd_, self->recv_dst_, self->recv_len_, MSG_DONTWAIT);
  const int err = n < 0 ? errno : 0;
  if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR) {
    self->spin_missed_ = true;
    return false;
  }
  ++self->reactor_.stats().spin_recvs;
  self->reactor_.remove_spin_recv(r);
  self->recv_turn_ = 0;  // not an io_uring receive
  self->poll_next_ = self->spin_missed_ && self->latency_bound(n);
  self->on_recv(n < 0 ? -err : int(n), 0);
  return true;
}

void TcpStream::on_multishot(int res, uint32_t flags) {
  if (!(flags & IORING_CQE_F_MORE)) recv_inflight_ = false;  // it has ended
  if (res > 0) {
    auto bid = uint16_t(flags >> IORING_CQE_BUFFER_SHIFT);
    ++reactor_.stats().multishot_cqes;
    if (!closing_) owner_->on_receive(pbuf_->buffer(bid), size_t(res));
    pbuf_->recycle(bid);
  } else if (res == -ENOBUFS) {
    ++reactor_.stats().multishot_nobufs;  // every buffer was taken: re-armed below
  } else if (res == 0 || (res != -EAGAIN && res != -EINTR && !(res == -ECANCELED && cancel_sent_))) {
    if (!closing_) close_err_ = res;  // 0: orderly shutdown by the peer
    close();
    return;
  }
  if (closing_) {
    maybe_finish_close();
    return;
  }
  if (!recv_inflight_) {
    post_recv();
    return;
  }
  // Still armed. A large payload is under way: stop the multishot receive so the rest can
  // land in place (what arrives before it stops is copied, as any staged bytes are).
  uint8_t* p = nullptr;
  size_t n = 0;
  if (!cancel_sent_ && owner_->recv_direct(p, n)) {
    io_uring_sqe* sqe = reactor_.get_sqe();
    io_uring_prep_cancel(sqe, &recv_c_, 0);
    reactor_.prep(sqe, nullptr);
    cancel_sent_ = true;
  }
}

void TcpStream::on_recv(int res, uint32_t flags) {
  if (multishot_) {
    on_multishot(res, flags);
    return;
  }
  recv_inflight_ = false;
  // An io_uring receive queued in one turn is issued at the start of the next; done
  // later than that, it had to wait for its bytes.
  if (recv_turn_) poll_next_ = reactor_.turn() > recv_turn_ + 1 && latency_bound(res);
  if (res <= 0) {
    if (res == -EAGAIN || res == -EINTR) {
      post_recv();
      return;
    }
    if (!closing_) close_err_ = res;  // 0: orderly shutdown by the peer
    close();
    return;
  }
  if (closing_) {
    maybe_finish_close();
    return;
  }
  if (recv_direct_) owner_->on_receive_direct(size_t(res));
  else owner_->on_receive(rx_.get(), size_t(res));
  // The owner may have closed us while handling the bytes.
  if (closing_) {
    maybe_finish_close();
    return;
  }
  // What these bytes produced (every PDU in them is parsed by now) goes out ahead of the
  // next receive: io_uring issues entries in order, and a receive that finds no data arms
  // a poll first, which would delay the reply by that much on every round trip.
  // (A flush still deferred finds the send in flight and does nothing.)
  if (seg_count_ > 0 && !send_inflight_) flush();
  post_recv();
}

void TcpStream::push_segment(const Segment& s) {
  if (seg_count_ == seg_.size()) {
    std::vector<Segment> bigger(seg_.size() * 2);
    for (size_t i = 0; i < seg_count_; ++i) bigger[i] = seg_[(seg_head_ + i) % seg_.size()];
    seg_.swap(bigger);
    seg_head_ = 0;
  }
  seg_[(seg_head_ + seg_count_) % seg_.size()] = s;
  ++seg_count_;
}

void TcpStream::complete_done(SendDone* d) {
  if (pending_count_ == 0 && zc_issued_ < zc_done_below_) {
    d->fn(d);  // no zero-copy send holds anything: the common (and copying) case
    return;
  }
  if (pending_count_ == pending_.size()) {
    std::vector<PendingDone> bigger(std::max<size_t>(pending_.size() * 2, 64));
    for (size_t i = 0; i < pending_count_; ++i) bigger[i] = pending_[(pending_head_ + i) % pending_.size()];
    pending_.swap(bigger);
    pending_head_ = 0;
  }
  pending_[(pending_head_ + pending_count_) % pending_.size()] = {d, zc_issued_};
  ++pending_count_;
}

void TcpStream::on_zc_cqe(Completion* c, int res, uint32_t flags) {
  auto* z = static_cast<ZcSend*>(c);
  TcpStream* self = z->owner;
  if (flags & IORING_CQE_F_NOTIF) {
    // The kernel holds none of this send's pages any more.
    ReactorStats& st = self->reactor_.stats();
    ++st.zc_notifs;
    if (uint32_t(res) & kNotifUsageZcCopied) ++st.zc_copied;
    self->zc_released(z);
    return;
  }
  self->on_send(res);
  // Without F_MORE no notification follows (the kernel took no reference).
  if (!(flags & IORING_CQE_F_MORE)) self->zc_released(z);
}

void TcpStream::zc_released(ZcSend* z) {
  z->busy = false;
  --zc_busy_;
  zc_done_below_ = zc_issued_ + 1;
  for (const auto& o : zc_)
    if (o.busy && o.seq < zc_done_below_) zc_done_below_ = o.seq;
  while (pending_count_ > 0) {
    PendingDone& p = pending_[pending_head_];
    if (p.after_seq >= zc_done_below_) break;
    SendDone* d = p.done;
    pending_head_ = (pending_head_ + 1) % pending_.size();
    --pending_count_;
    d->fn(d);
  }
  if (closing_) maybe_finish_close();
}

void TcpStream::force_close_fd() {
  if (zc_busy_ == 0 || fd_ < 0) return;
  // Reset rather than wait: the kernel drops the unacknowledged data and its page
  // references, and the notifications arrive.
  linger lg{1, 0};
  setsockopt(fd_, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  ::close(fd_);
  fd_ = -1;
}

void TcpStream::send(const void* data, size_t len, SendDone* done) {
  if (closing_) {
    // Nothing more leaves a closing connection; still release the owner's memory.
    if (done) complete_done(done);
    return;
  }
  push_segment({static_cast<const uint8_t*>(data), len, done});
  queued_bytes_ += len;
  if (!send_inflight_) reactor_.defer(&flush_d_);
}

void TcpStream::flush() {
  if (send_inflight_ || closing_ || seg_count_ == 0) return;
  int n = 0;
  size_t off = head_offset_;
  bool zc = false;
  const size_t limit = send_limit_ && reactor_.now_ns() < send_limit_->until_ns ? send_limit_->bytes : 0;
  size_t room = limit ? limit : SIZE_MAX, batch = 0;
  for (size_t i = 0; i < seg_count_ && n < kMaxIov && room > 0; ++i) {
    const Segment& s = seg_[(seg_head_ + i) % seg_.size()];
    if (s.len - off > 0) {
      const size_t len = std::min(s.len - off, room);
      iov_[n].iov_base = const_cast<uint8_t*>(s.data + off);
      iov_[n].iov_len = len;
      zc |= zc_threshold_ && len >= zc_threshold_;
      room -= len;
      batch += len;
      ++n;
    }
    off = 0;
  }
  // Under a limit, a stream that handed the kernel its share this turn (directly, or through
  // io_uring at this turn's submission) sends the rest through io_uring, which hands it over at
  // the next turn's submission.
  if (limit && reactor_.turn() != send_turn_) {
    send_turn_ = reactor_.turn();
    sent_in_turn_ = 0;
  }
  const bool turn_spent = limit && sent_in_turn_ >= limit;
  if (n == 0) {
    on_send(0);  // only zero-length segments: complete them
    return;
  }
  msg_ = {};
  msg_.msg_iov = iov_;
  msg_.msg_iovlen = size_t(n);
  ZcSend* slot = nullptr;
  if (zc) {
    // All slots waiting for notifications: this batch is copied instead of waiting.
    for (auto& z : zc_)
      if (!z.busy) {
        slot = &z;
        break;
      }
  }
  // A latency-bound stream on a spinning reactor (its receives are polled, see
  // ReactorOptions::spin_recv) sends with a plain non-blocking sendmsg() at once: through
  // io_uring the bytes would leave only at the next turn's submission, and the send's
  // completion would take a CQE. Only when nothing else of ours is in flight on the socket
  // (no earlier send, no zero-copy send still held), so the bytes keep their order. What
  // the socket does not take at once goes on through io_uring.
  if (!zc && zc_busy_ == 0 && poll_next_ && !direct_send_blocked_ && !turn_spent && reactor_.spin_receiving()) {
    ssize_t sent = ::sendmsg(fd_, &msg_, MSG_NOSIGNAL | MSG_DONTWAIT);
    const int err = sent < 0 ? errno : 0;
    if (sent > 0) sent_in_turn_ += size_t(sent);
    if (err != EAGAIN && err != EWOULDBLOCK && err != EINTR) {
      ++reactor_.stats().direct_sends;
      size_t total = 0;
      for (int i = 0; i < n; ++i) total += iov_[i].iov_len;
      // A short send means a full socket buffer: the rest waits in io_uring for room.
      direct_send_blocked_ = sent >= 0 && size_t(sent) < total;
      on_send(sent < 0 ? -err : int(sent));
      return;
    }
    direct_send_blocked_ = true;
  }
  io_uring_sqe* sqe = reactor_.get_sqe();
  if (slot) {
    slot->busy = true;
    slot->seq = ++zc_issued_;
    ++zc_busy_;
    io_uring_prep_sendmsg_zc(sqe, fd_, &msg_, MSG_NOSIGNAL);
    sqe->ioprio |= kSendZcReportUsage;
    reactor_.prep(sqe, slot);
    ++reactor_.stats().zc_sends;
  } else if (n == 1) {
    // One segment (a lone command capsule, say): a plain send spares the kernel copying
    // in the msghdr and its iovec.
    io_uring_prep_send(sqe, fd_, iov_[0].iov_base, iov_[0].iov_len, MSG_NOSIGNAL);
    reactor_.prep(sqe, &send_c_);
  } else {
    io_uring_prep_sendmsg(sqe, fd_, &msg_, MSG_NOSIGNAL);
    reactor_.prep(sqe, &send_c_);
  }
  if (limit) {  // handed over at the next turn's submission: that turn's share
    send_turn_ = reactor_.turn() + 1;
    sent_in_turn_ = batch;
  }
  send_inflight_ = true;
}

void TcpStream::on_send(int res) {
  send_inflight_ = false;
  // An io_uring send completed (or a direct one went whole): the socket has room again.
  if (res >= 0 && size_t(res) == queued_bytes_) direct_send_blocked_ = false;
  if (res < 0) {
    if (res == -EAGAIN || res == -EINTR) {
      if (!closing_) flush();
      else maybe_finish_close();
      return;
    }
    if (!closing_) close_err_ = res;
    close();
    return;
  }
  size_t left = size_t(res);
  queued_bytes_ -= left;
  sent_bytes_ += left;
  while (seg_count_ > 0) {
    Segment& s = seg_[seg_head_];
    size_t remain = s.len - head_offset_;
    if (left < remain) {
      head_offset_ += left;
      break;
    }
    left -= remain;
    head_offset_ = 0;
    SendDone* done = s.done;
    seg_head_ = (seg_head_ + 1) % seg_.size();
    --seg_count_;
    if (done) complete_done(done);
  }
  if (closing_) maybe_finish_close();
  else if (seg_count_ > 0) flush();
}

void TcpStream::close() {
  if (!closing_) {
    closing_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    // Release every queued segment: none of it will be sent.
    while (seg_count_ > 0) {
      SendDone* done = seg_[seg_head_].done;
      seg_head_ = (seg_head_ + 1) % seg_.size();
      --seg_count_;
      if (done) complete_done(done);  // after the notifications of earlier zero-copy sends
    }
    if (zc_busy_ > 0) reactor_.arm_timer(&zc_close_timer_, kZcCloseGraceNs);
    queued_bytes_ = 0;
    head_offset_ = 0;
    if (spin_.linked) {
      // Polled by the reactor, not in the kernel: nothing to cancel.
      reactor_.remove_spin_recv(&spin_);
      recv_inflight_ = false;
    } else if (recv_inflight_) {
      io_uring_sqe* sqe = reactor_.get_sqe();
      io_uring_prep_cancel(sqe, &recv_c_, 0);
      reactor_.prep(sqe, nullptr);
    }
  }
  maybe_finish_close();
}

void TcpStream::maybe_finish_close() {
  if (recv_inflight_ || send_inflight_ || zc_busy_ > 0 || closed_notified_) return;
  reactor_.cancel_timer(&zc_close_timer_);
  closed_notified_ = true;
  // Deliver on_closed from a deferred step so the owner never frees us inside our own call.
  reactor_.defer(&close_d_);
}

std::string Endpoint::host() const {
  char host[INET6_ADDRSTRLEN] = "?";
  if (addr.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr, host, sizeof(host));
  else
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr, host, sizeof(host));
  return host;
}

std::string Endpoint::to_string() const {
  if (addr.ss_family == AF_INET)
    return fmt::format("{}:{}", host(), ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port));
  return fmt::format("[{}]:{}", host(), ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port));
}

bool resolve(const std::string& host, uint16_t port, Endpoint& out, std::string& err) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string h = host;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  int rc = getaddrinfo(h.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0 || !res) {
    err = fmt::format("cannot resolve '{}': {}", host, gai_strerror(rc));
    return false;
  }
  std::memcpy(&out.addr, res->ai_addr, res->ai_addrlen);
  out.len = res->ai_addrlen;
  freeaddrinfo(res);
  return true;
}

int listen_on(const Endpoint& ep, int backlog) {
  int fd = ::socket(ep.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&ep.addr), ep.len) < 0 || ::listen(fd, backlog) < 0) {
    int e = -errno;
    ::close(fd);
    return e;
  }
  return fd;
}

}  // namespace nvtcp::reactor
