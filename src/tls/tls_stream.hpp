// SPDX-License-Identifier: Apache-2.0
// TLS 1.3 with a pre-shared key over a ByteStream (NVMe/TCP transport specification 3.6, TP 8011):
// a TlsStream is itself a ByteStream, so a connection's PDU layer runs over it unchanged. It owns
// the stream below (a TcpStream). OpenSSL does the handshake, through a BIO of our own over that
// stream, with the keys HandshakeKeys chooses and keeps (handshake_keys.hpp); then the stream
// protects the records itself with the traffic secrets OpenSSL derived (record.hpp): each record
// is sealed straight from the owner's segments into a recycled send chunk, and opened into the
// owner's memory (recv_direct) or one buffer. Over a socket whose
// kernel has kTLS, the kernel seals instead (kernel_tls.hpp) and the owner's segments go to the
// socket as they are. The data path allocates nothing and copies no plaintext after warm-up.
//
// PSK only, as the specification requires: no certificates, TLS 1.3 only, (EC)DHE with the PSK,
// no session tickets; the cipher follows the PSK's hash (TLS_AES_128_GCM_SHA256 for SHA-256,
// TLS_AES_256_GCM_SHA384 for SHA-384; a client may also end on TLS_CHACHA20_POLY1305_SHA256).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "auth/secret_bytes.hpp"
#include "reactor/byte_stream.hpp"
#include "reactor/reactor.hpp"
#include "reactor/tcp_stream.hpp"
#include "tls/handshake_keys.hpp"
#include "tls/psk.hpp"
#include "tls/record.hpp"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;
typedef struct bio_st BIO;

namespace nvtcp::tls {

SSL_CTX* make_context(bool server);

// What a handshake ended with, for logs and for the layer above (a target checks that the
// Connect names the host and subsystem the PSK identity was for).
struct Session {
  std::string identity;
  std::string cipher;  // e.g. "TLS_AES_128_GCM_SHA256"
  std::string group;   // the (EC)DHE group, e.g. "x25519"
  const char* derivation = "";  // a server's: how the TLS PSK the client proved was derived
  bool kernel_tx = false;       // records out are sealed by the kernel (kTLS)
};

// One process-wide OpenSSL context per side (thread-safe: each connection takes an SSL of it).
SSL_CTX* server_context();
SSL_CTX* client_context();

// Counters of one stream, for tests and the benchmark.
struct TlsCounters {
  uint64_t records_out = 0;
  uint64_t records_in = 0;   // calls that returned plaintext
  uint64_t chunks_allocated = 0;
  uint64_t key_updates_in = 0;   // the peer's KeyUpdates taken
  uint64_t key_updates_out = 0;  // ours sent (one answers any number asked for before it)
  uint64_t binders_checked = 0;  // PSK binders computed for a ClientHello (server)
};

class TlsStream final : public reactor::ByteStream, private reactor::StreamOwner {
 public:
  using MakeLower = std::unique_ptr<reactor::ByteStream> (*)(void* arg, reactor::StreamOwner& owner);

  // A server: keys come from resolver (which must outlive the stream). peer names the
  // connection in log lines.
  static std::unique_ptr<TlsStream> server(reactor::Reactor& r, reactor::StreamOwner& owner,
                                           const PskResolver& resolver, std::string peer);
  // A client offering one key.
  static std::unique_ptr<TlsStream> client(reactor::Reactor& r, reactor::StreamOwner& owner, Psk psk,
                                           std::string peer);
  ~TlsStream() override;

  // The stream below, built with this TlsStream as its owner (call once, before start()).
  template <class F>
  void attach(F&& make_lower) {
    auto lower = make_lower(static_cast<reactor::StreamOwner&>(*this));
    // Over a socket, the kernel's kTLS can take the sending direction.
    if constexpr (std::is_same_v<decltype(lower), std::unique_ptr<reactor::TcpStream>>) tcp_ = lower.get();
    lower_ = std::move(lower);
  }
  // Once the handshake is done, hand the sealing of records out to the kernel (kTLS TX) when the
  // stream below is a socket and the kernel has the tls module; else, or if the kernel refuses,
  // records are sealed here. Received records are always opened here (kernel_tls.hpp says why).
  // Call before start(). On by default.
  void set_kernel_tx(bool on) { kernel_tx_wanted_ = on; }
  reactor::ByteStream* lower() { return lower_.get(); }

  // ByteStream
  void start() override;
  void send(const void* data, size_t len, reactor::SendDone* done = nullptr) override;
  void close() override;
  bool closing() const override { return closing_; }
  // Plaintext not yet encrypted plus ciphertext the stream below still holds.
  size_t queued_bytes() const override { return plain_queued_ + (lower_ ? lower_->queued_bytes() : 0); }
  uint64_t sent_bytes() const override { return lower_ ? lower_->sent_bytes() : 0; }
  size_t max_sends_held_after_delivery() const override;

  bool established() const { return state_ == State::Established; }
  // Why the handshake or the stream failed (empty if it did not): for the owner's own report.
  const std::string& failure() const { return fail_why_; }
  const Session& session() const { return session_; }
  const TlsCounters& counters() const { return counters_; }

  // Records at most this much plaintext each (TLS's limit).
  static constexpr size_t kMaxRecordPlaintext = kMaxPlaintext;

 private:
  enum class State { Idle, Handshaking, Established, Closing, kCount };
  static const char* state_name(State s);
  TlsStream(reactor::Reactor& r, reactor::StreamOwner& owner, bool server, std::string peer);

  // StreamOwner (the stream below)
  void on_receive(const uint8_t* data, size_t len) override;
  void on_closed(int err) override;

  // The BIO's two ends.
  static int bio_write(BIO* b, const char* data, int len);
  static int bio_read(BIO* b, char* out, int len);
  static long bio_ctrl(BIO* b, int cmd, long num, void* ptr);
  static BIO* make_bio(TlsStream* self);

  void handshake_step();
  bool start_record_layer();
  void receive_records(const uint8_t* p, size_t n);
  bool open_record(const uint8_t* body);
  bool handle_handshake(const uint8_t* p, size_t n);
  // The peer asked for our KeyUpdate: the next flush seals one (one for any number asked).
  bool owe_key_update();
  // Seals the owed KeyUpdate into the current chunk and moves the sending key on; a chunk
  // within the limit or nothing (it waits, owed, for one to come back).
  bool seal_key_update();
  void flush();
  // kTLS TX, once the handshake's last flight has reached the socket.
  void start_kernel_tx();
  void fail(const std::string& why, int err);
  void push_chunk();
  void release_chunk_dones(uint64_t upto_seq);
  void set_state(State s);

  // Ciphertext out: records are appended to the current chunk; a full chunk (or the last one of a
  // flush) goes to the stream below, and comes back to the free list when its send is done.
  struct Chunk : reactor::SendDone {
    TlsStream* owner = nullptr;
    std::unique_ptr<uint8_t[]> buf;
    size_t len = 0;
    uint64_t seq = 0;
    Chunk* next_free = nullptr;
  };
  // Four full records.
  static constexpr size_t kChunkBytes = 4 * RecordProtection::sealed_size(kMaxPlaintext);
  // A chunk, or none when kMaxChunks are out and the caller can wait (force: the handshake's
  // flights, which cannot).
  Chunk* take_chunk(bool force = false);
  // Chunks given to the stream below at once, at most: 256 KiB of records waiting for the
  // kernel's socket buffer is plenty, and the pool stops growing once it has them all.
  static constexpr size_t kMaxChunks = 4;
  size_t chunks_out_ = 0;
  static void on_chunk_sent(reactor::SendDone* d);

  // Plaintext in: the owner's segments by reference, as the stream below would take them.
  struct Segment {
    const uint8_t* data;
    size_t len;
    reactor::SendDone* done;
  };
  // An owner's done waits for the chunk that carries the last of its bytes.
  struct PendingDone {
    reactor::SendDone* done;
    uint64_t chunk_seq;
  };

  reactor::Reactor& reactor_;
  reactor::StreamOwner& owner_;
  const bool server_;
  std::string peer_;
  std::unique_ptr<reactor::ByteStream> lower_;
  reactor::TcpStream* tcp_ = nullptr;  // lower_, when it is a socket
  // kTLS TX: wanted; waiting for the handshake's last flight to reach the socket (the owner's
  // sends wait meanwhile, unsealed); on (the owner's segments go to the socket as they are).
  bool kernel_tx_wanted_ = true;
  bool kernel_tx_pending_ = false;
  bool kernel_tx_ = false;
  bool key_update_owed_ = false;
  SSL* ssl_ = nullptr;
  State state_ = State::Idle;
  bool closing_ = false;
  bool lower_closed_ = false;
  int close_err_ = 0;
  std::string fail_why_;

  TlsCounters counters_;
  HandshakeKeys keys_;
  Session session_;

  // Receive: the ciphertext the BIO hands OpenSSL during the handshake.
  const uint8_t* in_ = nullptr;
  size_t in_len_ = 0;
  // Records, once established: the header being read, a record that came in pieces (else it is
  // opened where it lies), and one record's plaintext for on_receive.
  RecordProtection tx_, rx_;
  uint8_t hdr_[kRecordHeader] = {};
  size_t hdr_have_ = 0, body_len_ = 0, rec_have_ = 0;
  std::unique_ptr<uint8_t[]> rec_;
  std::unique_ptr<uint8_t[]> plain_;
  std::unique_ptr<uint8_t[]> scratch_;  // the inner plaintext past what goes to the owner

  // Send.
  std::vector<Segment> seg_;          // a ring that grows at warm-up only
  size_t seg_head_ = 0, seg_count_ = 0, head_off_ = 0;
  size_t plain_queued_ = 0;
  Chunk* cur_ = nullptr;
  Chunk* free_ = nullptr;
  std::vector<std::unique_ptr<Chunk>> chunks_;
  uint64_t chunk_seq_ = 0;            // seq of the last chunk pushed
  uint64_t chunks_done_ = 0;          // every chunk up to this seq has been sent
  std::vector<PendingDone> pending_;  // a ring like seg_
  size_t pend_head_ = 0, pend_count_ = 0;
  reactor::OwnedDeferred<TlsStream> flush_d_;
};

}  // namespace nvtcp::tls
