// TcpStream's optional data-path modes over a real loopback connection, one reactor
// driving both ends: zero-copy sends release their memory only after the kernel's
// notification, in queue order, and a close waits for the notifications; multishot
// receive into provided buffers delivers every byte in order, survives a dry ring, and
// still receives large payloads in place.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "reactor/reactor.hpp"
#include "reactor/tcp_stream.hpp"

namespace nvtcp::reactor {
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

template <class Pred>
bool run_until(Reactor& r, Pred p) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!p() && std::chrono::steady_clock::now() < until) r.run_once(1000);
  return p();
}

TEST(TcpStreamZeroCopy, SendDoneWaitsForTheNotificationAndKeepsOrder) {
  ReactorOptions o;
  o.send_zc_threshold = 32 * 1024;
  Reactor r(256, o);
  int a = -1, b = -1;
  ASSERT_TRUE(tcp_pair(a, b));
  Source src;
  Sink sink;
  auto tx = std::make_unique<TcpStream>(r, a, &src);
  auto rx = std::make_unique<TcpStream>(r, b, &sink);
  tx->start();
  rx->start();

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
  std::vector<Done> dones(kSegments);
  for (int i = 0; i < kSegments; ++i) {
    dones[i].r = &r;
    dones[i].order = &order;
    dones[i].index = i;
    tx->send(bufs[size_t(i)].data(), bufs[size_t(i)].size(), &dones[size_t(i)]);
    if (i % 8 == 7) r.run_once(0);  // several batches, so several zero-copy sends
  }
  ASSERT_TRUE(run_until(r, [&] { return sink.got.size() == expect.size() && order.size() == size_t(kSegments); }))
      << "received " << sink.got.size() << " of " << expect.size() << " bytes, " << order.size() << " SendDones";
  EXPECT_TRUE(sink.got == expect) << "bytes differ";
  const ReactorStats& st = r.stats();
  EXPECT_GT(st.zc_sends, 0u);
  EXPECT_EQ(st.zc_notifs, st.zc_sends);
  for (int i = 0; i < kSegments; ++i) {
    EXPECT_EQ(order[size_t(i)], i) << "SendDones out of queue order";
    // Every segment went out in a batch with a payload, so in a zero-copy send: its
    // SendDone may only fire once a notification has come in.
    EXPECT_GE(dones[size_t(i)].notifs_at_fire, 1u) << "segment " << i << " released before any notification";
  }
  EXPECT_EQ(tx->held_send_dones(), 0u);

  tx->close();
  ASSERT_TRUE(run_until(r, [&] { return src.closed && sink.closed; }));
}

TEST(TcpStreamZeroCopy, CloseWaitsForNotificationsThenReleasesEverything) {
  ReactorOptions o;
  o.send_zc_threshold = 4096;
  Reactor r(256, o);
  int a = -1, b = -1;
  ASSERT_TRUE(tcp_pair(a, b));
  Source src;
  Sink sink;
  auto tx = std::make_unique<TcpStream>(r, a, &src);
  auto rx = std::make_unique<TcpStream>(r, b, &sink);
  tx->start();
  rx->start();
  std::vector<uint8_t> payload(256 * 1024, 0x3C);
  std::vector<int> order;
  std::vector<Done> dones(4);
  for (int i = 0; i < 4; ++i) {
    dones[size_t(i)].r = &r;
    dones[size_t(i)].order = &order;
    dones[size_t(i)].index = i;
    tx->send(payload.data(), payload.size(), &dones[size_t(i)]);
  }
  r.run_once(0);  // the first batch leaves (zero-copy); the rest is queued
  tx->close();    // queued segments are dropped, but released only after the notifications
  ASSERT_TRUE(run_until(r, [&] { return src.closed; })) << "the close never finished";
  EXPECT_EQ(order.size(), 4u) << "every SendDone fires by the time the stream reports closed";
  EXPECT_EQ(r.stats().zc_notifs, r.stats().zc_sends);
  for (int i = 0; i < int(order.size()); ++i) EXPECT_EQ(order[size_t(i)], i);
  rx->close();
  ASSERT_TRUE(run_until(r, [&] { return sink.closed; }));
}

TEST(TcpStreamZeroCopy, BelowTheThresholdNothingIsZeroCopy) {
  ReactorOptions o;
  o.send_zc_threshold = 1u << 20;
  Reactor r(256, o);
  int a = -1, b = -1;
  ASSERT_TRUE(tcp_pair(a, b));
  Source src;
  Sink sink;
  auto tx = std::make_unique<TcpStream>(r, a, &src);
  auto rx = std::make_unique<TcpStream>(r, b, &sink);
  tx->start();
  rx->start();
  std::vector<uint8_t> payload(64 * 1024, 0x11);
  std::vector<int> order;
  Done d;
  d.r = &r;
  d.order = &order;
  tx->send(payload.data(), payload.size(), &d);
  ASSERT_TRUE(run_until(r, [&] { return sink.got.size() == payload.size() && order.size() == 1; }));
  EXPECT_EQ(r.stats().zc_sends, 0u);
  tx->close();
  rx->close();
  ASSERT_TRUE(run_until(r, [&] { return src.closed && sink.closed; }));
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
  int a = -1, b = -1;
  if (!tcp_pair(a, b)) return out;
  Source src;
  Framed sink;
  auto tx = std::make_unique<TcpStream>(r, a, &src);
  auto rx = std::make_unique<TcpStream>(r, b, &sink);
  tx->start();
  rx->start();
  out.lens.reserve(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.sent.emplace_back(sizes[i]);
    for (size_t k = 0; k < sizes[i]; ++k) out.sent.back()[k] = uint8_t(i * 13 + k * 7);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.lens.push_back(sizes[i]);
    tx->send(&out.lens.back(), 8);
    tx->send(out.sent[i].data(), sizes[i]);
    if (i % 5 == 4) r.run_once(0);
  }
  out.all_received = run_until(r, [&] { return sink.payloads.size() == sizes.size(); });
  out.got = sink.payloads;
  out.stats = r.stats();
  tx->close();
  run_until(r, [&] { return src.closed && sink.closed; });
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

}  // namespace
}  // namespace nvtcp::reactor
