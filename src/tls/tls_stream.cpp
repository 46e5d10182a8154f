// SPDX-License-Identifier: Apache-2.0
#include "tls/tls_stream.hpp"

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>

#include "tls/kernel_tls.hpp"
#include "util/log.hpp"
#include "util/state_machine.hpp"

namespace nvtcp::tls {

namespace {

constexpr const char* kAllSuites = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";

std::string openssl_errors() {
  std::string s;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!s.empty()) s += "; ";
    s += buf;
  }
  return s;
}

BIO_METHOD* stream_bio_method() {
  static BIO_METHOD* m = [] {
    BIO_METHOD* bm = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "nvtcp byte stream");
    return bm;
  }();
  return m;
}

}  // namespace

// ------------------------------------------------------------------ contexts

SSL_CTX* make_context(bool server) {
  SSL_CTX* c = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (!c) return nullptr;
  SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION);
  SSL_CTX_set_max_proto_version(c, TLS1_3_VERSION);
  // No tickets: NVMe/TCP resumes nothing, and a ticket is a key we would have to keep.
  // The server's order decides: AES-GCM, which the CPU does in hardware, before ChaCha20.
  SSL_CTX_set_options(c, SSL_OP_NO_TICKET | (server ? SSL_OP_CIPHER_SERVER_PREFERENCE : 0));
  SSL_CTX_set_num_tickets(c, 0);
  SSL_CTX_set_ciphersuites(c, kAllSuites);
  // No read-ahead: OpenSSL reads the handshake record by record, so whatever follows the last
  // one stays with us for the record layer.
  SSL_CTX_set_read_ahead(c, 0);
  HandshakeKeys::install(c, server);
  return c;
}

SSL_CTX* server_context() {
  static SSL_CTX* c = make_context(true);
  return c;
}
SSL_CTX* client_context() {
  static SSL_CTX* c = make_context(false);
  return c;
}

// ------------------------------------------------------------------ life cycle

TlsStream::TlsStream(reactor::Reactor& r, reactor::StreamOwner& owner, bool server, std::string peer)
    : reactor_(r), owner_(owner), server_(server), peer_(std::move(peer)), keys_(server, peer_, counters_.binders_checked) {
  flush_d_.owner = this;
  flush_d_.fn = [](reactor::Deferred* d) { static_cast<reactor::OwnedDeferred<TlsStream>*>(d)->owner->flush(); };
  plain_ = std::make_unique<uint8_t[]>(kMaxRecordBody);
  rec_ = std::make_unique<uint8_t[]>(kMaxRecordBody);
  scratch_ = std::make_unique<uint8_t[]>(kMaxRecordBody);
  seg_.resize(64);
  pending_.resize(64);
  ssl_ = SSL_new(server ? server_context() : client_context());
  if (ssl_) {
    keys_.attach(ssl_);
    BIO* b = make_bio(this);
    SSL_set_bio(ssl_, b, b);
    if (server) SSL_set_accept_state(ssl_); else SSL_set_connect_state(ssl_);
  }
}

std::unique_ptr<TlsStream> TlsStream::server(reactor::Reactor& r, reactor::StreamOwner& owner,
                                             const PskResolver& resolver, std::string peer) {
  std::unique_ptr<TlsStream> s(new TlsStream(r, owner, true, std::move(peer)));
  s->keys_.serve(resolver);
  return s;
}

std::unique_ptr<TlsStream> TlsStream::client(reactor::Reactor& r, reactor::StreamOwner& owner, Psk psk,
                                             std::string peer) {
  std::unique_ptr<TlsStream> s(new TlsStream(r, owner, false, std::move(peer)));
  s->keys_.offer(s->ssl_, std::move(psk));
  return s;
}

TlsStream::~TlsStream() {
  reactor_.undefer(&flush_d_);
  // The stream below goes first: it may still hold our chunks (a send in flight is cancelled
  // with it).
  lower_.reset();
  if (ssl_) SSL_free(ssl_);  // wipes the traffic keys
}

const char* TlsStream::state_name(State s) {
  switch (s) {
    case State::Idle: return "Idle";
    case State::Handshaking: return "Handshaking";
    case State::Established: return "Established";
    case State::Closing: return "Closing";
    case State::kCount: break;
  }
  return "?";
}

void TlsStream::set_state(State to) {
  static constexpr TransitionTable<State, size_t(State::kCount)> kTransitions{
      {State::Idle, State::Handshaking},       {State::Idle, State::Closing},
      {State::Handshaking, State::Established}, {State::Handshaking, State::Closing},
      {State::Established, State::Closing},
  };
  if (kCheckTransitions && !kTransitions.allows(state_, to))
    illegal_transition("tls stream", state_name(state_), state_name(to), "TlsStream::set_state");
  state_ = to;
}

size_t TlsStream::max_sends_held_after_delivery() const {
  // Our dones wait for the chunk carrying their last byte, and a chunk's send may complete after
  // the peer has read it (and the stream below may hold more: zero-copy). A chunk carries at most
  // kChunkBytes / 64 segments of the sizes NVMe/TCP sends (a 24-byte response with its record's
  // share is more than 32 bytes).
  const size_t below = lower_ ? lower_->max_sends_held_after_delivery() : 0;
  if (kernel_tx_) return below;  // the owner's segments go to the socket as they are
  return (below + 1) * (kChunkBytes / 64);
}

void TlsStream::start() {
  if (!ssl_) {
    fail("OpenSSL could not make a TLS connection: " + openssl_errors(), -ENOMEM);
    return;
  }
  set_state(State::Handshaking);
  lower_->start();
  if (!server_) handshake_step();  // the ClientHello
}

void TlsStream::close() {
  if (closing_) return;
  closing_ = true;
  if (state_ != State::Closing) set_state(State::Closing);
  reactor_.undefer(&flush_d_);
  if (!lower_closed_) lower_->close();
}

void TlsStream::fail(const std::string& why, int err) {
  if (closing_) return;
  fail_why_ = why;
  close_err_ = err;
  static log::Limiter failures(20);  // a handshake any stranger can fail, once per connection
  log::warn_limited(failures, "{}: TLS: {}", peer_, why);
  // The alert OpenSSL wrote (if any) is sent, but the connection does not wait for it.
  push_chunk();
  close();
}

// ------------------------------------------------------------------ the BIO

BIO* TlsStream::make_bio(TlsStream* self) {
  BIO_METHOD* m = stream_bio_method();
  static const bool once = [m] {
    BIO_meth_set_write(m, bio_write);
    BIO_meth_set_read(m, bio_read);
    BIO_meth_set_ctrl(m, bio_ctrl);
    BIO_meth_set_create(m, [](BIO* b) {
      BIO_set_init(b, 1);
      return 1;
    });
    return true;
  }();
  (void)once;
  BIO* b = BIO_new(m);
  BIO_set_data(b, self);
  return b;
}

int TlsStream::bio_write(BIO* b, const char* data, int len) {
  auto* self = static_cast<TlsStream*>(BIO_get_data(b));
  BIO_clear_retry_flags(b);
  size_t left = size_t(len);
  const auto* p = reinterpret_cast<const uint8_t*>(data);
  while (left > 0) {
    if (!self->cur_) self->cur_ = self->take_chunk(true);
    Chunk* c = self->cur_;
    const size_t n = std::min(left, kChunkBytes - c->len);
    std::memcpy(c->buf.get() + c->len, p, n);
    c->len += n;
    p += n;
    left -= n;
    if (c->len == kChunkBytes) self->push_chunk();
  }
  return len;
}

int TlsStream::bio_read(BIO* b, char* out, int len) {
  auto* self = static_cast<TlsStream*>(BIO_get_data(b));
  BIO_clear_retry_flags(b);
  if (self->in_len_ == 0) {
    BIO_set_retry_read(b);
    return -1;
  }
  const size_t n = std::min(size_t(len), self->in_len_);
  std::memcpy(out, self->in_, n);
  self->in_ += n;
  self->in_len_ -= n;
  return int(n);
}

long TlsStream::bio_ctrl(BIO*, int cmd, long, void*) {
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

// ------------------------------------------------------------------ receive

void TlsStream::on_receive(const uint8_t* data, size_t len) {
  if (closing_) return;
  if (state_ == State::Established) {
    receive_records(data, len);
    return;
  }
  if (state_ != State::Handshaking) return;
  if (server_ && !keys_.hello_seen()) {
    std::string why;
    const int got = keys_.gather_client_hello(data, len, why);
    if (got < 0) {
      fail(why, -EPROTO);
      return;
    }
    if (got == 0) return;  // OpenSSL gets the whole ClientHello at once
    in_ = keys_.client_hello().data();
    in_len_ = keys_.client_hello().size();
  } else {
    in_ = data;
    in_len_ = len;
  }
  handshake_step();
  // What came after the handshake's last record is the first records of the session.
  const uint8_t* rest = in_;
  const size_t rest_len = in_len_;
  in_ = nullptr;
  in_len_ = 0;
  if (state_ == State::Established && !closing_ && rest_len) {
    if (!keys_.client_hello().empty()) {
      std::vector<uint8_t> keep(rest, rest + rest_len);  // rest lies in the ClientHello's bytes
      keys_.drop_client_hello();
      receive_records(keep.data(), keep.size());
      return;
    }
    receive_records(rest, rest_len);
  }
  if (keys_.hello_seen() && !keys_.client_hello().empty()) keys_.drop_client_hello();  // the key is chosen
}

void TlsStream::handshake_step() {
  ERR_clear_error();
  const int r = SSL_do_handshake(ssl_);
  push_chunk();  // the flight OpenSSL wrote
  if (r == 1) {
    set_state(State::Established);
    session_.identity = keys_.used().identity;
    if (server_) session_.derivation = keys_.used().derivation;
    session_.cipher = SSL_get_cipher_name(ssl_);
    int nid = 0;
    if (SSL_get_negotiated_group(ssl_) > 0) nid = SSL_get_negotiated_group(ssl_);
    session_.group = nid ? OBJ_nid2sn(nid) : "";
    keys_.forget_keys();
    if (!start_record_layer()) return;
    log::debug("{}: TLS established ({}, {}, identity \"{}\"{}{})", peer_, session_.cipher, session_.group,
               session_.identity, *session_.derivation ? ", PSK derived with " : "", session_.derivation);
    kernel_tx_pending_ = kernel_tx_wanted_ && tcp_;
    if (seg_count_ || kernel_tx_pending_) reactor_.defer(&flush_d_);
    return;
  }
  const int e = SSL_get_error(ssl_, r);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return;
  std::string why = keys_.take_refusal();
  const std::string errs = openssl_errors();
  if (why.empty()) why = errs.empty() ? "the handshake failed" : errs;
  fail(fmt::format("handshake failed: {}", why), -EACCES);
}

bool TlsStream::start_record_layer() {
  const SSL_CIPHER* c = SSL_get_current_cipher(ssl_);
  const uint16_t suite = c ? uint16_t(SSL_CIPHER_get_protocol_id(c)) : 0;
  std::string err;
  const bool ok = keys_.key_records(suite, tx_, rx_, err);
  if (!ok) fail("starting the record layer: " + err, -EPROTO);
  return ok;
}

void TlsStream::receive_records(const uint8_t* p, size_t n) {
  while (n > 0 && !closing_) {
    if (hdr_have_ < kRecordHeader) {
      const size_t k = std::min(n, kRecordHeader - hdr_have_);
      std::memcpy(hdr_ + hdr_have_, p, k);
      hdr_have_ += k;
      p += k;
      n -= k;
      if (hdr_have_ < kRecordHeader) return;
      body_len_ = size_t(hdr_[3]) << 8 | hdr_[4];
      if (hdr_[0] != uint8_t(ContentType::ApplicationData) || hdr_[1] != 0x03 ||
          body_len_ < kRecordTag + 1 || body_len_ > kMaxRecordBody) {
        fail(fmt::format("bad record: type {}, version {:02x}{:02x}, {} bytes", hdr_[0], hdr_[1], hdr_[2], body_len_),
             -EPROTO);
        return;
      }
      rec_have_ = 0;
    }
    // A record that is all here is opened where it lies; one that comes in pieces is gathered.
    if (rec_have_ == 0 && n >= body_len_) {
      if (!open_record(p)) return;
      p += body_len_;
      n -= body_len_;
      hdr_have_ = 0;
      continue;
    }
    const size_t k = std::min(n, body_len_ - rec_have_);
    std::memcpy(rec_.get() + rec_have_, p, k);
    rec_have_ += k;
    p += k;
    n -= k;
    if (rec_have_ < body_len_) return;
    if (!open_record(rec_.get())) return;
    hdr_have_ = 0;
    rec_have_ = 0;
  }
}

bool TlsStream::open_record(const uint8_t* body) {
  // Straight into the owner's memory when it wants at least the whole record's content there
  uint8_t* direct = nullptr;
  size_t room = 0;
  // (content and type byte, unless the peer pads: then the content is shorter still).
  const size_t inner = body_len_ - kRecordTag;
  const bool to_owner = owner_.recv_direct(direct, room) && room >= inner - 1;
  uint8_t* out = to_owner ? direct : plain_.get();
  size_t content = 0;
  ContentType type{};
  std::string err;
  if (!rx_.open(hdr_, body, body_len_, out, to_owner ? inner - 1 : kMaxRecordBody, scratch_.get(), content, type,
                err)) {
    fail("bad record: " + err, -EPROTO);
    return false;
  }
  ++counters_.records_in;
  switch (type) {
    case ContentType::ApplicationData:
      if (content == 0) return true;
      if (to_owner) owner_.on_receive_direct(content);
      else owner_.on_receive(out, content);
      return !closing_;
    case ContentType::Alert:
      if (content == 2 && out[1] == 0) {  // close_notify
        log::debug("{}: TLS: the peer closed the session (close_notify)", peer_);
        close();
        return false;
      }
      fail(content == 2 ? fmt::format("the peer sent alert {} (level {})", out[1], out[0]) : "a malformed alert",
           -EPROTO);
      return false;
    case ContentType::Handshake: {
      // A message opened into the owner's memory is copied out: that memory is the owner's.
      uint8_t* msg = out;
      if (to_owner) {
        msg = plain_.get();
        std::memcpy(msg, out, content);
      }
      return handle_handshake(msg, content);
    }
  }
  fail(fmt::format("a record of content type {}", uint8_t(type)), -EPROTO);
  return false;
}

bool TlsStream::handle_handshake(const uint8_t* p, size_t n) {
  while (n >= 4) {
    const uint8_t msg = p[0];
    const size_t len = size_t(p[1]) << 16 | size_t(p[2]) << 8 | p[3];
    if (len > n - 4) break;
    if (msg == 24 && len == 1) {  // KeyUpdate
      // The key changes after it: it ends its record (RFC 8446 5.1), so one record carries one.
      if (n != 5) {
        fail("a KeyUpdate that does not end its record (unexpected_message)", -EPROTO);
        return false;
      }
      if (p[4] > 1) {
        fail(fmt::format("a KeyUpdate with request_update {} (illegal_parameter)", p[4]), -EPROTO);
        return false;
      }
      std::string err;
      if (!rx_.update_key(err)) {
        fail("KeyUpdate: " + err, -EPROTO);
        return false;
      }
      ++counters_.key_updates_in;
      // update_requested: ours goes before our next record. However many the peer asks for
      // before then, one answers them all (RFC 8446 4.6.3), so asking costs the peer what it
      // costs us.
      if (p[4] == 1 && !owe_key_update()) return false;
    } else if (msg == 4 && !server_) {
      // NewSessionTicket: nothing is resumed, so the ticket is dropped.
    } else {
      fail(fmt::format("an unexpected handshake message (type {}) after the handshake", msg), -EPROTO);
      return false;
    }
    p += 4 + len;
    n -= 4 + len;
  }
  if (n != 0) {
    fail("a handshake message split across records after the handshake", -EPROTO);
    return false;
  }
  return true;
}

bool TlsStream::owe_key_update() {
  if (kernel_tx_) {
    // Our answer would need the kernel to take a new key (TLS_TX again: Linux 6.14 and later) and
    // a handshake record through a control message; no Linux peer asks for one.
    fail("the peer asked for a KeyUpdate, and the kernel seals this connection's records (kTLS): turn kTLS "
         "off for this peer (\"ktls\": false on the target's listener, --no-ktls on the host)",
         -EPROTO);
    return false;
  }
  kernel_tx_pending_ = false;  // the answer is sealed here, and so is everything after it
  key_update_owed_ = true;
  if (state_ == State::Established && !closing_) reactor_.defer(&flush_d_);
  return true;
}

bool TlsStream::seal_key_update() {
  const uint8_t msg[5] = {24, 0, 0, 1, 0};  // KeyUpdate, update_not_requested
  constexpr size_t sealed = RecordProtection::sealed_size(sizeof(msg));
  if (cur_ && kChunkBytes - cur_->len < sealed) push_chunk();
  if (!cur_) cur_ = take_chunk();  // within the chunk limit: none free, on_chunk_sent comes back
  if (!cur_) return true;
  uint8_t* at = cur_->buf.get() + cur_->len;
  std::string err;
  if (!tx_.seal_begin(at, sizeof(msg)) || !tx_.seal_update(msg, sizeof(msg), at + kRecordHeader) ||
      !tx_.seal_end(at + kRecordHeader + sizeof(msg), ContentType::Handshake) || !tx_.update_key(err)) {
    fail("sending a KeyUpdate failed " + err, -EPROTO);
    return false;
  }
  cur_->len += sealed;
  key_update_owed_ = false;
  ++counters_.key_updates_out;
  return true;
}

void TlsStream::on_closed(int err) {
  // Dones of bytes that never left fire now, in order, before the owner hears of the close.
  release_chunk_dones(UINT64_MAX);
  while (seg_count_) {
    reactor::SendDone* d = seg_[seg_head_].done;
    seg_head_ = (seg_head_ + 1) % seg_.size();
    --seg_count_;
    if (d) d->fn(d);
  }
  plain_queued_ = 0;
  lower_closed_ = true;
  closing_ = true;
  if (state_ != State::Closing) set_state(State::Closing);
  owner_.on_closed(close_err_ ? close_err_ : err);  // may free this
}

// ------------------------------------------------------------------ send

void TlsStream::send(const void* data, size_t len, reactor::SendDone* done) {
  if (kernel_tx_ && seg_count_ == 0 && !closing_) {
    lower_->send(data, len, done);  // the kernel seals it
    return;
  }
  if (seg_count_ == seg_.size()) {
    std::vector<Segment> bigger(seg_.size() * 2);
    for (size_t i = 0; i < seg_count_; ++i) bigger[i] = seg_[(seg_head_ + i) % seg_.size()];
    seg_.swap(bigger);
    seg_head_ = 0;
  }
  seg_[(seg_head_ + seg_count_) % seg_.size()] = {static_cast<const uint8_t*>(data), len, done};
  ++seg_count_;
  plain_queued_ += len;
  if (state_ == State::Established && !closing_) reactor_.defer(&flush_d_);
}

TlsStream::Chunk* TlsStream::take_chunk(bool force) {
  Chunk* c = free_;
  if (c) {
    free_ = c->next_free;
  } else if (chunks_.size() >= kMaxChunks && !force) {
    return nullptr;  // the flush goes on once a chunk comes back
  } else {
    auto owned = std::make_unique<Chunk>();
    owned->owner = this;
    owned->fn = on_chunk_sent;
    owned->buf = std::make_unique<uint8_t[]>(kChunkBytes);
    c = owned.get();
    chunks_.push_back(std::move(owned));
    ++counters_.chunks_allocated;
  }
  c->len = 0;
  c->seq = ++chunk_seq_;
  c->next_free = nullptr;
  ++chunks_out_;
  return c;
}

void TlsStream::push_chunk() {
  Chunk* c = cur_;
  if (!c || c->len == 0) return;
  cur_ = nullptr;
  if (lower_closed_) {
    on_chunk_sent(c);
    return;
  }
  lower_->send(c->buf.get(), c->len, c);
}

void TlsStream::on_chunk_sent(reactor::SendDone* d) {
  auto* c = static_cast<Chunk*>(d);
  TlsStream* self = c->owner;
  const uint64_t seq = c->seq;
  c->next_free = self->free_;
  self->free_ = c;
  --self->chunks_out_;
  self->chunks_done_ = std::max(self->chunks_done_, seq);
  self->release_chunk_dones(seq);
  // Records were waiting for a chunk, or kTLS for the handshake's last flight to be sent.
  if ((self->plain_queued_ || self->kernel_tx_pending_ || self->key_update_owed_) &&
      self->state_ == State::Established && !self->closing_)
    self->reactor_.defer(&self->flush_d_);
}

void TlsStream::release_chunk_dones(uint64_t upto_seq) {
  while (pend_count_ && pending_[pend_head_].chunk_seq <= upto_seq) {
    reactor::SendDone* d = pending_[pend_head_].done;
    pend_head_ = (pend_head_ + 1) % pending_.size();
    --pend_count_;
    d->fn(d);
  }
}

void TlsStream::start_kernel_tx() {
  kernel_tx_pending_ = false;
  // The first refusal that says the kernel has no kTLS at all is logged once; the process then
  // stops asking for every connection.
  static std::atomic<bool> unavailable{false};
  static std::atomic<bool> refusal_logged{false};
  if (unavailable.load(std::memory_order_relaxed) || tcp_->fd() < 0) return;
  KernelCryptoInfo info;
  if (!tx_.kernel_info(info)) {
    log::debug("{}: kTLS has no cipher for {}: records are sealed here", peer_, session_.cipher);
    return;
  }
  const KernelTxResult r = enable_kernel_tx(tcp_->fd(), info);
  if (r.ulp_attached) tcp_->disable_zero_copy();
  if (r.err) {
    if (r.err == -ENOENT && !r.ulp_attached) {
      if (!unavailable.exchange(true)) log::info("kTLS is not available: {}; TLS records are sealed in userspace", r.why);
    } else if (!refusal_logged.exchange(true)) {
      log::warn("{}: kTLS TX: {}; records are sealed in userspace (logged once)", peer_, r.why);
    } else {
      log::debug("{}: kTLS TX: {}; records are sealed in userspace", peer_, r.why);
    }
    return;
  }
  kernel_tx_ = true;
  session_.kernel_tx = true;
  log::debug("{}: TLS records out are sealed by the kernel (kTLS TX from record {})", peer_, tx_.sequence());
  tx_.forget();  // the kernel holds the key now
}

void TlsStream::flush() {
  if (state_ != State::Established || closing_) return;
  if (kernel_tx_pending_) {
    // What OpenSSL wrote must reach the socket before the kernel seals: on_chunk_sent comes back.
    if (chunks_out_ || cur_) return;
    start_kernel_tx();
  }
  if (kernel_tx_) {
    // Segments the owner queued while the handshake ended go to the socket in order.
    while (seg_count_) {
      const Segment seg = seg_[seg_head_];
      seg_head_ = (seg_head_ + 1) % seg_.size();
      --seg_count_;
      lower_->send(seg.data + head_off_, seg.len - head_off_, seg.done);
      head_off_ = 0;
    }
    plain_queued_ = 0;
    return;
  }
  // A KeyUpdate owed to the peer goes before the next record; what was sealed before it went
  // under the old key.
  if (key_update_owed_ && !seal_key_update()) return;
  while (plain_queued_ && !key_update_owed_ && !closing_) {
    // One record of up to 16 KiB, sealed from the queued segments straight into the chunk.
    const size_t content = std::min(plain_queued_, kMaxRecordPlaintext);
    const size_t sealed = RecordProtection::sealed_size(content);
    if (cur_ && kChunkBytes - cur_->len < sealed) push_chunk();
    if (!cur_) cur_ = take_chunk();
    if (!cur_) break;  // every chunk is out: on_chunk_sent flushes again
    uint8_t* at = cur_->buf.get() + cur_->len;
    if (!tx_.seal_begin(at, content)) {
      fail("sealing a record failed", -EPROTO);
      return;
    }
    uint8_t* out = at + kRecordHeader;
    size_t left = content;
    while (left) {
      Segment& s = seg_[seg_head_];
      const size_t k = std::min(left, s.len - head_off_);
      if (k && !tx_.seal_update(s.data + head_off_, k, out)) {
        fail("sealing a record failed", -EPROTO);
        return;
      }
      out += k;
      left -= k;
      head_off_ += k;
      if (head_off_ == s.len) {
        // Its done waits for the chunk carrying its last byte: this one.
        if (s.done) {
          if (pend_count_ == pending_.size()) {
            std::vector<PendingDone> bigger(pending_.size() * 2);
            for (size_t i = 0; i < pend_count_; ++i) bigger[i] = pending_[(pend_head_ + i) % pending_.size()];
            pending_.swap(bigger);
            pend_head_ = 0;
          }
          pending_[(pend_head_ + pend_count_) % pending_.size()] = {s.done, cur_->seq};
          ++pend_count_;
        }
        seg_head_ = (seg_head_ + 1) % seg_.size();
        --seg_count_;
        head_off_ = 0;
      }
    }
    if (!tx_.seal_end(out)) {
      fail("sealing a record failed", -EPROTO);
      return;
    }
    cur_->len += sealed;
    plain_queued_ -= content;
    ++counters_.records_out;
  }
  // Zero-length segments left at the head (nothing queued behind them) wait for the last chunk.
  while (seg_count_ && seg_[seg_head_].len == 0) {
    const Segment s = seg_[seg_head_];
    seg_head_ = (seg_head_ + 1) % seg_.size();
    --seg_count_;
    if (s.done) {
      if (pend_count_ == pending_.size()) {
        std::vector<PendingDone> bigger(pending_.size() * 2);
        for (size_t i = 0; i < pend_count_; ++i) bigger[i] = pending_[(pend_head_ + i) % pending_.size()];
        pending_.swap(bigger);
        pend_head_ = 0;
      }
      pending_[(pend_head_ + pend_count_) % pending_.size()] = {s.done, cur_ ? cur_->seq : chunk_seq_};
      ++pend_count_;
    }
  }
  push_chunk();
  release_chunk_dones(chunks_done_);
}

}  // namespace nvtcp::tls
