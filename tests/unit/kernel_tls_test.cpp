// SPDX-License-Identifier: Apache-2.0
// kTLS TX: the crypto_info the kernel takes, byte for byte; TlsStreams over real loopback sockets
// whose sending direction the kernel seals where it has the tls module (and which fall back to
// nvtcp's own record layer, with the bytes intact, where it does not); an OpenSSL peer reading
// records the kernel sealed, and its KeyUpdate request ending a kernel-sealed session with the
// reason said.
//
// This machine's kernel has no tls module, so here the sockets run the fallback; interop.kernel_ktls
// runs this file in the Debian 13 guest with NVTCP_REQUIRE_KTLS=1, where every case must have the
// kernel seal.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../support/ordered_send_done.hpp"
#include "reactor/reactor.hpp"
#include "reactor/tcp_stream.hpp"
#include "tls/kernel_tls.hpp"
#include "tls/tls_stream.hpp"
#include "util/log.hpp"

#ifndef TCP_ULP
#define TCP_ULP 31
#endif

namespace nvtcp::kernel_tls_test {
namespace {

using tls::Psk;
using tls::TlsStream;

std::vector<uint8_t> seq_bytes(size_t n, uint8_t first) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(first + i);
  return v;
}

// The bytes kernel_crypto_info lays out for cipher, key, iv and seq; empty when it refuses.
std::vector<uint8_t> crypto_info_bytes(uint16_t cipher, const std::vector<uint8_t>& key,
                                       const std::vector<uint8_t>& iv, uint64_t seq) {
  tls::KernelCryptoInfo k;
  if (!tls::kernel_crypto_info(cipher, key, iv, seq, k)) return {};
  const auto* b = reinterpret_cast<const uint8_t*>(&k.u);
  return {b, b + k.len};
}

std::vector<uint8_t> concat(std::initializer_list<std::vector<uint8_t>> parts) {
  std::vector<uint8_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(KernelCryptoInfo, LaidOutAsLinuxTakesIt) {
  const auto iv = seq_bytes(12, 0xa0);  // a0..ab
  const std::vector<uint8_t> iv_tail(iv.begin() + 4, iv.end()), salt(iv.begin(), iv.begin() + 4);
  // version 0x0304 and cipher 51, little-endian u16s; then iv (the last 8 bytes of the IV),
  // key, salt (its first 4), the record number big-endian. Written out in full once.
  EXPECT_EQ(crypto_info_bytes(0x1301, seq_bytes(16, 0x10), iv, 0x0102030405060708ull),
            (std::vector<uint8_t>{0x04, 0x03, 51,   0x00, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0x10, 0x11,
                                  0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
                                  0xa0, 0xa1, 0xa2, 0xa3, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08}));
  // AES-256-GCM (cipher 52): the same layout with a 32-byte key, 56 bytes in all.
  const auto key256 = seq_bytes(32, 0x20);
  EXPECT_EQ(crypto_info_bytes(0x1302, key256, iv, 0),
            concat({{0x04, 0x03, 52, 0x00}, iv_tail, key256, salt, std::vector<uint8_t>(8, 0)}));
  // ChaCha20-Poly1305 (cipher 54): the whole IV, no salt.
  const auto chacha_key = seq_bytes(32, 0x40);
  EXPECT_EQ(crypto_info_bytes(0x1303, chacha_key, iv, 5),
            concat({{0x04, 0x03, 54, 0x00}, iv, chacha_key, {0, 0, 0, 0, 0, 0, 0, 5}}));
  tls::KernelCryptoInfo k;
  EXPECT_FALSE(tls::kernel_crypto_info(0x1304, seq_bytes(16, 0), iv, 0, k)) << "AES-CCM is not an NVMe/TCP suite";
  EXPECT_FALSE(tls::kernel_crypto_info(0x1301, seq_bytes(32, 0), iv, 0, k)) << "a key of the wrong size";
  EXPECT_FALSE(tls::kernel_crypto_info(0x1302, seq_bytes(32, 0), seq_bytes(8, 0), 0, k)) << "an IV of 8 bytes";
  EXPECT_EQ(k.len, 0u);
}

// A connected loopback pair (fds).
bool tcp_pair(int& a, int& b) {
  reactor::Endpoint ep;
  std::string err;
  if (!reactor::resolve("127.0.0.1", 0, ep, err)) return false;
  const int lfd = reactor::listen_on(ep, 4);
  if (lfd < 0) return false;
  sockaddr_storage ss{};
  socklen_t sl = sizeof(ss);
  getsockname(lfd, reinterpret_cast<sockaddr*>(&ss), &sl);
  a = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool ok = ::connect(a, reinterpret_cast<sockaddr*>(&ss), sl) == 0;
  b = ok ? ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC) : -1;
  ::close(lfd);
  return ok && b >= 0;
}

// Whether this kernel lets a socket take the tls ULP.
bool kernel_has_tls() {
  int a = -1, b = -1;
  bool yes = false;
  if (tcp_pair(a, b)) yes = setsockopt(a, IPPROTO_TCP, TCP_ULP, "tls", 3) == 0;
  if (a >= 0) ::close(a);
  if (b >= 0) ::close(b);
  const char* req = std::getenv("NVTCP_REQUIRE_KTLS");
  if (req && *req == '1' && !yes) ADD_FAILURE() << "NVTCP_REQUIRE_KTLS=1 but this kernel refuses the tls ULP";
  return yes;
}

Psk test_psk(uint8_t hash) {
  Psk p;
  p.identity = hash == 2 ? "NVMe0R02 nqn.h nqn.s" : "NVMe0R01 nqn.2014-08.org.nvmexpress:uuid:h nqn.2026-12.io.nvtcp:s";
  p.hash = hash;
  p.key.resize(hash == 2 ? 48 : 32);
  for (size_t i = 0; i < p.key.size(); ++i) p.key.data()[i] = uint8_t(0x31 + 3 * i);
  return p;
}

struct OneKey final : tls::PskResolver {
  Psk psk;
  bool resolve(std::string_view identity, std::vector<Psk>& out, std::string& why) const override {
    if (identity != psk.identity) {
      why = "no key for this identity";
      return false;
    }
    out = {psk};
    return true;
  }
};

struct Sink final : reactor::StreamOwner {
  std::vector<uint8_t> got;
  bool closed = false;
  int err = 0;
  void on_receive(const uint8_t* d, size_t n) override { got.insert(got.end(), d, d + n); }
  void on_closed(int e) override {
    closed = true;
    err = e;
  }
};

using Done = test::OrderedSendDone;

template <class Pred>
bool run_until(reactor::Reactor& r, Pred p) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!p() && std::chrono::steady_clock::now() < until) r.run_once(1000);
  return p();
}

reactor::ReactorOptions zero_copy_options() {
  reactor::ReactorOptions o;
  o.send_zc_threshold = 32 * 1024;  // kTLS must turn these off: a ULP socket refuses SEND_ZC
  return o;
}

// param: (client's kTLS wanted, server's kTLS wanted, the PSK's hash)
struct KernelTlsOverSockets : ::testing::TestWithParam<std::tuple<bool, bool, int>> {
  KernelTlsOverSockets() { log::set_level(log::Level::Off); }
};

TEST_P(KernelTlsOverSockets, BytesBothWaysInOrderWhoeverSeals) {
  const auto [client_ktls, server_ktls, hash] = GetParam();
  const bool available = kernel_has_tls();
  reactor::Reactor r(256, zero_copy_options());
  int a = -1, b = -1;
  ASSERT_TRUE(tcp_pair(a, b));
  OneKey keys;
  keys.psk = test_psk(uint8_t(hash));
  Sink client_owner, server_owner;
  auto client = TlsStream::client(r, client_owner, keys.psk, "client");
  client->attach([&](reactor::StreamOwner& o) { return std::make_unique<reactor::TcpStream>(r, a, &o); });
  client->set_kernel_tx(client_ktls);
  auto server = TlsStream::server(r, server_owner, keys, "server");
  server->attach([&](reactor::StreamOwner& o) { return std::make_unique<reactor::TcpStream>(r, b, &o); });
  server->set_kernel_tx(server_ktls);
  server->start();
  client->start();

  // Queued before the handshake ends, as the ICReq is: it must leave after the handshake's last
  // flight, sealed by whoever seals.
  const auto hello = seq_bytes(128, 1);
  std::vector<int> client_dones, server_dones;
  std::vector<Done> cd(64), sd(64);
  for (int i = 0; i < 64; ++i) {
    cd[size_t(i)].order = &client_dones;
    cd[size_t(i)].id = i;
    sd[size_t(i)].order = &server_dones;
    sd[size_t(i)].id = i;
  }
  client->send(hello.data(), hello.size(), &cd[0]);
  ASSERT_TRUE(run_until(r, [&] { return server_owner.got.size() == hello.size() || server_owner.closed; }))
      << client->failure() << server->failure();
  ASSERT_TRUE(client->established() && server->established()) << client->failure() << server->failure();
  EXPECT_EQ(server_owner.got, hello);
  EXPECT_EQ(client->session().kernel_tx, client_ktls && available);
  EXPECT_EQ(server->session().kernel_tx, server_ktls && available);

  // Headers and payloads as NVMe/TCP sends them (zero-copy sized ones too), both ways at once.
  std::vector<uint8_t> want_at_server = hello, want_at_client;
  std::vector<std::vector<uint8_t>> keep;
  for (int i = 1; i < 64; ++i) {
    keep.push_back(seq_bytes(i % 3 == 0 ? 128 * 1024 + size_t(i) : size_t(8 + i), uint8_t(i)));
    client->send(keep.back().data(), keep.back().size(), &cd[size_t(i)]);
    want_at_server.insert(want_at_server.end(), keep.back().begin(), keep.back().end());
    keep.push_back(seq_bytes(i % 5 == 0 ? 300 * 1024 : size_t(24), uint8_t(2 * i)));
    server->send(keep.back().data(), keep.back().size(), &sd[size_t(i)]);
    want_at_client.insert(want_at_client.end(), keep.back().begin(), keep.back().end());
    if (i % 7 == 0) r.run_once(0);
  }
  ASSERT_TRUE(run_until(r, [&] {
    return (server_owner.got.size() >= want_at_server.size() && client_owner.got.size() >= want_at_client.size() &&
            client_dones.size() == 64 && server_dones.size() == 63) ||
           client_owner.closed || server_owner.closed;
  })) << "server got " << server_owner.got.size() << " of " << want_at_server.size() << ", client "
      << client_owner.got.size() << " of " << want_at_client.size();
  EXPECT_FALSE(client_owner.closed) << client->failure();
  EXPECT_FALSE(server_owner.closed) << server->failure();
  EXPECT_TRUE(server_owner.got == want_at_server) << "bytes at the server differ";
  EXPECT_TRUE(client_owner.got == want_at_client) << "bytes at the client differ";
  for (size_t i = 0; i < client_dones.size(); ++i) EXPECT_EQ(client_dones[i], int(i)) << "SendDones out of order";
  for (size_t i = 0; i < server_dones.size(); ++i) EXPECT_EQ(server_dones[i], int(i + 1)) << "SendDones out of order";
  // The kernel sealing means no record of ours was sealed here after the handshake.
  if (client->session().kernel_tx) {
    EXPECT_EQ(client->counters().records_out, 0u);
  } else {
    EXPECT_GT(client->counters().records_out, 0u);
  }

  client->close();
  server->close();
  ASSERT_TRUE(run_until(r, [&] { return client_owner.closed && server_owner.closed; }));
  client.reset();
  server.reset();
}

INSTANTIATE_TEST_SUITE_P(Sides, KernelTlsOverSockets,
                         ::testing::Values(std::make_tuple(true, true, 1), std::make_tuple(true, false, 1),
                                           std::make_tuple(false, true, 1), std::make_tuple(false, false, 1),
                                           std::make_tuple(true, true, 2)),
                         [](const auto& p) {
                           return std::string(std::get<0>(p.param) ? "ClientKtls" : "ClientUser") +
                                  (std::get<1>(p.param) ? "ServerKtls" : "ServerUser") +
                                  (std::get<2>(p.param) == 2 ? "Sha384" : "Sha256");
                         });

// An OpenSSL client on a blocking socket in a thread of its own.
struct OpenSslClient {
  static inline const Psk* psk = nullptr;
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = nullptr;
  explicit OpenSslClient(int fd) {
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_psk_use_session_callback(
        ctx, [](SSL* s, const EVP_MD*, const unsigned char** id, size_t* len, SSL_SESSION** sess) {
          const unsigned char cs[2] = {0x13, uint8_t(psk->hash == 2 ? 0x02 : 0x01)};
          *sess = SSL_SESSION_new();
          SSL_SESSION_set1_master_key(*sess, psk->key.data(), psk->key.size());
          SSL_SESSION_set_cipher(*sess, SSL_CIPHER_find(s, cs));
          SSL_SESSION_set_protocol_version(*sess, TLS1_3_VERSION);
          *id = reinterpret_cast<const unsigned char*>(psk->identity.data());
          *len = psk->identity.size();
          return 1;
        });
    ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
  }
  ~OpenSslClient() {
    SSL_free(ssl);
    SSL_CTX_free(ctx);
  }
  bool read_exact(std::vector<uint8_t>& out, size_t n) {
    out.resize(n);
    size_t have = 0;
    while (have < n) {
      const int k = SSL_read(ssl, out.data() + have, int(n - have));
      if (k <= 0) return false;
      have += size_t(k);
    }
    return true;
  }
};

TEST(KernelTlsWithOpenSsl, OpenSslReadsWhatTheKernelSealedAndAKeyUpdateRequestIsAnswered) {
  log::set_level(log::Level::Off);
  // OpenSSL writes with write(): a write after our side has closed must fail, not kill the test.
  signal(SIGPIPE, SIG_IGN);
  const bool available = kernel_has_tls();
  reactor::Reactor r(256, zero_copy_options());
  int a = -1, b = -1;
  ASSERT_TRUE(tcp_pair(a, b));
  OneKey keys;
  keys.psk = test_psk(1);
  OpenSslClient::psk = &keys.psk;
  Sink owner;
  auto server = TlsStream::server(r, owner, keys, "server");
  server->attach([&](reactor::StreamOwner& o) { return std::make_unique<reactor::TcpStream>(r, b, &o); });
  server->start();

  const auto ping = seq_bytes(100, 7), reply = seq_bytes(200000, 9), after = seq_bytes(5000, 3);
  std::vector<uint8_t> got_reply, got_after;
  bool handshake_ok = false, reply_ok = false, after_ok = false;
  std::thread peer([&] {
    OpenSslClient c(a);
    handshake_ok = SSL_connect(c.ssl) == 1 && SSL_write(c.ssl, ping.data(), int(ping.size())) == int(ping.size());
    if (!handshake_ok) return;
    reply_ok = c.read_exact(got_reply, reply.size());
    // Ask for the server's key to change, then send under the new one.
    if (SSL_key_update(c.ssl, SSL_KEY_UPDATE_REQUESTED) != 1 ||
        SSL_write(c.ssl, ping.data(), int(ping.size())) != int(ping.size()))
      return;
    after_ok = c.read_exact(got_after, after.size());
  });
  ASSERT_TRUE(run_until(r, [&] { return owner.got.size() >= ping.size() || owner.closed; })) << server->failure();
  EXPECT_EQ(server->session().kernel_tx, available);
  server->send(reply.data(), reply.size());
  // The second ping comes after the KeyUpdate request: a kernel-sealed session cannot answer
  // it and ends, saying why; one sealed here answers and goes on under the new key.
  ASSERT_TRUE(run_until(r, [&] { return owner.got.size() >= 2 * ping.size() || owner.closed; }));
  if (server->session().kernel_tx) {
    EXPECT_TRUE(owner.closed);
    EXPECT_NE(server->failure().find("KeyUpdate"), std::string::npos) << server->failure();
    ::shutdown(a, SHUT_RDWR);  // so the peer's read ends
  } else {
    EXPECT_FALSE(owner.closed) << server->failure();
    server->send(after.data(), after.size());
    run_until(r, [&] { return server->queued_bytes() == 0; });
  }
  // Drive the reactor while the peer finishes.
  std::atomic<bool> joined{false};
  std::thread waiter([&] {
    peer.join();
    joined = true;
  });
  run_until(r, [&] { return joined.load(); });
  waiter.join();
  EXPECT_TRUE(handshake_ok);
  EXPECT_TRUE(reply_ok && got_reply == reply) << "OpenSSL could not read the records sealed for it";
  if (!server->session().kernel_tx) {
    EXPECT_TRUE(after_ok && got_after == after);
  }
  server->close();
  run_until(r, [&] { return owner.closed; });
  server.reset();
  ::close(a);
}

}  // namespace
}  // namespace nvtcp::kernel_tls_test
