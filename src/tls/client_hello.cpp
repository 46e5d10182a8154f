// SPDX-License-Identifier: Apache-2.0
#include "tls/client_hello.hpp"

#include <fmt/format.h>

#include "auth/crypto.hpp"

namespace nvtcp::tls {

namespace {

constexpr uint8_t kHandshakeRecord = 22;
constexpr uint8_t kClientHello = 1;
constexpr uint16_t kPreSharedKeyExt = 41;
// A ClientHello larger than this is not one a PSK client sends (no certificates are involved).
constexpr size_t kMaxClientHello = 64 * 1024;

// A bounds-checked reader over a message.
struct Reader {
  std::span<const uint8_t> b;
  size_t off = 0;
  bool ok = true;
  size_t left() const { return ok ? b.size() - off : 0; }
  uint32_t n(size_t bytes) {
    if (!ok || left() < bytes) {
      ok = false;
      return 0;
    }
    uint32_t v = 0;
    for (size_t i = 0; i < bytes; ++i) v = (v << 8) | b[off++];
    return v;
  }
  std::span<const uint8_t> take(size_t len) {
    if (!ok || left() < len) {
      ok = false;
      return {};
    }
    auto s = b.subspan(off, len);
    off += len;
    return s;
  }
};

}  // namespace

int first_handshake_message(std::span<const uint8_t> records, std::vector<uint8_t>& msg, std::string& why) {
  msg.clear();
  size_t off = 0;
  while (off + 5 <= records.size()) {
    const uint8_t type = records[off];
    const uint16_t version = uint16_t(records[off + 1] << 8 | records[off + 2]);
    const size_t len = size_t(records[off + 3]) << 8 | records[off + 4];
    if (type != kHandshakeRecord || (version >> 8) != 3) {
      why = off == 0 ? fmt::format("the peer sent no TLS handshake record (first bytes {:02x} {:02x}{})", records[0],
                                   records[1], records[0] == 0 ? ": an NVMe/TCP ICReq in the clear?" : "")
                     : "a record that is not a handshake record inside the ClientHello";
      return -1;
    }
    if (len == 0 || len > 16384 + 256) {
      why = fmt::format("a TLS record of {} bytes in the ClientHello", len);
      return -1;
    }
    if (off + 5 + len > records.size()) break;
    msg.insert(msg.end(), records.begin() + off + 5, records.begin() + off + 5 + len);
    off += 5 + len;
    if (msg.size() >= 4) {
      const size_t want = 4 + (size_t(msg[1]) << 16 | size_t(msg[2]) << 8 | msg[3]);
      if (want > kMaxClientHello) {
        why = fmt::format("a first handshake message of {} bytes", want);
        return -1;
      }
      if (msg.size() >= want) {
        msg.resize(want);
        return 1;
      }
    }
  }
  if (off < records.size() && records[off] != kHandshakeRecord) {
    why = fmt::format("the peer sent no TLS handshake record (first byte {:02x}{})", records[off],
                      records[off] == 0 ? ": an NVMe/TCP ICReq in the clear?" : "");
    return -1;
  }
  return 0;
}

bool parse_client_hello_psks(std::span<const uint8_t> msg, ClientHelloPsks& out, std::string& why) {
  out = {};
  Reader r{msg};
  if (r.n(1) != kClientHello) {
    why = "the first handshake message is not a ClientHello";
    return false;
  }
  const size_t body = r.n(3);
  if (!r.ok || body != r.left()) {
    why = "a ClientHello whose length does not match its record";
    return false;
  }
  r.n(2);                 // legacy_version
  r.take(32);             // random
  r.take(r.n(1));         // legacy_session_id
  r.take(r.n(2));         // cipher_suites
  r.take(r.n(1));         // legacy_compression_methods
  if (!r.ok) {
    why = "a truncated ClientHello";
    return false;
  }
  if (r.left() == 0) return true;  // no extensions: no PSK
  const size_t ext_len = r.n(2);
  if (!r.ok || ext_len != r.left()) {
    why = "a ClientHello whose extensions do not fill it";
    return false;
  }
  while (r.left() > 0) {
    const uint16_t type = uint16_t(r.n(2));
    const size_t len = r.n(2);
    const size_t start = r.off;
    auto ext = r.take(len);
    if (!r.ok) {
      why = "a truncated ClientHello extension";
      return false;
    }
    if (type != kPreSharedKeyExt) continue;
    if (r.left() != 0) {
      why = "a pre_shared_key extension that is not the last one";
      return false;
    }
    Reader e{ext};
    auto ids = e.take(e.n(2));
    const size_t binders_at = e.off;
    auto binders = e.take(e.n(2));
    if (!e.ok || e.left() != 0 || ids.empty() || binders.empty()) {
      why = "a malformed pre_shared_key extension";
      return false;
    }
    Reader ir{ids};
    while (ir.left() > 0) {
      auto id = ir.take(ir.n(2));
      ir.n(4);  // obfuscated_ticket_age
      if (!ir.ok || id.empty()) {
        why = "a malformed PSK identity list";
        return false;
      }
      out.identities.emplace_back(id.begin(), id.end());
    }
    Reader br{binders};
    while (br.left() > 0) {
      auto b = br.take(br.n(1));
      if (!br.ok || b.size() < 32) {
        why = "a malformed PSK binder list";
        return false;
      }
      out.binders.emplace_back(b.begin(), b.end());
    }
    if (out.binders.size() != out.identities.size()) {
      why = "a PSK binder list whose length is not the identity list's";
      return false;
    }
    const size_t cut = start + binders_at;
    out.truncated.assign(msg.begin(), msg.begin() + cut);
    return true;
  }
  return true;
}

bool psk_binder(uint8_t hash, std::span<const uint8_t> psk, std::span<const uint8_t> truncated,
                std::vector<uint8_t>& out) {
  const uint32_t len = auth::hash_length(hash);
  if (hash < 1 || hash > 2) return false;
  auth::SecretBytes early, binder_key, finished;
  uint8_t empty_hash[64], transcript[64];
  if (!auth::hkdf_extract(hash, psk, early) || !auth::digest(hash, {}, empty_hash) ||
      !auth::hkdf_expand_label(hash, early.span(), "ext binder", {empty_hash, len}, len, binder_key) ||
      !auth::hkdf_expand_label(hash, binder_key.span(), "finished", {}, len, finished) ||
      !auth::digest(hash, {truncated}, transcript))
    return false;
  out.resize(len);
  return auth::hmac(hash, finished.span(), {{transcript, len}}, out.data());
}

}  // namespace nvtcp::tls
