// SPDX-License-Identifier: Apache-2.0
// TlsStream: a client and a server, each over an in-memory stream, with the test carrying the
// records between them; the ClientHello parser and the PSK binder against OpenSSL's own; and
// each way a handshake or a session must fail.
#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../support/ordered_send_done.hpp"
#include "auth/tls_psk.hpp"
#include "memory_stream.hpp"
#include "reactor/reactor.hpp"
#include "tls/client_hello.hpp"
#include "tls/tls_stream.hpp"
#include "util/log.hpp"

namespace nvtcp::tls_stream_test {
namespace {

using tls::Psk;
using tls::TlsStream;

Psk make_psk(std::string identity, uint8_t hash, uint8_t fill) {
  Psk p;
  p.identity = std::move(identity);
  p.hash = hash;
  p.key.resize(hash == 2 ? 48 : 32);
  for (size_t i = 0; i < p.key.size(); ++i) p.key.data()[i] = uint8_t(fill + i);
  return p;
}

struct Keys final : tls::PskResolver {
  std::map<std::string, std::vector<Psk>> by_identity;
  mutable int calls = 0;
  bool resolve(std::string_view identity, std::vector<Psk>& out, std::string& why) const override {
    ++calls;
    auto it = by_identity.find(std::string(identity));
    if (it == by_identity.end()) {
      why = "no key for this identity";
      return false;
    }
    out = it->second;
    return true;
  }
};

struct Owner final : reactor::StreamOwner {
  std::vector<uint8_t> got;
  bool closed = false;
  int err = 0;
  // Direct receives: the owner names this buffer for the next direct_left bytes.
  std::vector<uint8_t> direct;
  size_t direct_at = 0, direct_left = 0;
  void on_receive(const uint8_t* d, size_t n) override { got.insert(got.end(), d, d + n); }
  void on_closed(int e) override {
    closed = true;
    err = e;
  }
  bool recv_direct(uint8_t*& p, size_t& n) override {
    if (!direct_left) return false;
    p = direct.data() + direct_at;
    n = direct_left;
    return true;
  }
  void on_receive_direct(size_t n) override {
    direct_at += n;
    direct_left -= n;
  }
};

using Done = test::OrderedSendDone;

struct TlsPair : ::testing::Test {
  reactor::Reactor reactor{64};
  Keys keys;
  Owner client_owner, server_owner;
  std::unique_ptr<TlsStream> client, server;
  test::MemoryStream* client_lower = nullptr;
  test::MemoryStream* server_lower = nullptr;
  bool client_lower_gone = false, server_lower_gone = false;

  TlsPair() { log::set_level(log::Level::Off); }

  void make(const Psk& offered) {
    client = TlsStream::client(reactor, client_owner, offered, "client");
    client->attach([&](reactor::StreamOwner& o) {
      auto s = std::make_unique<test::MemoryStream>(reactor, o, &client_lower_gone);
      client_lower = s.get();
      return s;
    });
    server = TlsStream::server(reactor, server_owner, keys, "server");
    server->attach([&](reactor::StreamOwner& o) {
      auto s = std::make_unique<test::MemoryStream>(reactor, o, &server_lower_gone);
      server_lower = s.get();
      return s;
    });
    server->start();
    client->start();
  }
  // A client offering offered, which the server must refuse: it closes without a session,
  // saying why (its failure() holds why).
  void expect_refused(const Psk& offered, const std::string& why) {
    make(offered);
    pump();
    reactor.run_once(0);
    EXPECT_FALSE(server->established());
    EXPECT_TRUE(server_owner.closed);
    EXPECT_NE(server->failure().find(why), std::string::npos) << server->failure();
  }
  // Carries bytes both ways until neither side has anything to say.
  void pump(size_t chunk = 64 * 1024) {
    for (int round = 0; round < 1000; ++round) {
      reactor.run_deferred();
      // What from has sent reaches to, unless to is closing; false when there was nothing.
      auto carry = [&](test::MemoryStream* from, test::MemoryStream* to) {
        if (client_lower_gone || server_lower_gone || !from->queued_bytes()) return false;
        from->drain();
        std::vector<uint8_t> bytes;
        bytes.swap(from->received());
        if (!to->closing()) to->deliver(bytes, chunk);
        return true;
      };
      bool moved = carry(client_lower, server_lower);
      moved = carry(server_lower, client_lower) || moved;
      if (!moved) {
        reactor.run_deferred();
        if (!client_lower->queued_bytes() && !server_lower->queued_bytes()) return;
      }
    }
  }
  void established(const Psk& psk) {
    keys.by_identity[psk.identity] = {psk};
    make(psk);
    pump();
    ASSERT_TRUE(client->established()) << client->failure();
    ASSERT_TRUE(server->established()) << server->failure();
  }
};

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(seed + i * 7 + (i >> 9));
  return v;
}

const char* kIdentity = "NVMe0R01 nqn.2014-08.org.nvmexpress:uuid:host nqn.2024-01.io.nvtcp:sub";

TEST_F(TlsPair, HandshakeThenBytesBothWaysInOrder) {
  const Psk psk = make_psk(kIdentity, 1, 0x11);
  keys.by_identity[psk.identity] = {psk};
  make(psk);
  // Sent before the handshake is done: held until it is.
  const auto hello = pattern(128, 1);
  std::vector<int> order;
  Done d1, d2;
  d1.order = d2.order = &order;
  d1.id = 1;
  d2.id = 2;
  client->send(hello.data(), 100, &d1);
  client->send(hello.data() + 100, 28, &d2);
  pump();
  ASSERT_TRUE(client->established()) << client->failure();
  ASSERT_TRUE(server->established()) << server->failure();
  EXPECT_EQ(server_owner.got, hello);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_EQ(server->session().identity, kIdentity);
  EXPECT_EQ(server->session().cipher, "TLS_AES_128_GCM_SHA256");
  EXPECT_EQ(client->session().cipher, "TLS_AES_128_GCM_SHA256");

  // 1 MiB the other way, in segments of odd sizes, received in small pieces.
  const auto big = pattern(1 << 20, 9);
  size_t off = 0;
  for (size_t n : {24u, 4096u, 100000u, 17u, 16384u, 16385u}) {
    server->send(big.data() + off, n);
    off += n;
  }
  server->send(big.data() + off, big.size() - off);
  pump(1000);
  EXPECT_EQ(client_owner.got, big);
  EXPECT_FALSE(client_owner.closed);
  EXPECT_FALSE(server_owner.closed);
  // Chunks are recycled: a second megabyte takes no chunk the first did not leave behind.
  const uint64_t chunks = server->counters().chunks_allocated;
  server->send(big.data(), big.size());
  pump(100000);
  EXPECT_EQ(client_owner.got.size(), 2 * big.size());
  EXPECT_EQ(server->counters().chunks_allocated, chunks);
}

TEST_F(TlsPair, Sha384PskEndsOnAes256) {
  const Psk psk = make_psk("NVMe0R02 nqn.h nqn.s", 2, 0x40);
  established(psk);
  EXPECT_EQ(server->session().cipher, "TLS_AES_256_GCM_SHA384");
}

// tlshd (ktls-utils 1.0, GnuTLS) binds every PSK with SHA-256, a SHA-384 one too: the server
// takes that binder and the session ends on a SHA-256 suite, keyed with the 48-byte PSK.
TEST_F(TlsPair, Sha384PskBoundWithSha256AsTlshdDoes) {
  const Psk held = make_psk("NVMe0R02 nqn.h nqn.s", 2, 0x40);
  keys.by_identity[held.identity] = {held};
  Psk offered = held;
  offered.hash = 1;  // the same 48 bytes, run through a SHA-256 handshake
  make(offered);
  pump();
  ASSERT_TRUE(client->established()) << client->failure();
  ASSERT_TRUE(server->established()) << server->failure();
  EXPECT_EQ(server->session().cipher, "TLS_AES_128_GCM_SHA256");
  const auto data = pattern(20000, 3);
  client->send(data.data(), data.size());
  pump();
  EXPECT_EQ(server_owner.got, data);
}

TEST_F(TlsPair, OwnersDonesWaitForTheRecordsToLeave) {
  established(make_psk(kIdentity, 1, 3));
  server_lower->hold_dones(false);
  std::vector<int> order;
  Done d;
  d.order = &order;
  d.id = 7;
  const auto data = pattern(4096, 2);
  server->send(data.data(), data.size(), &d);
  reactor.run_deferred();  // encrypted and handed below, not yet read by the peer
  EXPECT_TRUE(order.empty());
  EXPECT_GT(server->queued_bytes(), data.size()) << "what the stream below holds counts";
  pump();
  EXPECT_EQ(order, std::vector<int>{7});
  EXPECT_EQ(client_owner.got, data);
}

TEST_F(TlsPair, LargePayloadsGoStraightToWhereTheOwnerWantsThem) {
  established(make_psk(kIdentity, 1, 5));
  const auto data = pattern(300000, 4);
  client_owner.direct.assign(data.size(), 0);
  client_owner.direct_left = data.size();
  server->send(data.data(), data.size());
  pump(7000);
  EXPECT_EQ(client_owner.direct, data);
  EXPECT_TRUE(client_owner.got.empty());
}

TEST_F(TlsPair, TheBinderChoosesAmongCandidateKeys) {
  const Psk right = make_psk(kIdentity, 1, 0x21);
  const Psk other = make_psk(kIdentity, 1, 0x77);
  keys.by_identity[kIdentity] = {other, right};
  make(right);
  pump();
  ASSERT_TRUE(server->established()) << server->failure();
  ASSERT_TRUE(client->established());
  const auto data = pattern(5000, 8);
  client->send(data.data(), data.size());
  pump();
  EXPECT_EQ(server_owner.got, data);
}

TEST_F(TlsPair, AWrongPskIsRefused) {
  keys.by_identity[kIdentity] = {make_psk(kIdentity, 1, 0x99)};
  expect_refused(make_psk(kIdentity, 1, 0x21), "binder matches no key");
  EXPECT_EQ(server_owner.err, -EACCES);
  EXPECT_TRUE(server_owner.got.empty());
}

TEST_F(TlsPair, AnUnknownIdentityIsRefused) {
  expect_refused(make_psk(kIdentity, 1, 0x21), "no key for this identity");
}

TEST_F(TlsPair, AKeyOfTheOtherHashIsRefused) {
  keys.by_identity[kIdentity] = {make_psk(kIdentity, 2, 0x21)};
  expect_refused(make_psk(kIdentity, 1, 0x21), "");  // whatever the reason
}

struct TlsServerAlone : ::testing::Test {
  reactor::Reactor reactor{64};
  Keys keys;
  Owner owner;
  std::unique_ptr<TlsStream> server;
  test::MemoryStream* lower = nullptr;
  TlsServerAlone() {
    log::set_level(log::Level::Off);
    server = TlsStream::server(reactor, owner, keys, "server");
    server->attach([&](reactor::StreamOwner& o) {
      auto s = std::make_unique<test::MemoryStream>(reactor, o);
      lower = s.get();
      return s;
    });
    server->start();
  }
  void settle() {
    for (int i = 0; i < 5; ++i) reactor.run_once(0);
  }
};

TEST_F(TlsServerAlone, AnICReqInTheClearIsRefusedAndSaidSo) {
  std::vector<uint8_t> icreq(128, 0);
  icreq[1] = 0x00;
  icreq[2] = 128;
  icreq[4] = 128;
  lower->deliver(icreq);
  settle();
  EXPECT_TRUE(owner.closed);
  EXPECT_NE(server->failure().find("ICReq in the clear"), std::string::npos) << server->failure();
  EXPECT_EQ(keys.calls, 0);
}

TEST_F(TlsServerAlone, GarbageInsteadOfAClientHelloIsRefused) {
  // A record header announcing 16 bytes of a ServerHello, then filler: not what a server accepts.
  std::vector<uint8_t> junk(5 + 16, 0xAB);
  const uint8_t header[] = {0x16, 0x03, 0x01, 0x00, 0x10, 0x02, 0, 0, 0x0c};
  std::copy(std::begin(header), std::end(header), junk.begin());
  lower->deliver(junk);
  settle();
  EXPECT_TRUE(owner.closed);
  EXPECT_FALSE(server->failure().empty());
}

// A ClientHello from OpenSSL, with or without an external PSK, taken from its memory BIO.
std::vector<uint8_t> openssl_client_hello(const Psk* psk) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  static const Psk* g_psk = nullptr;
  g_psk = psk;
  if (psk)
    SSL_CTX_set_psk_use_session_callback(
        ctx, [](SSL* ssl, const EVP_MD*, const unsigned char** id, size_t* len, SSL_SESSION** sess) {
          const unsigned char cs[2] = {0x13, 0x01};
          SSL_SESSION* s = SSL_SESSION_new();
          SSL_SESSION_set1_master_key(s, g_psk->key.data(), g_psk->key.size());
          SSL_SESSION_set_cipher(s, SSL_CIPHER_find(ssl, cs));
          SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION);
          *sess = s;
          *id = reinterpret_cast<const unsigned char*>(g_psk->identity.data());
          *len = g_psk->identity.size();
          return 1;
        });
  SSL* ssl = SSL_new(ctx);
  BIO* rb = BIO_new(BIO_s_mem());
  BIO* wb = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, rb, wb);
  SSL_set_connect_state(ssl);
  SSL_do_handshake(ssl);
  std::vector<uint8_t> out(size_t(BIO_pending(wb)));
  BIO_read(wb, out.data(), int(out.size()));
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return out;
}

// The ClientHello `hello` (one record: header, then the message) with its pre_shared_key
// extension (the last one) rewritten to offer `copies` copies of `identity` (each made distinct
// by a number after it, when `distinct`), each with a junk binder of 32 bytes.
std::vector<uint8_t> with_identities(const std::vector<uint8_t>& hello, const std::string& identity, size_t copies,
                                     bool distinct = false) {
  auto u16 = [](const uint8_t* p) { return size_t(p[0]) << 8 | p[1]; };
  auto put16 = [](std::vector<uint8_t>& v, size_t at, size_t x) {
    v[at] = uint8_t(x >> 8);
    v[at + 1] = uint8_t(x);
  };
  // record header 5, handshake header 4, version 2, random 32, then the variable fields
  size_t at = 5 + 4 + 2 + 32;
  at += 1 + hello[at];        // legacy_session_id
  at += 2 + u16(&hello[at]);  // cipher_suites
  at += 1 + hello[at];        // legacy_compression_methods
  const size_t exts_len_at = at;
  at += 2;
  size_t psk_at = 0;
  while (at < hello.size()) {
    if (u16(&hello[at]) == 41) psk_at = at;
    at += 4 + u16(&hello[at + 2]);
  }
  EXPECT_NE(psk_at, 0u);
  std::vector<uint8_t> ids, binders;
  for (size_t i = 0; i < copies; ++i) {
    const std::string id = distinct ? identity + " " + std::to_string(i) : identity;
    ids.push_back(uint8_t(id.size() >> 8));
    ids.push_back(uint8_t(id.size()));
    ids.insert(ids.end(), id.begin(), id.end());
    ids.insert(ids.end(), 4, 0);
    binders.push_back(32);
    binders.insert(binders.end(), 32, uint8_t(0x5A + i));
  }
  std::vector<uint8_t> out(hello.begin(), hello.begin() + long(psk_at));
  const size_t ext_len = 2 + ids.size() + 2 + binders.size();
  out.insert(out.end(),
             {0, 41, uint8_t(ext_len >> 8), uint8_t(ext_len), uint8_t(ids.size() >> 8), uint8_t(ids.size())});
  out.insert(out.end(), ids.begin(), ids.end());
  out.push_back(uint8_t(binders.size() >> 8));
  out.push_back(uint8_t(binders.size()));
  out.insert(out.end(), binders.begin(), binders.end());
  put16(out, exts_len_at, out.size() - exts_len_at - 2);
  const size_t hs = out.size() - 9;
  out[6] = uint8_t(hs >> 16);
  out[7] = uint8_t(hs >> 8);
  out[8] = uint8_t(hs);
  // One record carries at most 16 KiB: split the handshake message over as many as it takes.
  std::vector<uint8_t> records;
  const std::vector<uint8_t> msg(out.begin() + 5, out.end());
  for (size_t off = 0; off < msg.size(); off += 16384) {
    const size_t n = std::min<size_t>(16384, msg.size() - off);
    records.insert(records.end(), {0x16, 0x03, 0x01, uint8_t(n >> 8), uint8_t(n)});
    records.insert(records.end(), msg.begin() + long(off), msg.begin() + long(off + n));
  }
  return records;
}

// Hundreds of copies of a known identity (identities are sniffable) with junk binders: the
// server checks a bounded number of binders before refusing, not one per copy.
TEST_F(TlsServerAlone, AHelloOfManyCopiesOfAKnownIdentityCostsAFewBinders) {
  const Psk psk = make_psk(kIdentity, 1, 0x41);
  keys.by_identity[psk.identity] = {psk, make_psk(kIdentity, 1, 0x42)};  // two derivations
  lower->deliver(with_identities(openssl_client_hello(&psk), psk.identity, 450));
  settle();
  EXPECT_TRUE(owner.closed);
  EXPECT_NE(server->failure().find("binder matches no key"), std::string::npos) << server->failure();
  EXPECT_LE(server->counters().binders_checked, 2u) << "a binder per copy of the identity";
  EXPECT_GE(server->counters().binders_checked, 1u);
  EXPECT_LT(server->failure().size(), 2048u) << "a reason per copy in one log line";
}

// Looking an identity up may read a key file (the target reads a PSK named in its keyring at
// each handshake): a hello of hundreds of identities, the same one or each different, none with
// a usable key, costs a few lookups, not one per identity.
TEST_F(TlsServerAlone, AHelloOfManyUnknownIdentitiesCostsAFewLookups) {
  const Psk psk = make_psk(kIdentity, 1, 0x41);
  lower->deliver(with_identities(openssl_client_hello(&psk), psk.identity, 450));
  settle();
  EXPECT_TRUE(owner.closed);
  EXPECT_EQ(keys.calls, 1) << "the same identity looked up again";
  EXPECT_NE(server->failure().find("no key for this identity"), std::string::npos) << server->failure();
}

TEST_F(TlsServerAlone, AHelloOfManyDistinctUnknownIdentitiesCostsAFewLookups) {
  const Psk psk = make_psk(kIdentity, 1, 0x41);
  lower->deliver(with_identities(openssl_client_hello(&psk), psk.identity, 450, true));
  settle();
  EXPECT_TRUE(owner.closed);
  EXPECT_LE(keys.calls, 8) << "an identity looked up per identity offered";
  EXPECT_GE(keys.calls, 1);
  EXPECT_NE(server->failure().find("distinct identities are looked up"), std::string::npos) << server->failure();
  EXPECT_LT(server->failure().size(), 2048u) << "a reason per identity in one log line";
}

TEST_F(TlsServerAlone, AClientHelloWithoutAPskIsRefused) {
  lower->deliver(openssl_client_hello(nullptr));
  settle();
  EXPECT_TRUE(owner.closed);
  EXPECT_NE(server->failure().find("offers no pre-shared key"), std::string::npos) << server->failure();
}

// OpenSSL itself at the other end, its own record layer and all: what the records we seal and
// open must agree with, byte for byte (both ends of a TlsPair share our record code, so a mistake
// made twice would pass there).
struct OpenSslPeer {
  SSL_CTX* ctx = nullptr;
  SSL* ssl = nullptr;
  BIO* in = nullptr;   // what we write for it to read
  BIO* out = nullptr;  // what it wrote
  static inline const Psk* psk = nullptr;
  explicit OpenSslPeer(bool server) {
    ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_num_tickets(ctx, 0);
    if (server)
      SSL_CTX_set_psk_find_session_callback(ctx, [](SSL* s, const unsigned char* id, size_t len, SSL_SESSION** sess) {
        *sess = std::string_view(reinterpret_cast<const char*>(id), len) == psk->identity ? make_session(s) : nullptr;
        return 1;
      });
    else
      SSL_CTX_set_psk_use_session_callback(
          ctx, [](SSL* s, const EVP_MD*, const unsigned char** id, size_t* len, SSL_SESSION** sess) {
            *sess = make_session(s);
            *id = reinterpret_cast<const unsigned char*>(psk->identity.data());
            *len = psk->identity.size();
            return 1;
          });
    ssl = SSL_new(ctx);
    in = BIO_new(BIO_s_mem());
    out = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl, in, out);
    if (server) SSL_set_accept_state(ssl); else SSL_set_connect_state(ssl);
  }
  ~OpenSslPeer() {
    SSL_free(ssl);
    SSL_CTX_free(ctx);
  }
  static SSL_SESSION* make_session(SSL* s) {
    const unsigned char cs[2] = {0x13, uint8_t(psk->hash == 2 ? 0x02 : 0x01)};
    SSL_SESSION* sess = SSL_SESSION_new();
    SSL_SESSION_set1_master_key(sess, psk->key.data(), psk->key.size());
    SSL_SESSION_set_cipher(sess, SSL_CIPHER_find(s, cs));
    SSL_SESSION_set_protocol_version(sess, TLS1_3_VERSION);
    return sess;
  }
  std::vector<uint8_t> take_output() {
    std::vector<uint8_t> v(size_t(BIO_pending(out)));
    if (!v.empty()) BIO_read(out, v.data(), int(v.size()));
    return v;
  }
  std::vector<uint8_t> read_all() {
    std::vector<uint8_t> got;
    uint8_t buf[16384];
    int n;
    while ((n = SSL_read(ssl, buf, sizeof(buf))) > 0) got.insert(got.end(), buf, buf + n);
    return got;
  }
};

struct TlsWithOpenSsl : ::testing::TestWithParam<bool> {  // param: our side is the server
  reactor::Reactor reactor{64};
  Keys keys;
  Owner owner;
  std::unique_ptr<TlsStream> ours;
  test::MemoryStream* lower = nullptr;
  Psk psk = make_psk(kIdentity, 1, 0x61);
  std::unique_ptr<OpenSslPeer> peer;
  TlsWithOpenSsl() { log::set_level(log::Level::Off); }
  void start(uint8_t hash) {
    psk = make_psk(hash == 2 ? "NVMe0R02 nqn.h nqn.s" : kIdentity, hash, 0x61);
    OpenSslPeer::psk = &psk;
    keys.by_identity[psk.identity] = {psk};
    const bool server = GetParam();
    ours = server ? TlsStream::server(reactor, owner, keys, "ours") : TlsStream::client(reactor, owner, psk, "ours");
    ours->attach([&](reactor::StreamOwner& o) {
      auto s = std::make_unique<test::MemoryStream>(reactor, o);
      lower = s.get();
      return s;
    });
    peer = std::make_unique<OpenSslPeer>(!server);
    ours->start();
  }
  void pump() {
    for (int i = 0; i < 50; ++i) {
      reactor.run_deferred();
      SSL_do_handshake(peer->ssl);
      auto from_peer = peer->take_output();
      if (!from_peer.empty()) lower->deliver(from_peer);
      reactor.run_deferred();
      lower->drain();
      std::vector<uint8_t> to_peer;
      to_peer.swap(lower->received());
      if (!to_peer.empty()) BIO_write(peer->in, to_peer.data(), int(to_peer.size()));
      if (from_peer.empty() && to_peer.empty() && i > 2) return;
    }
  }
};

TEST_P(TlsWithOpenSsl, RecordsBothWaysAndAKeyUpdate) {
  for (uint8_t hash : {uint8_t(1), uint8_t(2)}) {
    SCOPED_TRACE(int(hash));
    owner = Owner{};
    start(hash);
    pump();
    ASSERT_TRUE(ours->established()) << ours->failure();
    ASSERT_EQ(SSL_is_init_finished(peer->ssl), 1);
    EXPECT_EQ(ours->session().cipher, hash == 2 ? "TLS_AES_256_GCM_SHA384" : "TLS_AES_128_GCM_SHA256");
    // OpenSSL to us: one small write, one of several records.
    const auto a = pattern(100, 1), b = pattern(70000, 2);
    ASSERT_EQ(SSL_write(peer->ssl, a.data(), int(a.size())), int(a.size()));
    ASSERT_EQ(SSL_write(peer->ssl, b.data(), int(b.size())), int(b.size()));
    pump();
    std::vector<uint8_t> both = a;
    both.insert(both.end(), b.begin(), b.end());
    EXPECT_EQ(owner.got, both);
    // Us to OpenSSL.
    const auto c = pattern(50000, 3);
    ours->send(c.data(), 24);
    ours->send(c.data() + 24, c.size() - 24);
    pump();
    EXPECT_EQ(peer->read_all(), c);
    // OpenSSL updates its keys and asks for ours to change too; records go on both ways.
    ASSERT_EQ(SSL_key_update(peer->ssl, SSL_KEY_UPDATE_REQUESTED), 1);
    const auto d = pattern(3000, 4);
    ASSERT_EQ(SSL_write(peer->ssl, d.data(), int(d.size())), int(d.size()));
    pump();
    EXPECT_EQ(std::vector<uint8_t>(owner.got.end() - long(d.size()), owner.got.end()), d);
    ours->send(d.data(), d.size());
    pump();
    EXPECT_EQ(peer->read_all(), d);
    EXPECT_FALSE(owner.closed) << ours->failure();
    // close_notify from OpenSSL ends the session in order.
    SSL_shutdown(peer->ssl);
    pump();
    reactor.run_once(0);
    EXPECT_TRUE(owner.closed);
    EXPECT_EQ(owner.err, 0);
    ours.reset();
    peer.reset();
  }
}

INSTANTIATE_TEST_SUITE_P(OursAs, TlsWithOpenSsl, ::testing::Values(true, false),
                         [](const auto& p) { return p.param ? "Server" : "Client"; });

TEST_P(TlsWithOpenSsl, ChaCha20WhenThePeerHasOnlyThat) {
  start(1);
  SSL_set_ciphersuites(peer->ssl, "TLS_CHACHA20_POLY1305_SHA256");
  pump();
  ASSERT_TRUE(ours->established()) << ours->failure();
  EXPECT_EQ(ours->session().cipher, "TLS_CHACHA20_POLY1305_SHA256");
  const auto a = pattern(20000, 6);
  ASSERT_EQ(SSL_write(peer->ssl, a.data(), int(a.size())), int(a.size()));
  ours->send(a.data(), a.size());
  pump();
  EXPECT_EQ(owner.got, a);
  EXPECT_EQ(peer->read_all(), a);
}

TEST_P(TlsWithOpenSsl, ATamperedRecordEndsTheSession) {
  start(1);
  pump();
  ASSERT_TRUE(ours->established()) << ours->failure();
  const auto a = pattern(1000, 5);
  ASSERT_EQ(SSL_write(peer->ssl, a.data(), int(a.size())), int(a.size()));
  auto rec = peer->take_output();
  rec[rec.size() / 2] ^= 0x40;
  lower->deliver(rec);
  reactor.run_once(0);
  EXPECT_TRUE(owner.got.empty());
  EXPECT_TRUE(owner.closed);
  EXPECT_NE(ours->failure().find("bad_record_mac"), std::string::npos) << ours->failure();
}

// A record opened straight into the owner's memory (a read's buffer) whose tag fails leaves
// nothing of its decryption there: an on-path attacker's bytes never reach the layer above.
TEST_P(TlsWithOpenSsl, ATamperedRecordLeavesNothingInTheOwnersMemory) {
  start(1);
  pump();
  ASSERT_TRUE(ours->established()) << ours->failure();
  const auto a = pattern(16000, 7);
  owner.direct.assign(a.size(), 0xEE);
  owner.direct_left = a.size();
  ASSERT_EQ(SSL_write(peer->ssl, a.data(), int(a.size())), int(a.size()));
  auto rec = peer->take_output();
  rec[rec.size() - 3] ^= 0x01;  // the tag: every content byte decrypts as it was sent
  lower->deliver(rec);
  reactor.run_once(0);
  EXPECT_TRUE(owner.closed);
  EXPECT_NE(ours->failure().find("bad_record_mac"), std::string::npos) << ours->failure();
  EXPECT_EQ(owner.direct_left, a.size()) << "the owner was told of bytes that did not authenticate";
  size_t leaked = 0;
  for (size_t i = 0; i < a.size(); ++i) leaked += owner.direct[i] == a[i] && a[i] != 0;
  EXPECT_LT(leaked, a.size() / 64) << "the unauthenticated plaintext stayed in the owner's buffer";
}

// A peer asking again and again for our KeyUpdate (thousands in one burst) gets one answer, sealed
// within the send chunks' limit: asking costs it no less than it costs us.
TEST_P(TlsWithOpenSsl, AFloodOfKeyUpdateRequestsGetsOneAnswerAndNoMemory) {
  start(1);
  pump();
  ASSERT_TRUE(ours->established()) << ours->failure();
  const uint64_t chunks_before = ours->counters().chunks_allocated;
  std::vector<uint8_t> burst;
  constexpr int kRequests = 2000;
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_EQ(SSL_key_update(peer->ssl, SSL_KEY_UPDATE_REQUESTED), 1);
    ASSERT_EQ(SSL_do_handshake(peer->ssl), 1);
    auto rec = peer->take_output();
    burst.insert(burst.end(), rec.begin(), rec.end());
  }
  lower->deliver(burst);
  reactor.run_deferred();
  EXPECT_FALSE(owner.closed) << ours->failure();
  EXPECT_EQ(ours->counters().key_updates_in, uint64_t(kRequests));
  EXPECT_EQ(ours->counters().key_updates_out, 1u) << "one KeyUpdate answers every request before it";
  EXPECT_LE(ours->counters().chunks_allocated - chunks_before, 1u) << "a send chunk per request";
  // Records go on both ways under the new keys.
  const auto d = pattern(3000, 8);
  ours->send(d.data(), d.size());
  ASSERT_EQ(SSL_write(peer->ssl, d.data(), int(d.size())), int(d.size()));
  pump();
  EXPECT_EQ(peer->read_all(), d);
  ASSERT_GE(owner.got.size(), d.size());
  EXPECT_EQ(std::vector<uint8_t>(owner.got.end() - long(d.size()), owner.got.end()), d);
  EXPECT_FALSE(owner.closed) << ours->failure();
}

TEST(ClientHello, BinderMatchesOpenSsls) {
  const Psk psk = make_psk(kIdentity, 1, 0x31);
  const auto records = openssl_client_hello(&psk);
  std::vector<uint8_t> msg;
  std::string why;
  ASSERT_EQ(tls::first_handshake_message(records, msg, why), 1) << why;
  tls::ClientHelloPsks psks;
  ASSERT_TRUE(tls::parse_client_hello_psks(msg, psks, why)) << why;
  ASSERT_EQ(psks.identities, std::vector<std::string>{kIdentity});
  std::vector<uint8_t> binder;
  ASSERT_TRUE(tls::psk_binder(1, psk.key.span(), psks.truncated, binder));
  EXPECT_EQ(binder, psks.binders[0]);
  const Psk other = make_psk(kIdentity, 1, 0x32);
  ASSERT_TRUE(tls::psk_binder(1, other.key.span(), psks.truncated, binder));
  EXPECT_NE(binder, psks.binders[0]);
  // Every cut short is "more bytes", never a crash or a wrong answer.
  for (size_t n = 0; n < records.size(); n += 13)
    EXPECT_EQ(tls::first_handshake_message({records.data(), n}, msg, why), 0) << n;
}

TEST(ClientHello, MalformedMessagesAreRefused) {
  const Psk psk = make_psk(kIdentity, 1, 0x31);
  auto records = openssl_client_hello(&psk);
  std::vector<uint8_t> msg;
  std::string why;
  ASSERT_EQ(tls::first_handshake_message(records, msg, why), 1);
  tls::ClientHelloPsks psks;
  // Any shorter message claims more than it holds.
  for (size_t n = 0; n + 1 < msg.size(); n += 7) {
    std::vector<uint8_t> cut(msg.begin(), msg.begin() + long(n));
    EXPECT_FALSE(tls::parse_client_hello_psks(cut, psks, why)) << n;
  }
  auto wrong_type = msg;
  wrong_type[0] = 2;
  EXPECT_FALSE(tls::parse_client_hello_psks(wrong_type, psks, why));
  records[0] = 0x17;  // application data, not a handshake
  EXPECT_EQ(tls::first_handshake_message(records, msg, why), -1);
}

TEST(PskIdentity, ParsesBothVersionsAndRefusesTheRest) {
  auth::PskIdentity id;
  std::string why;
  ASSERT_TRUE(auth::parse_psk_identity("NVMe0R01 nqn.h nqn.s", id, why)) << why;
  EXPECT_EQ(id.version, 0);
  EXPECT_EQ(id.hash, 1);
  EXPECT_EQ(id.hostnqn, "nqn.h");
  EXPECT_EQ(id.subnqn, "nqn.s");
  ASSERT_TRUE(auth::parse_psk_identity("NVMe1R02 nqn.h nqn.s AbCd=", id, why)) << why;
  EXPECT_EQ(id.version, 1);
  EXPECT_EQ(id.hash, 2);
  EXPECT_EQ(id.subnqn, "nqn.s");
  EXPECT_EQ(id.digest, "AbCd=");
  for (const char* bad : {"", "NVMe0R03 a b", "NVMe2R01 a b", "NVMe0R01 a", "NVMe1R01 a b", "NVMe0G01 a b",
                          "nvme0R01 a b", "NVMe0R01 a b c", "NVMe0R01  b"})
    EXPECT_FALSE(auth::parse_psk_identity(bad, id, why)) << bad;
}

TEST(PskIdentity, HostAndTargetDeriveTheSameKey) {
  auth::ConfiguredPsk c;
  std::string err;
  ASSERT_TRUE(auth::parse_tls_psk("NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:", c, err)) << err;
  for (int version : {0, 1})
    for (auto enc : {auth::LabelEncoding::Rfc8446, auth::LabelEncoding::Libnvme}) {
      auth::OfferedPsk offered;
      ASSERT_TRUE(auth::host_tls_psk(c, "nqn.psk-test-host", "nqn.psk-test-subsys", version, enc, offered));
      auth::PskIdentity id;
      ASSERT_TRUE(auth::parse_psk_identity(offered.identity, id, err)) << err;
      auth::SecretBytes key;
      ASSERT_TRUE(auth::target_tls_psk(c, offered.identity, id, enc, key, err)) << err;
      EXPECT_EQ(key, offered.key);
      if (version == 1) {
        // The other encoding's retained PSK gives another digest: refused, not a wrong key.
        const auto other = enc == auth::LabelEncoding::Rfc8446 ? auth::LabelEncoding::Libnvme : auth::LabelEncoding::Rfc8446;
        EXPECT_FALSE(auth::target_tls_psk(c, offered.identity, id, other, key, err));
      }
    }
  // The libnvme test vector's identity (RFC 8446 encoding, version 1).
  auth::OfferedPsk v1;
  ASSERT_TRUE(auth::host_tls_psk(c, "nqn.psk-test-host", "nqn.psk-test-subsys", 1, auth::LabelEncoding::Rfc8446, v1));
  EXPECT_EQ(v1.identity, "NVMe1R01 nqn.psk-test-host nqn.psk-test-subsys iSbjiStwJ/1TrTvDlt2fjFmzvsytOJelidNnA+X5lEU=");
}

}  // namespace
}  // namespace nvtcp::tls_stream_test
