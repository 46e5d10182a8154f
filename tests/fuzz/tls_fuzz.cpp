// SPDX-License-Identifier: Apache-2.0
// libFuzzer: the TLS record path, both sides, as a peer that holds no key controls it. The
// streams run over an in-memory stream below; a real client and server (OpenSSL on both ends,
// one fixed PSK) make the valid traffic the input then corrupts. The first byte picks:
//   0  server: the input is the client's byte stream from its first byte;
//   1  server: a real ClientHello with the input XORed over it (structure survives, fields break);
//   2  server: a whole real handshake, then the input as the client's records;
//   3  client: its ClientHello goes out, the input is the server's byte stream;
//   4  the ClientHello parser and binder on a real ClientHello XORed with the input.
// The second byte sets the size of the pieces the bytes arrive in. Checks: no crash, no
// sanitizer report, every state move legal (the transition checks abort), no leak, and the owner
// hears of a close at most once.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "reactor/reactor.hpp"
#include "tls/client_hello.hpp"
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
  const uint8_t mode = data[0] % 5;
  const size_t piece = size_t(data[1]) * 16 + 1;
  data += 2, size -= 2;
  const std::vector<uint8_t>& hello = real_client_hello(r, keys);

  auto xored = [&](const std::vector<uint8_t>& base) {
    std::vector<uint8_t> v = base;
    for (size_t i = 0; i < size && i < v.size(); ++i) v[i] ^= data[i];
    if (size > v.size()) v.insert(v.end(), data + v.size(), data + size);
    return v;
  };

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
