// SPDX-License-Identifier: Apache-2.0
// libFuzzer: the TLS record path, both sides, as a peer that holds no key controls it. The
// streams run over an in-memory stream below; a real client and server (OpenSSL on both ends,
// one fixed PSK) make the valid traffic the input then corrupts. The first byte picks:
//   0  server: the input is the client's byte stream from its first byte;
//   1  server: a real ClientHello with the input XORed over it (structure survives, fields break);
//   2  server: a whole real handshake, then the input as the client's records;
//   3  client: its ClientHello goes out, the input is the server's byte stream;
//   4  the ClientHello parser and binder on a real ClientHello XORed with the input;
//   5  server, 6 client: a whole handshake with OpenSSL at the other end, then the input as
//      records that OpenSSL's traffic key seals, so their content reaches the post-handshake
//      code: KeyUpdates (one or many, requested or not, at a record's end or not), tickets,
//      alerts, unknown content types and application data. Each record is [type, len lo, len hi,
//      content...]; the sealing key moves on after a record that ends in a KeyUpdate, as the
//      peer's would.
// The second byte sets the size of the pieces the bytes arrive in. Checks: no crash, no
// sanitizer report, every state move legal (the transition checks abort), no leak, and the owner
// hears of a close at most once.
#include <openssl/ssl.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "reactor/reactor.hpp"
#include "tls/client_hello.hpp"
#include "tls/record.hpp"
#include "tls/tls_stream.hpp"
#include "util/log.hpp"

using namespace nvtcp;

namespace {

constexpr const char* kIdentity = "NVMe0R01 nqn.2014-08.org.nvmexpress:uuid:fuzz-host nqn.2026-12.io.nvtcp:fuzz";

tls::Psk fixed_psk() {
  tls::Psk p;
  p.identity = kIdentity;
  p.hash = 1;
  p.key.resize(32);
  for (size_t i = 0; i < 32; ++i) p.key.data()[i] = uint8_t(0x40 + i);
  return p;
}

struct Keys final : tls::PskResolver {
  bool resolve(std::string_view identity, std::vector<tls::Psk>& out, std::string& why) const override {
    if (identity != kIdentity) {
      why = "unknown identity";
      return false;
    }
    out.push_back(fixed_psk());
    return true;
  }
};

// The stream below: keeps what is sent, hands the test's bytes to its owner.
class Pipe final : public reactor::ByteStream {
 public:
  Pipe(reactor::Reactor& r, reactor::StreamOwner& o) : r_(r), owner_(o) {
    closed_.owner = this;
    closed_.fn = [](reactor::Deferred* d) {
      static_cast<reactor::OwnedDeferred<Pipe>*>(d)->owner->owner_.on_closed(0);
    };
  }
  ~Pipe() override { r_.undefer(&closed_); }
  void start() override {}
  void send(const void* p, size_t n, reactor::SendDone* done) override {
    if (!closing_) out.insert(out.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
    if (done) dones_.push_back(done);
  }
  void close() override {
    if (closing_) return;
    closing_ = true;
    release();
    r_.defer(&closed_);
  }
  bool closing() const override { return closing_; }
  size_t queued_bytes() const override { return 0; }
  uint64_t sent_bytes() const override { return out.size(); }
  void release() {
    std::deque<reactor::SendDone*> d;
    d.swap(dones_);
    for (auto* x : d) x->fn(x);
  }
  void deliver(const uint8_t* p, size_t n, size_t piece) {
    for (size_t off = 0; off < n && !closing_; off += piece) owner_.on_receive(p + off, std::min(piece, n - off));
  }
  std::vector<uint8_t> out;

 private:
  reactor::Reactor& r_;
  reactor::StreamOwner& owner_;
  bool closing_ = false;
  std::deque<reactor::SendDone*> dones_;
  reactor::OwnedDeferred<Pipe> closed_;
};

struct Owner final : reactor::StreamOwner {
  int closes = 0;
  size_t got = 0;
  void on_receive(const uint8_t*, size_t n) override { got += n; }
  void on_closed(int) override {
    if (++closes > 1) abort();  // told twice
  }
};

struct End {
  Owner owner;
  std::unique_ptr<tls::TlsStream> stream;
  Pipe* pipe = nullptr;
  End(reactor::Reactor& r, bool server, const Keys& keys) {
    stream = server ? tls::TlsStream::server(r, owner, keys, "fuzz-server")
                    : tls::TlsStream::client(r, owner, fixed_psk(), "fuzz-client");
    stream->attach([&](reactor::StreamOwner& o) {
      auto p = std::make_unique<Pipe>(r, o);
      pipe = p.get();
      return p;
    });
    stream->start();
  }
};

void settle(reactor::Reactor& r, End& e) {
  for (int i = 0; i < 4; ++i) {
    r.run_deferred();
    if (e.pipe) e.pipe->release();
  }
}

// A real ClientHello for the fixed key, made once.
const std::vector<uint8_t>& real_client_hello(reactor::Reactor& r, const Keys& keys) {
  static std::vector<uint8_t> hello = [&] {
    End c(r, false, keys);
    settle(r, c);
    return c.pipe->out;
  }();
  return hello;
}

// OpenSSL as the peer, with the fixed key: its application traffic secret (from the key log) is
// what the fuzzer seals its records with.
struct OpenSslPeer {
  SSL_CTX* ctx = nullptr;
  SSL* ssl = nullptr;
  BIO* in = nullptr;
  BIO* out = nullptr;
  static inline std::vector<uint8_t> sending_secret;
  static inline bool server = false;
  explicit OpenSslPeer(bool as_server) {
    server = as_server;
    sending_secret.clear();
    ctx = SSL_CTX_new(as_server ? TLS_server_method() : TLS_client_method());
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_num_tickets(ctx, 0);  // nothing of its own under the traffic key before ours
    SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256");
    SSL_CTX_set_keylog_callback(ctx, [](const SSL*, const char* line) {
      const std::string l(line);
      const char* label = server ? "SERVER_TRAFFIC_SECRET_0 " : "CLIENT_TRAFFIC_SECRET_0 ";
      if (l.rfind(label, 0) != 0) return;
      const std::string hex = l.substr(l.rfind(' ') + 1);
      sending_secret.clear();
      for (size_t i = 0; i + 1 < hex.size(); i += 2)
        sending_secret.push_back(uint8_t(std::stoi(hex.substr(i, 2), nullptr, 16)));
    });
    if (as_server)
      SSL_CTX_set_psk_find_session_callback(ctx, [](SSL* s, const unsigned char* id, size_t len, SSL_SESSION** sess) {
        *sess = std::string_view(reinterpret_cast<const char*>(id), len) == kIdentity ? session(s) : nullptr;
        return 1;
      });
    else
      SSL_CTX_set_psk_use_session_callback(
          ctx, [](SSL* s, const EVP_MD*, const unsigned char** id, size_t* len, SSL_SESSION** sess) {
            *sess = session(s);
            *id = reinterpret_cast<const unsigned char*>(kIdentity);
            *len = std::strlen(kIdentity);
            return 1;
          });
    ssl = SSL_new(ctx);
    in = BIO_new(BIO_s_mem());
    out = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl, in, out);
    if (as_server)
      SSL_set_accept_state(ssl);
    else
      SSL_set_connect_state(ssl);
  }
  ~OpenSslPeer() {
    SSL_free(ssl);
    SSL_CTX_free(ctx);
  }
  static SSL_SESSION* session(SSL* s) {
    const tls::Psk psk = fixed_psk();
    const unsigned char cs[2] = {0x13, 0x01};
    SSL_SESSION* sess = SSL_SESSION_new();
    SSL_SESSION_set1_master_key(sess, psk.key.data(), psk.key.size());
    SSL_SESSION_set_cipher(sess, SSL_CIPHER_find(s, cs));
    SSL_SESSION_set_protocol_version(sess, TLS1_3_VERSION);
    return sess;
  }
};

// Our end against OpenSSL: the handshake, then the input sealed record by record.
void post_handshake(reactor::Reactor& r, const Keys& keys, bool ours_server, const uint8_t* data, size_t size,
                    size_t piece) {
  End ours(r, ours_server, keys);
  OpenSslPeer peer(!ours_server);
  for (int round = 0; round < 8; ++round) {
    settle(r, ours);
    if (!ours.pipe->out.empty()) {
      BIO_write(peer.in, ours.pipe->out.data(), int(ours.pipe->out.size()));
      ours.pipe->out.clear();
    }
    SSL_do_handshake(peer.ssl);
    std::vector<uint8_t> b(size_t(BIO_pending(peer.out)));
    if (!b.empty()) BIO_read(peer.out, b.data(), int(b.size()));
    if (!b.empty()) ours.pipe->deliver(b.data(), b.size(), b.size());
  }
  if (!ours.stream->established() || OpenSslPeer::sending_secret.empty()) abort();  // the valid path must work
  tls::RecordProtection seal;
  std::string err;
  if (!seal.init(0x1301, OpenSslPeer::sending_secret, true, err)) abort();
  std::vector<uint8_t> wire;
  while (size >= 3) {
    const uint8_t type = data[0];
    const size_t len =
        std::min<size_t>(size_t(data[1]) | size_t(data[2]) << 8, std::min<size_t>(size - 3, tls::kMaxPlaintext));
    const uint8_t* content = data + 3;
    // Types 0-2 name the three a peer sends; the rest go as they are.
    const uint8_t ct = type == 0 ? 22 : type == 1 ? 21 : type == 2 ? 23 : type;
    std::vector<uint8_t> rec(tls::RecordProtection::sealed_size(len));
    if (!seal.seal_begin(rec.data(), len) ||
        (len && !seal.seal_update(content, len, rec.data() + tls::kRecordHeader)) ||
        !seal.seal_end(rec.data() + tls::kRecordHeader + len, tls::ContentType(ct)))
      abort();
    wire.insert(wire.end(), rec.begin(), rec.end());
    // The peer's key moves on after a record whose last handshake message is a KeyUpdate.
    if (ct == 22) {
      size_t at = 0, last = SIZE_MAX;
      while (at + 4 <= len) {
        const size_t mlen = size_t(content[at + 1]) << 16 | size_t(content[at + 2]) << 8 | content[at + 3];
        if (mlen > len - at - 4) break;
        last = at;
        at += 4 + mlen;
      }
      if (at == len && last != SIZE_MAX && content[last] == 24 && len - last == 5 && !seal.update_key(err)) abort();
    }
    data += 3 + len;
    size -= 3 + len;
  }
  ours.pipe->deliver(wire.data(), wire.size(), piece);
  settle(r, ours);
  ours.stream->close();
  settle(r, ours);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool quiet = [] {
    log::set_level(log::Level::Off);
    return true;
  }();
  (void)quiet;
  if (size < 2) return 0;
  static reactor::Reactor r(64);
  static const Keys keys;
  const uint8_t mode = data[0] % 7;
  const size_t piece = size_t(data[1]) * 16 + 1;
  data += 2, size -= 2;
  const std::vector<uint8_t>& hello = real_client_hello(r, keys);

  auto xored = [&](const std::vector<uint8_t>& base) {
    std::vector<uint8_t> v = base;
    for (size_t i = 0; i < size && i < v.size(); ++i) v[i] ^= data[i];
    if (size > v.size()) v.insert(v.end(), data + v.size(), data + size);
    return v;
  };

  if (mode == 5 || mode == 6) {
    post_handshake(r, keys, mode == 5, data, size, piece);
    return 0;
  }
  if (mode == 4) {
    const std::vector<uint8_t> bytes = xored(hello);
    std::vector<uint8_t> msg, binder;
    std::string why;
    tls::ClientHelloPsks psks;
    if (tls::first_handshake_message(bytes, msg, why) == 1 && tls::parse_client_hello_psks(msg, psks, why) &&
        !psks.identities.empty())
      tls::psk_binder(1, fixed_psk().key.span(), psks.truncated, binder);
    return 0;
  }
  if (mode == 3) {
    End client(r, false, keys);
    settle(r, client);
    client.pipe->deliver(data, size, piece);
    settle(r, client);
    client.stream->close();
    settle(r, client);
    return 0;
  }
  End server(r, true, keys);
  if (mode == 0) {
    server.pipe->deliver(data, size, piece);
  } else if (mode == 1) {
    const std::vector<uint8_t> bytes = xored(hello);
    server.pipe->deliver(bytes.data(), bytes.size(), piece);
  } else {
    // A whole handshake with a real client, then the input as the client's records.
    End client(r, false, keys);
    for (int round = 0; round < 8; ++round) {
      settle(r, client);
      settle(r, server);
      if (!client.pipe->out.empty()) {
        std::vector<uint8_t> b;
        b.swap(client.pipe->out);
        server.pipe->deliver(b.data(), b.size(), b.size());
      }
      if (!server.pipe->out.empty()) {
        std::vector<uint8_t> b;
        b.swap(server.pipe->out);
        client.pipe->deliver(b.data(), b.size(), b.size());
      }
    }
    if (!server.stream->established()) abort();  // the valid path must work
    server.pipe->deliver(data, size, piece);
    client.stream->close();
    settle(r, client);
  }
  settle(r, server);
  server.stream->close();
  settle(r, server);
  return 0;
}
