// SPDX-License-Identifier: Apache-2.0
// TcpStream's optional data-path modes over a real loopback connection, one reactor
// driving both ends: zero-copy sends release their memory only after the kernel's
// notification, in queue order, and a close waits for the notifications; multishot
// receive into provided buffers delivers every byte in order, survives a dry ring, and
// still receives large payloads in place; a spinning reactor's polled receives (recv()
// instead of io_uring) deliver every byte, hand over to io_uring when the reactor sleeps,
// and let go of streams that close or are destroyed while polled; its latency-bound
// streams send with sendmsg() directly, and what a full socket does not take follows
// through io_uring in order.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "reactor/reactor.hpp"
#include "reactor/tcp_stream.hpp"

namespace nvtcp::reactor::tcp_stream_modes_test {
namespace {

// A connected loopback pair (fds).
bool tcp_pair(int& a, int& b) {
  Endpoint ep;
  std::string err;
  if (!resolve("127.0.0.1", 0, ep, err)) return false;
  int lfd = listen_on(ep, 4);
  if (lfd < 0) return false;
  sockaddr_storage ss{};
  socklen_t sl = sizeof(ss);
  getsockname(lfd, reinterpret_cast<sockaddr*>(&ss), &sl);
  a = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool ok = ::connect(a, reinterpret_cast<sockaddr*>(&ss), sl) == 0;
  b = ok ? ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC) : -1;
  ::close(lfd);
  return ok && b >= 0;
}

struct Sink : StreamOwner {
  std::vector<uint8_t> got;
  bool closed = false;
  void on_receive(const uint8_t* d, size_t n) override { got.insert(got.end(), d, d + n); }
  void on_closed(int) override { closed = true; }
};

struct Source : StreamOwner {
  bool closed = false;
  void on_receive(const uint8_t*, size_t) override {}
  void on_closed(int) override { closed = true; }
};

// Records, when it fires, how many notifications the reactor had seen by then.
struct Done : SendDone {
  Reactor* r = nullptr;
  std::vector<int>* order = nullptr;
  int index = 0;
  uint64_t notifs_at_fire = ~0ull;
  Done() {
    fn = [](SendDone* d) {
      auto* self = static_cast<Done*>(d);
      self->notifs_at_fire = self->r->stats().zc_notifs;
      self->order->push_back(self->index);
    };
  }
};

// n SendDones on r that record their index in order when they fire.
std::vector<Done> dones_for(Reactor& r, std::vector<int>& order, size_t n) {
  std::vector<Done> d(n);
  for (size_t i = 0; i < n; ++i) {
    d[i].r = &r;
    d[i].order = &order;
    d[i].index = int(i);
  }
  return d;
}

ReactorOptions zero_copy_from(uint32_t threshold) {
  ReactorOptions o;
  o.send_zc_threshold = threshold;
  return o;
}

ReactorOptions polling(PollMode m) {
  ReactorOptions o;
  o.poll = m;
  return o;
}

// Two started TcpStreams on r, joined by a loopback connection: tx (owned by src) sends to
// rx (owned by sink). tx and rx stay empty when the connection cannot be made.
template <class Receiver>
struct StreamPair {
  Source src;
  Receiver sink;
  std::unique_ptr<TcpStream> tx, rx;
  explicit StreamPair(Reactor& r) {
    int a = -1, b = -1;
    if (!tcp_pair(a, b)) return;
    tx = std::make_unique<TcpStream>(r, a, &src);
    rx = std::make_unique<TcpStream>(r, b, &sink);
    tx->start();
    rx->start();
  }
};

template <class Pred>
bool run_until(Reactor& r, Pred p) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!p() && std::chrono::steady_clock::now() < until) r.run_once(1000);
  return p();
}

TEST(TcpStreamZeroCopy, SendDoneWaitsForTheNotificationAndKeepsOrder) {
  Reactor r(256, zero_copy_from(32 * 1024));
  StreamPair<Sink> p(r);
  ASSERT_TRUE(p.tx);

  // Headers below the threshold and payloads above it, interleaved as the target sends
  // them; every segment has its own SendDone.
  constexpr int kSegments = 40;
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<uint8_t> expect;
  for (int i = 0; i < kSegments; ++i) {
    size_t len = i % 2 ? 128 * 1024 : 24;
    bufs.emplace_back(len);
    for (size_t k = 0; k < len; ++k) bufs.back()[k] = uint8_t(i * 7 + k);
    expect.insert(expect.end(), bufs.back().begin(), bufs.back().end());
  }
  std::vector<int> order;
  std::vector<Done> dones = dones_for(r, order, kSegments);
  for (int i = 0; i < kSegments; ++i) {
    p.tx->send(bufs[size_t(i)].data(), bufs[size_t(i)].size(), &dones[size_t(i)]);
    if (i % 8 == 7) r.run_once(0);  // several batches, so several zero-copy sends
  }
  ASSERT_TRUE(run_until(r, [&] { return p.sink.got.size() == expect.size() && order.size() == size_t(kSegments); }))
      << "received " << p.sink.got.size() << " of " << expect.size() << " bytes, " << order.size() << " SendDones";
  EXPECT_TRUE(p.sink.got == expect) << "bytes differ";
  const ReactorStats& st = r.stats();
  EXPECT_GT(st.zc_sends, 0u);
  EXPECT_EQ(st.zc_notifs, st.zc_sends);
  for (int i = 0; i < kSegments; ++i) {
    EXPECT_EQ(order[size_t(i)], i) << "SendDones out of queue order";
    // Every segment went out in a batch with a payload, so in a zero-copy send: its
    // SendDone may only fire once a notification has come in.
    EXPECT_GE(dones[size_t(i)].notifs_at_fire, 1u) << "segment " << i << " released before any notification";
  }
  EXPECT_EQ(p.tx->held_send_dones(), 0u);

  p.tx->close();
  ASSERT_TRUE(run_until(r, [&] { return p.src.closed && p.sink.closed; }));
}

TEST(TcpStreamZeroCopy, CloseWaitsForNotificationsThenReleasesEverything) {
  Reactor r(256, zero_copy_from(4096));
  StreamPair<Sink> p(r);
  ASSERT_TRUE(p.tx);
  std::vector<uint8_t> payload(256 * 1024, 0x3C);
  std::vector<int> order;
  std::vector<Done> dones = dones_for(r, order, 4);
  for (int i = 0; i < 4; ++i) {
    p.tx->send(payload.data(), payload.size(), &dones[size_t(i)]);
  }
  r.run_once(0);  // the first batch leaves (zero-copy); the rest is queued
  p.tx->close();    // queued segments are dropped, but released only after the notifications
  ASSERT_TRUE(run_until(r, [&] { return p.src.closed; })) << "the close never finished";
  EXPECT_EQ(order.size(), 4u) << "every SendDone fires by the time the stream reports closed";
  EXPECT_EQ(r.stats().zc_notifs, r.stats().zc_sends);
  for (int i = 0; i < int(order.size()); ++i) EXPECT_EQ(order[size_t(i)], i);
  p.rx->close();
  ASSERT_TRUE(run_until(r, [&] { return p.sink.closed; }));
}

TEST(TcpStreamZeroCopy, BelowTheThresholdNothingIsZeroCopy) {
  Reactor r(256, zero_copy_from(1u << 20));
  StreamPair<Sink> p(r);
  ASSERT_TRUE(p.tx);
  std::vector<uint8_t> payload(64 * 1024, 0x11);
  std::vector<int> order;
  std::vector<Done> d = dones_for(r, order, 1);
  p.tx->send(payload.data(), payload.size(), &d[0]);
  ASSERT_TRUE(run_until(r, [&] { return p.sink.got.size() == payload.size() && order.size() == 1; }));
  EXPECT_EQ(r.stats().zc_sends, 0u);
  p.tx->close();
  p.rx->close();
  ASSERT_TRUE(run_until(r, [&] { return p.src.closed && p.sink.closed; }));
}

// A tiny framed protocol: an 8-byte length, then that many bytes, which (when at least
// 16 KiB are still to come) the owner asks to receive in place.
struct Framed : StreamOwner {
  std::vector<uint8_t> dst;      // where payloads go
  size_t have = 0, len = 0;      // of the current payload
  uint8_t hdr[8];
  size_t hdr_have = 0;
  std::vector<std::vector<uint8_t>> payloads;
  bool closed = false;
  void take(const uint8_t* d, size_t n) {
    while (n > 0) {
      if (hdr_have < 8) {
        size_t k = std::min(n, 8 - hdr_have);
        std::memcpy(hdr + hdr_have, d, k);
        hdr_have += k, d += k, n -= k;
        if (hdr_have == 8) {
          std::memcpy(&len, hdr, 8);
          dst.assign(len, 0);
          have = 0;
          if (len == 0) finish();
        }
        continue;
      }
      size_t k = std::min(n, len - have);
      std::memcpy(dst.data() + have, d, k);
      have += k, d += k, n -= k;
      if (have == len) finish();
    }
  }
  void finish() {
    payloads.push_back(dst);
    hdr_have = 0;
  }
  void on_receive(const uint8_t* d, size_t n) override { take(d, n); }
  bool recv_direct(uint8_t*& p, size_t& n) override {
    if (hdr_have < 8 || len - have < 16384) return false;
    p = dst.data() + have;
    n = len - have;
    return true;
  }
  void on_receive_direct(size_t n) override {
    have += n;
    if (have == len) finish();
  }
  void on_closed(int) override { closed = true; }
};

struct MultishotRun {
  std::vector<std::vector<uint8_t>> sent;
  std::vector<uint64_t> lens;
  ReactorStats stats;
  bool all_received = false;
  std::vector<std::vector<uint8_t>> got;
};

// Sends frames of the given sizes, a few per loop turn, and receives them with multishot.
MultishotRun run_frames(const std::vector<size_t>& sizes, uint32_t buffers, uint32_t buffer_size) {
  MultishotRun out;
  ReactorOptions o;
  o.recv_multishot = true;
  o.recv_buffers = buffers;
  o.recv_buffer_size = buffer_size;
  Reactor r(256, o);
  StreamPair<Framed> p(r);
  if (!p.tx) return out;
  out.lens.reserve(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.sent.emplace_back(sizes[i]);
    for (size_t k = 0; k < sizes[i]; ++k) out.sent.back()[k] = uint8_t(i * 13 + k * 7);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.lens.push_back(sizes[i]);
    p.tx->send(&out.lens.back(), 8);
    p.tx->send(out.sent[i].data(), sizes[i]);
    if (i % 5 == 4) r.run_once(0);
  }
  out.all_received = run_until(r, [&] { return p.sink.payloads.size() == sizes.size(); });
  out.got = p.sink.payloads;
  out.stats = r.stats();
  p.tx->close();
  run_until(r, [&] { return p.src.closed && p.sink.closed; });
  return out;
}

TEST(TcpStreamMultishot, SmallFramesArriveWholeAndInOrder) {
  std::vector<size_t> sizes;
  for (size_t i = 0; i < 3000; ++i) sizes.push_back((i * 37) % 600);
  MultishotRun m = run_frames(sizes, 64, 4096);
  ASSERT_TRUE(m.all_received) << m.got.size() << " of " << sizes.size() << " frames";
  for (size_t i = 0; i < sizes.size(); ++i) ASSERT_TRUE(m.got[i] == m.sent[i]) << "frame " << i;
  EXPECT_GT(m.stats.multishot_cqes, 0u);
  EXPECT_EQ(m.stats.direct_recvs, 0u);
}

TEST(TcpStreamMultishot, LargePayloadsAreReceivedInPlace) {
  std::vector<size_t> sizes;
  for (size_t i = 0; i < 40; ++i) sizes.push_back(i % 3 == 0 ? 100 : (i % 3 == 1 ? 128 * 1024 : 1 << 20));
  MultishotRun m = run_frames(sizes, 64, 16384);
  ASSERT_TRUE(m.all_received) << m.got.size() << " of " << sizes.size() << " frames";
  for (size_t i = 0; i < sizes.size(); ++i) ASSERT_TRUE(m.got[i] == m.sent[i]) << "frame " << i;
  EXPECT_GT(m.stats.multishot_cqes, 0u);
  EXPECT_GT(m.stats.direct_recvs, 0u) << "payloads of 128 KiB and 1 MiB should land in place";
  EXPECT_GT(m.stats.multishot_arms, 1u) << "the multishot receive is re-armed after each in-place one";
}

TEST(TcpStreamMultishot, ADryBufferRingIsRearmedWithoutLosingBytes) {
  // Two 64-byte buffers for frames of up to 8 KiB: the ring runs dry all the time.
  std::vector<size_t> sizes;
  for (size_t i = 0; i < 200; ++i) sizes.push_back(1000 + (i * 71) % 7000);
  MultishotRun m = run_frames(sizes, 2, 64);
  ASSERT_TRUE(m.all_received) << m.got.size() << " of " << sizes.size() << " frames";
  for (size_t i = 0; i < sizes.size(); ++i) ASSERT_TRUE(m.got[i] == m.sent[i]) << "frame " << i;
  EXPECT_GT(m.stats.multishot_nobufs, 0u);
}

// --- Polled receives (ReactorOptions::spin_recv) ---

// Writes n bytes to a raw socket from another thread after a pause, while the reactor
// sleeps in io_uring.
void write_later(int fd, const uint8_t* d, size_t n, std::chrono::microseconds pause) {
  std::this_thread::sleep_for(pause);
  ASSERT_EQ(::send(fd, d, n, MSG_NOSIGNAL), ssize_t(n));
}

// Feeds rounds of 64 bytes into stream, each written only after the reactor has run a few
// empty turns, so that the stream's receive has waited for it whatever the machine's speed
// (the case where its next receive is polled: a polled receive has missed, an io_uring one
// was queued turns before it completed). Returns false when a round does not arrive.
bool feed_rounds(Reactor& r, int raw_fd, Sink& sink, int rounds, uint8_t seed) {
  for (int i = 0; i < rounds; ++i) {
    uint8_t msg[64];
    for (size_t k = 0; k < sizeof(msg); ++k) msg[k] = uint8_t(seed + i * 3 + k);
    size_t want = sink.got.size() + sizeof(msg);
    for (int t = 0; t < 3; ++t) r.run_once(0);
    if (::send(raw_fd, msg, sizeof(msg), MSG_NOSIGNAL) != ssize_t(sizeof(msg))) return false;
    bool ok = run_until(r, [&] { return sink.got.size() >= want; });
    if (!ok || std::memcmp(sink.got.data() + want - sizeof(msg), msg, sizeof(msg)) != 0) return false;
  }
  return true;
}

// A TcpStream on one end of a loopback pair, a raw socket on the other for the test to
// write into.
struct PolledPair {
  int raw = -1;
  Sink sink;
  std::unique_ptr<TcpStream> stream;
  explicit PolledPair(Reactor& r) {
    int b = -1;
    if (!tcp_pair(raw, b)) return;
    stream = std::make_unique<TcpStream>(r, b, &sink);
    stream->start();
  }
  ~PolledPair() {
    if (raw >= 0) ::close(raw);
  }
  bool feed(Reactor& r, int rounds, uint8_t seed) { return feed_rounds(r, raw, sink, rounds, seed); }
  // Closes the stream and waits until its owner hears of it.
  bool close(Reactor& r) {
    stream->close();
    return run_until(r, [&] { return sink.closed; });
  }
};

TEST(TcpStreamSpinRecv, ABusyReactorPollsAStreamThatWaits) {
  Reactor r(256, polling(PollMode::Busy));
  PolledPair p(r);
  ASSERT_TRUE(p.stream);
  ASSERT_TRUE(p.feed(r, 20, 1));
  EXPECT_GT(r.stats().spin_recvs, 0u) << "receives that waited should be polled next time";
  EXPECT_EQ(r.spin_recvs_linked(), 1u) << "the stream waits for its next bytes with recv()";
  ::close(p.raw);  // the peer's orderly close is seen by the polled receive
  p.raw = -1;
  ASSERT_TRUE(run_until(r, [&] { return p.sink.closed; }));
  EXPECT_EQ(r.spin_recvs_linked(), 0u);
}

TEST(TcpStreamSpinRecv, OffMeansIoUringOnly) {
  ReactorOptions o;
  o.poll = PollMode::Busy;
  o.spin_recv = false;
  Reactor r(256, o);
  PolledPair p(r);
  ASSERT_TRUE(p.stream);
  ASSERT_TRUE(p.feed(r, 10, 2));
  EXPECT_EQ(r.stats().spin_recvs, 0u);
  EXPECT_EQ(r.spin_recvs_linked(), 0u);
  ASSERT_TRUE(p.close(r));
}

TEST(TcpStreamSpinRecv, ASleepingReactorHandsPolledReceivesToIoUring) {
  // Hybrid polling spins while there is work and sleeps in io_uring after a quiet spell: a
  // receive it was polling must then be in the kernel, or the next bytes would not wake it.
  ReactorOptions o;
  o.poll = PollMode::Hybrid;
  Reactor r(256, o);
  r.set_spin_window_ns(5'000'000);  // 5 ms: long enough for a slow (sanitizer) build to keep spinning
  PolledPair p(r);
  ASSERT_TRUE(p.stream);
  // Until a receive is polled: one that waited while the reactor spun (on a loaded
  // machine the writer can take longer than the spin window, and the reactor sleeps).
  for (int i = 0; i < 200 && r.spin_recvs_linked() == 0; ++i) ASSERT_TRUE(p.feed(r, 1, uint8_t(i)));
  ASSERT_EQ(r.spin_recvs_linked(), 1u);
  // Quiet for longer than the spin window: the next turn sleeps (and wakes when its 1 ms
  // timeout passes), handing the receive over first.
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  r.run_once(1000);
  EXPECT_EQ(r.spin_recvs_linked(), 0u) << "a sleeping reactor must not leave a receive polled";
  uint8_t msg[64];
  std::memset(msg, 0x7E, sizeof(msg));
  size_t want = p.sink.got.size() + sizeof(msg);
  uint64_t polled_before = r.stats().spin_recvs;
  std::thread w(write_later, p.raw, msg, sizeof(msg), std::chrono::microseconds(20000));
  auto t0 = std::chrono::steady_clock::now();
  while (p.sink.got.size() < want && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
    r.run_once(2'000'000);  // sleeps until the bytes wake it (or 2 s)
  w.join();
  ASSERT_EQ(p.sink.got.size(), want);
  // They came through io_uring, which woke the reactor; a receive left polled would have
  // found them only after a sleep ran out.
  EXPECT_EQ(r.stats().spin_recvs, polled_before) << "the bytes did not come through io_uring";
  EXPECT_EQ(std::memcmp(p.sink.got.data() + want - sizeof(msg), msg, sizeof(msg)), 0);
  ASSERT_TRUE(p.close(r));
}

TEST(TcpStreamSpinRecv, ClosingOrDestroyingAPolledStreamUnlinksIt) {
  Reactor r(256, polling(PollMode::Busy));
  PolledPair x(r), y(r);
  ASSERT_TRUE(x.stream && y.stream);
  ASSERT_TRUE(x.feed(r, 10, 4));
  ASSERT_TRUE(y.feed(r, 10, 5));
  // A stream is polled once a receive has waited for its bytes; on a slow (sanitizer) build
  // a round can come in through io_uring instead, so feed both until both are polled.
  for (int i = 0; i < 200 && r.spin_recvs_linked() < 2; ++i) {
    ASSERT_TRUE(x.feed(r, 1, uint8_t(i)));
    ASSERT_TRUE(y.feed(r, 1, uint8_t(i + 7)));
  }
  ASSERT_EQ(r.spin_recvs_linked(), 2u);
  x.stream->close();
  EXPECT_EQ(r.spin_recvs_linked(), 1u) << "a closed stream is no longer polled";
  ASSERT_TRUE(run_until(r, [&] { return x.sink.closed; }));
  y.stream.reset();  // destroyed while polled: the reactor must forget it
  EXPECT_EQ(r.spin_recvs_linked(), 0u);
  for (int i = 0; i < 100; ++i) r.run_once(0);
}

// Reads n bytes from fd (blocking), or fewer if the peer closes.
std::vector<uint8_t> read_all(int fd, size_t n) {
  std::vector<uint8_t> got(n);
  size_t have = 0;
  while (have < n) {
    ssize_t k = ::recv(fd, got.data() + have, n - have, 0);
    if (k <= 0) break;
    have += size_t(k);
  }
  got.resize(have);
  return got;
}

// Makes p's stream latency-bound on a busy reactor: its receives are polled.
bool make_polled(Reactor& r, PolledPair& p) {
  for (int i = 0; i < 200 && r.spin_recvs_linked() == 0; ++i)
    if (!p.feed(r, 1, uint8_t(i))) return false;
  return r.spin_recvs_linked() == 1;
}

TEST(TcpStreamDirectSend, ALatencyBoundStreamOnASpinningReactorSendsWithoutIoUring) {
  Reactor r(256, polling(PollMode::Busy));
  PolledPair p(r);
  ASSERT_TRUE(p.stream);
  ASSERT_TRUE(make_polled(r, p));
  std::vector<int> order;
  std::vector<Done> dones = dones_for(r, order, 3);
  uint8_t reply[3][100];
  for (int i = 0; i < 3; ++i) {
    std::memset(reply[i], 0x20 + i, sizeof(reply[i]));
    p.stream->send(reply[i], sizeof(reply[i]), &dones[size_t(i)]);
  }
  r.run_once(0);  // the deferred flush: one sendmsg() of all three, done at once
  EXPECT_EQ(r.stats().direct_sends, 1u);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2})) << "a direct send completes its SendDones in queue order";
  EXPECT_EQ(p.stream->queued_bytes(), 0u);
  std::vector<uint8_t> got = read_all(p.raw, sizeof(reply));
  ASSERT_EQ(got.size(), sizeof(reply));
  EXPECT_EQ(std::memcmp(got.data(), reply, sizeof(reply)), 0);
  ASSERT_TRUE(p.close(r));
}

TEST(TcpStreamDirectSend, WhatAFullSocketDoesNotTakeGoesOnThroughIoUringInOrder) {
  Reactor r(256, polling(PollMode::Busy));
  PolledPair p(r);
  ASSERT_TRUE(p.stream);
  int small = 16 * 1024;
  ASSERT_EQ(setsockopt(p.stream->fd(), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
  ASSERT_TRUE(make_polled(r, p));
  // 96 segments of 40 KiB, far more than the socket and the peer's window hold while the
  // peer does not read: the direct send is short and the rest must follow it, in order.
  constexpr int kSegments = 96;
  constexpr size_t kLen = 40 * 1024;
  std::vector<uint8_t> data(kSegments * kLen);
  for (size_t k = 0; k < data.size(); ++k) data[k] = uint8_t(k * 13 / 4096 + k);
  std::vector<int> order;
  std::vector<Done> dones = dones_for(r, order, kSegments);
  for (int i = 0; i < kSegments; ++i) {
    p.stream->send(data.data() + size_t(i) * kLen, kLen, &dones[size_t(i)]);
  }
  r.run_once(0);
  EXPECT_EQ(r.stats().direct_sends, 1u);
  EXPECT_GT(p.stream->queued_bytes(), 0u) << "the socket cannot have taken it all";
  std::vector<uint8_t> got;
  std::thread reader([&] { got = read_all(p.raw, data.size()); });
  bool all = run_until(r, [&] { return order.size() == size_t(kSegments); });
  reader.join();
  ASSERT_TRUE(all) << order.size() << " of " << kSegments << " SendDones";
  ASSERT_EQ(got.size(), data.size());
  EXPECT_TRUE(got == data) << "bytes out of order";
  for (int i = 0; i < kSegments; ++i) EXPECT_EQ(order[size_t(i)], i);
  // Once the queue has drained through io_uring, sends are direct again.
  const uint64_t direct_before = r.stats().direct_sends;
  uint8_t tail[32];
  std::memset(tail, 0x5A, sizeof(tail));
  p.stream->send(tail, sizeof(tail));
  r.run_once(0);
  EXPECT_EQ(r.stats().direct_sends, direct_before + 1);
  got = read_all(p.raw, sizeof(tail));
  ASSERT_EQ(got.size(), sizeof(tail));
  EXPECT_EQ(std::memcmp(got.data(), tail, sizeof(tail)), 0);
  ASSERT_TRUE(p.close(r));
}

TEST(TcpStreamDirectSend, AnInterruptDrivenReactorLeavesSendsToIoUring) {
  Reactor r(256, ReactorOptions{});
  PolledPair p(r);
  ASSERT_TRUE(p.stream);
  ASSERT_TRUE(p.feed(r, 3, 9));
  uint8_t reply[64];
  std::memset(reply, 0x33, sizeof(reply));
  p.stream->send(reply, sizeof(reply));
  ASSERT_TRUE(run_until(r, [&] { return p.stream->queued_bytes() == 0; }));
  EXPECT_EQ(r.stats().direct_sends, 0u);
  std::vector<uint8_t> got = read_all(p.raw, sizeof(reply));
  EXPECT_EQ(got, std::vector<uint8_t>(reply, reply + sizeof(reply)));
  ASSERT_TRUE(p.close(r));
}

// Echoes every 64-byte message it receives (with a fixed reply) on its own stream.
struct Echo : StreamOwner {
  TcpStream* s = nullptr;
  size_t pending = 0;
  bool closed = false;
  uint8_t reply[64];
  void on_receive(const uint8_t*, size_t n) override {
    pending += n;
    for (; pending >= 64; pending -= 64) s->send(reply, sizeof(reply));
  }
  void on_closed(int) override { closed = true; }
};

TEST(TcpStreamSpinRecv, MoreStreamsThanThePollLimitAllGetTheirBytes) {
  // 12 echo pairs (24 streams) on one busy reactor with at most 4 polled at a time: the rest
  // wait in io_uring, and every request gets its reply, byte for byte.
  ReactorOptions o;
  o.poll = PollMode::Busy;
  o.spin_recv_max = 4;
  Reactor r(1024, o);
  constexpr int kPairs = 12, kRounds = 100;
  std::vector<std::unique_ptr<TcpStream>> clients, servers;
  std::vector<Sink> sinks(kPairs);
  std::vector<Echo> echoes(kPairs);
  uint8_t request[64];
  std::memset(request, 0x11, sizeof(request));
  for (int i = 0; i < kPairs; ++i) {
    int a = -1, b = -1;
    ASSERT_TRUE(tcp_pair(a, b));
    clients.push_back(std::make_unique<TcpStream>(r, a, &sinks[i]));
    servers.push_back(std::make_unique<TcpStream>(r, b, &echoes[i]));
    echoes[i].s = servers.back().get();
    std::memset(echoes[i].reply, 0x40 + i, sizeof(echoes[i].reply));
    clients.back()->start();
    servers.back()->start();
  }
  uint32_t most_linked = 0;
  for (int round = 1; round <= kRounds; ++round) {
    // Half the pairs ask now, the other half a few turns later, so receives do wait.
    for (int i = 0; i < kPairs; i += 2) clients[i]->send(request, sizeof(request));
    for (int t = 0; t < 3; ++t) r.run_once(0);
    for (int i = 1; i < kPairs; i += 2) clients[i]->send(request, sizeof(request));
    ASSERT_TRUE(run_until(r, [&] {
      most_linked = std::max(most_linked, r.spin_recvs_linked());
      return std::all_of(sinks.begin(), sinks.end(), [&](const Sink& s) { return s.got.size() >= size_t(round) * 64; });
    })) << "round " << round;
  }
  EXPECT_LE(most_linked, 4u);
  EXPECT_GT(r.stats().spin_recvs, 0u) << "some receives should have been polled";
  for (int i = 0; i < kPairs; ++i) {
    ASSERT_EQ(sinks[i].got.size(), size_t(kRounds) * 64);
    EXPECT_TRUE(std::all_of(sinks[i].got.begin(), sinks[i].got.end(), [&](uint8_t c) { return c == uint8_t(0x40 + i); }))
        << "pair " << i;
  }
  for (auto& c : clients) c->close();
  ASSERT_TRUE(run_until(r, [&] {
    return std::all_of(sinks.begin(), sinks.end(), [](const Sink& s) { return s.closed; }) &&
           std::all_of(echoes.begin(), echoes.end(), [](const Echo& e) { return e.closed; });
  }));
}


// A send limit (the target's, while its reactor is contended: ReactorCommands::send_limit)
// hands the kernel at most its bytes per reactor turn, whatever is queued, through io_uring and
// through direct sends alike, and every byte arrives in order; a limit that has lapsed
// (until_ns passed) holds nothing back.
class TcpStreamSendLimit : public ::testing::TestWithParam<PollMode> {
 protected:
  // Sends 1 MiB under limit; the most sent_bytes() moved in one turn, and the turns it took.
  static void send_under(const SendLimit& limit, uint64_t& most, int& turns) {
    Reactor r(256, polling(GetParam()));
    StreamPair<Sink> p(r);
    ASSERT_TRUE(p.tx);
    p.tx->limit_send_per_turn(&limit);
    std::vector<uint8_t> data(1 << 20);
    for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 13 + 7);
    p.tx->send(data.data(), data.size());
    most = 0;
    turns = 0;
    while (p.tx->sent_bytes() < data.size() && turns < 1'000'000) {
      const uint64_t before = p.tx->sent_bytes();
      r.run_once(1000);
      most = std::max(most, p.tx->sent_bytes() - before);
      ++turns;
    }
    ASSERT_EQ(p.tx->sent_bytes(), data.size());
    ASSERT_TRUE(run_until(r, [&] { return p.sink.got.size() == data.size(); }));
    EXPECT_TRUE(p.sink.got == data) << "the bytes arrived out of order or changed";
  }
};

TEST_P(TcpStreamSendLimit, AStreamHandsTheKernelAtMostItsLimitPerTurn) {
  const SendLimit limit{64 * 1024, UINT64_MAX};
  uint64_t most = 0;
  int turns = 0;
  ASSERT_NO_FATAL_FAILURE(send_under(limit, most, turns));
  EXPECT_LE(most, limit.bytes);
  EXPECT_GE(turns, 16) << "1 MiB went in fewer turns than the limit allows";
}

TEST_P(TcpStreamSendLimit, ALapsedLimitHoldsNothingBack) {
  const SendLimit limit{64 * 1024, 0};
  uint64_t most = 0;
  int turns = 0;
  ASSERT_NO_FATAL_FAILURE(send_under(limit, most, turns));
  EXPECT_GT(most, limit.bytes) << "a lapsed limit still cut the sends";
}

INSTANTIATE_TEST_SUITE_P(PollModes, TcpStreamSendLimit, ::testing::Values(PollMode::Interrupt, PollMode::Busy),
                         [](const ::testing::TestParamInfo<PollMode>& p) {
                           return std::string(p.param == PollMode::Busy ? "Busy" : "Interrupt");
                         });

}  // namespace
}  // namespace nvtcp::reactor::tcp_stream_modes_test
