// SPDX-License-Identifier: Apache-2.0
// Bytes in and out of one TCP connection, driven by a Reactor. This layer knows nothing of
// PDUs: it hands received bytes to its owner and gathers queued send segments into one
// sendmsg per loop turn. A TLS layer can later sit between this and the PDU layer.
#pragma once
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "reactor/byte_stream.hpp"
#include "reactor/reactor.hpp"

namespace nvtcp::reactor {

struct SocketOptions {
  bool nodelay = true;
  int sndbuf = 0;                 // 0 = kernel default
  int rcvbuf = 0;
  std::string congestion;         // TCP_CONGESTION per socket, e.g. "cubic"; empty = default
};

// SO_SNDBUF when none is configured: 512 KiB, 1 MiB in the kernel's accounting (it doubles
// what is set). Autotuning grows a busy socket's send buffer to tcp_wmem's maximum, 4 MiB on
// Debian, and a sender that hands the kernel everything ready then keeps a send queue that
// deep; bbr paces such a queue so badly that 128 KiB transfers run at half the rate. 1 MiB
// still carries 80 Gb/s per connection at 100 us of round trip. net.core.wmem_max caps it.
// Measured in bench/RESULTS.md ("a send buffer of its own").
inline constexpr uint32_t kDefaultSendBufferBytes = 512u << 10;

// The SO_SNDBUF to set: the send buffer if configured (0: the kernel autotunes), else the
// socket buffer if set, else kDefaultSendBufferBytes.
inline int send_buffer_for(std::optional<uint64_t> send_buffer, uint64_t socket_buffer) {
  if (send_buffer) return int(*send_buffer);
  return int(socket_buffer ? socket_buffer : kDefaultSendBufferBytes);
}

// SO_RCVBUF when none is configured: 4 MiB, 8 MiB in the kernel's accounting, where
// net.core.rmem_max lets that much through. Autotuning starts a receive buffer at tcp_rmem's
// default and grows it by what the reader took in the last round trip; a reader with more
// bytes in flight than that (an initiator's reads, a target's writes: 32 commands of 128 KiB
// are 4 MiB) then advertises a zero window thousands of times a second, the sender refills
// the window in small pieces, each byte costs more to receive and the reader never catches
// up: the same run lands at half its rate or less, by chance. A fixed buffer that covers the
// bytes in flight keeps the window open (SPDK fixes 2 MiB for the same reason). Measured in
// bench/RESULTS.md ("128 KiB transfers: the receive window").
inline constexpr uint32_t kDefaultReceiveBufferBytes = 4u << 20;

// The SO_RCVBUF to set: the socket buffer if configured, else kDefaultReceiveBufferBytes
// when rmem_max (net.core.rmem_max) admits it whole, else 0: the kernel autotunes (a buffer
// capped below it would hold less than autotuning reaches).
inline int receive_buffer_for(uint64_t socket_buffer, uint64_t rmem_max) {
  if (socket_buffer) return int(socket_buffer);
  return rmem_max >= kDefaultReceiveBufferBytes ? int(kDefaultReceiveBufferBytes) : 0;
}

// net.core.rmem_max, read once per process (0 if it cannot be read). When it is below
// kDefaultReceiveBufferBytes the first call logs, once, that receive buffers autotune.
uint64_t net_core_rmem_max();

// Applies options to a socket; returns an error message or empty.
std::string apply_socket_options(int fd, const SocketOptions& opts);

// A ByteStream over a TCP socket. Final, so that the host's queue pairs, which hold a TcpStream
// itself, call it without a virtual dispatch.
class TcpStream final : public ByteStream {
 public:
  TcpStream(Reactor& r, int fd, StreamOwner* owner, size_t rx_buffer = 128 * 1024);
  ~TcpStream() override;
  TcpStream(const TcpStream&) = delete;
  TcpStream& operator=(const TcpStream&) = delete;

  // Starts receiving. Call once the owner is ready for bytes.
  void start() override;
  // Queues len bytes at data; done (optional) fires when they have all been sent.
  void send(const void* data, size_t len, SendDone* done = nullptr) override;
  // Shuts the socket down; on_closed follows once nothing is in flight.
  void close() override;
  bool closing() const override { return closing_; }
  int fd() const { return fd_; }
  Reactor& reactor() { return reactor_; }
  size_t queued_bytes() const override { return queued_bytes_; }
  // Bytes handed to the kernel so far: progress, for a deadline on a peer that stops reading.
  uint64_t sent_bytes() const override { return sent_bytes_; }
  // Every zero-copy slot's sendmsg, each of up to kMaxIov segments.
  size_t max_sends_held_after_delivery() const override { return zc_threshold_ ? size_t(kZcSlots) * kMaxIov : 0; }
  // No zero-copy sends from now on: the socket refuses them once a ULP such as kTLS is on it.
  // Sends already in flight complete as before.
  void disable_zero_copy() { zc_threshold_ = 0; }
  // At most limit->bytes handed to the kernel per reactor turn while it holds (limit->until_ns),
  // read at each send: the owner changes it as it sees fit. Each byte sent costs the sending core its copy and, on
  // loopback, the peer's TCP receive too: a target that sent a 1 MiB response whole spent
  // 170 us on it in one turn, and every other connection of that reactor waited. The rest goes
  // on the next turns.
  void limit_send_per_turn(const SendLimit* limit) { send_limit_ = limit; }
  // SendDones whose bytes have left but which wait for a zero-copy notification.
  size_t held_send_dones() const { return pending_count_; }

 private:
  struct Segment {
    const uint8_t* data;
    size_t len;
    SendDone* done;
  };
  void post_recv();
  void submit_recv(uint8_t* dst, size_t len);
  static bool spin_poll(SpinRecv* r);
  void flush();
  void on_recv(int res, uint32_t flags);
  void on_multishot(int res, uint32_t flags);
  void on_send(int res);
  void maybe_finish_close();
  void push_segment(const Segment& s);

  // Zero-copy sends: each in flight (its bytes or its notification still to come) holds a
  // slot; a slot's sequence number orders it among them.
  struct ZcSend : Completion {
    TcpStream* owner = nullptr;
    uint64_t seq = 0;
    bool busy = false;
  };
  static constexpr int kZcSlots = 8;
  // A SendDone whose bytes have left but which must wait until every zero-copy send up to
  // after_seq has been notified (FIFO, so SendDones fire in the order the bytes were queued).
  struct PendingDone {
    SendDone* done;
    uint64_t after_seq;
  };
  static void on_zc_cqe(Completion* c, int res, uint32_t flags);
  void zc_released(ZcSend* z);
  void complete_done(SendDone* d);
  void force_close_fd();

  Reactor& reactor_;
  int fd_;
  StreamOwner* owner_;
  std::unique_ptr<uint8_t[]> rx_;
  size_t rx_size_;
  bool recv_inflight_ = false;
  bool recv_direct_ = false;      // the receive in flight lands in the owner's memory
  ProvidedBuffers* pbuf_ = nullptr;  // multishot receive mode when set
  bool multishot_ = false;        // the receive in flight is the multishot one
  bool cancel_sent_ = false;      // ... and it is being stopped for an in-place receive
  bool send_inflight_ = false;
  bool closing_ = false;
  bool closed_notified_ = false;
  int close_err_ = 0;

  // Send queue: a ring of segments that grows (rarely, at warm-up) but never shrinks.
  std::vector<Segment> seg_;
  size_t seg_head_ = 0, seg_count_ = 0;
  size_t head_offset_ = 0;        // bytes of the head segment already sent
  const SendLimit* send_limit_ = nullptr;  // limit_send_per_turn
  uint64_t send_turn_ = UINT64_MAX;
  size_t sent_in_turn_ = 0;       // handed to the kernel in send_turn_
  size_t queued_bytes_ = 0;
  uint64_t sent_bytes_ = 0;
  static constexpr int kMaxIov = 64;
  iovec iov_[kMaxIov];
  msghdr msg_{};

  OwnedCompletion<TcpStream> recv_c_, send_c_;
  // The receive a spinning reactor polls (recv_inflight_ is set while it is linked).
  struct OwnedSpinRecv : SpinRecv {
    TcpStream* owner = nullptr;
  } spin_;
  uint8_t* recv_dst_ = nullptr;  // where the pending receive puts its bytes
  size_t recv_len_ = 0;
  // Whether the next receive is polled (ReactorOptions::spin_recv): the last one was
  // small and had to wait. Else it goes through io_uring, batched with the sends.
  bool poll_next_ = false;
  static constexpr size_t kSpinRecvMaxBytes = 16 * 1024;
  bool latency_bound(ssize_t received) const;
  bool spin_missed_ = false;      // the polled receive has found nothing at least once
  // A direct send found the socket full: sends go through io_uring until one of them has
  // emptied the queue.
  bool direct_send_blocked_ = false;
  uint64_t recv_turn_ = 0;        // the loop turn an io_uring receive was queued in
  OwnedDeferred<TcpStream> flush_d_, close_d_;

  uint32_t zc_threshold_ = 0;
  ZcSend zc_[kZcSlots];
  int zc_busy_ = 0;
  uint64_t zc_issued_ = 0;        // seq of the last zero-copy send issued (first is 1)
  uint64_t zc_done_below_ = 1;    // every zero-copy send with a smaller seq is released
  std::vector<PendingDone> pending_;  // a ring like seg_
  size_t pending_head_ = 0, pending_count_ = 0;
  // A peer that stops acknowledging would hold the notifications (and so the close)
  // forever: after this long the socket is reset, which frees the kernel's references.
  static constexpr uint64_t kZcCloseGraceNs = 1'000'000'000ull;
  struct OwnedTimer : Timer {
    TcpStream* owner = nullptr;
  } zc_close_timer_;
};

// Socket helpers (control path).
struct Endpoint {
  sockaddr_storage addr{};
  socklen_t len = 0;
  std::string to_string() const;  // "host:port", "[v6 host]:port"
  std::string host() const;       // the address alone, no port, no brackets
};
// Resolves "127.0.0.1" / "::1" / a host name and a port.
bool resolve(const std::string& host, uint16_t port, Endpoint& out, std::string& err);
// A listening, non-blocking socket with SO_REUSEADDR; returns fd or -errno.
int listen_on(const Endpoint& ep, int backlog = 1024);

}  // namespace nvtcp::reactor
