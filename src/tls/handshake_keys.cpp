// SPDX-License-Identifier: Apache-2.0
#include "tls/handshake_keys.hpp"

#include <openssl/crypto.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <string_view>

#include <fmt/format.h>

#include "tls/client_hello.hpp"
#include "util/log.hpp"

namespace nvtcp::tls {

namespace {

// The suites a PSK of each hash may end on. TLS_CHACHA20_POLY1305_SHA256 goes with SHA-256
// PSKs because the Linux side's GnuTLS may pick it.
const char* suites_for(uint8_t hash) {
  return hash == 2 ? "TLS_AES_256_GCM_SHA384" : "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256";
}

// Holds a ClientHello up to this size while the key is chosen; TLS allows more, a PSK client
// never sends it.
constexpr size_t kMaxHelloCapture = 64 * 1024;

int ex_index() {
  static const int i = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return i;
}

// An SSL_SESSION that carries an external PSK for TLS 1.3.
SSL_SESSION* psk_session(SSL* ssl, const Psk& psk) {
  const unsigned char id[2] = {0x13, uint8_t(psk.hash == 2 ? 0x02 : 0x01)};
  const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, id);
  SSL_SESSION* s = SSL_SESSION_new();
  if (!s || !cipher || !SSL_SESSION_set1_master_key(s, psk.key.data(), psk.key.size()) ||
      !SSL_SESSION_set_cipher(s, cipher) || !SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION)) {
    SSL_SESSION_free(s);
    return nullptr;
  }
  return s;
}

}  // namespace

void HandshakeKeys::install(SSL_CTX* c, bool server) {
  SSL_CTX_set_keylog_callback(c, on_keylog);
  if (server) {
    SSL_CTX_set_client_hello_cb(c, on_client_hello, nullptr);
    SSL_CTX_set_psk_find_session_callback(c, on_find_psk);
  } else {
    SSL_CTX_set_psk_use_session_callback(c, on_use_psk);
  }
}

void HandshakeKeys::attach(SSL* ssl) { SSL_set_ex_data(ssl, ex_index(), this); }

void HandshakeKeys::offer(SSL* ssl, Psk psk) {
  if (ssl) SSL_set_ciphersuites(ssl, suites_for(psk.hash));
  offered_ = std::move(psk);
}

int HandshakeKeys::gather_client_hello(const uint8_t* data, size_t len, std::string& why) {
  if (client_hello_.size() + len > kMaxHelloCapture) {
    why = "a ClientHello larger than 64 KiB";
    return -1;
  }
  client_hello_.insert(client_hello_.end(), data, data + len);
  std::vector<uint8_t> msg;
  return first_handshake_message(client_hello_, msg, why);
}

std::string HandshakeKeys::take_refusal() {
  std::string why = std::move(refusal_);
  refusal_.clear();
  return why;
}

void HandshakeKeys::forget_keys() {
  chosen_.key.clear();
  offered_.key.clear();
}

int HandshakeKeys::on_client_hello(SSL* ssl, int* alert, void*) {
  auto* self = static_cast<HandshakeKeys*>(SSL_get_ex_data(ssl, ex_index()));
  if (self->chosen_valid_) return SSL_CLIENT_HELLO_SUCCESS;  // a second ClientHello after a retry request
  std::vector<uint8_t> msg;
  std::string why;
  ClientHelloPsks psks;
  if (first_handshake_message(self->client_hello_, msg, why) != 1 || !parse_client_hello_psks(msg, psks, why)) {
    self->refusal_ = why.empty() ? "the ClientHello could not be read" : why;
    *alert = SSL_AD_DECODE_ERROR;
    return SSL_CLIENT_HELLO_ERROR;
  }
  self->hello_seen_ = true;
  if (psks.identities.empty()) {
    self->refusal_ = "the ClientHello offers no pre-shared key (NVMe/TCP TLS is PSK only)";
    *alert = SSL_AD_HANDSHAKE_FAILURE;
    return SSL_CLIENT_HELLO_ERROR;
  }
  // Before any key is proven, a stranger's hello may cost the reactor a few binders, not one per
  // identity it lists: a hello of hundreds of copies of a known (sniffable) identity with junk
  // binders would otherwise hash the whole hello for each. The server checks the binder of the
  // identity it selects (RFC 8446 4.2.11); nvtcp tries the first kMaxIdentitiesTried distinct
  // identities it knows (a host may offer both identity versions of one key) and no more.
  constexpr size_t kMaxIdentitiesTried = 2;
  // Looking an identity up may read a key file (the target reads a PSK named in its keyring at
  // each handshake): each distinct identity is looked up once, and no more than
  // kMaxIdentitiesLookedUp of them, whether they name keys or not.
  constexpr size_t kMaxIdentitiesLookedUp = 8;
  constexpr size_t kMaxReasons = 4;
  size_t reasons_given = 0, reasons_left_out = 0;
  std::vector<std::string_view> tried, looked_up;
  bool lookups_capped = false;
  std::string reasons;
  auto reason = [&](const std::string& identity, const std::string& refusal) {
    if (reasons_given == kMaxReasons) {
      ++reasons_left_out;
      return;
    }
    ++reasons_given;
    reasons += fmt::format("{}\"{}\": {}", reasons.empty() ? "" : "; ", identity.substr(0, 256), refusal);
  };
  for (size_t i = 0; i < psks.identities.size() && tried.size() < kMaxIdentitiesTried; ++i) {
    std::vector<Psk> candidates;
    std::string none;
    const std::string& identity = psks.identities[i];
    if (std::find(looked_up.begin(), looked_up.end(), identity) != looked_up.end()) continue;  // answered
    if ((lookups_capped = looked_up.size() == kMaxIdentitiesLookedUp)) break;
    looked_up.push_back(identity);
    if (!self->resolver_->resolve(identity, candidates, none)) {
      reason(identity, none);
      continue;
    }
    tried.push_back(identity);
    // The binder's length says which hash the client runs the handshake with. It is the
    // identity's, except that tlshd (ktls-utils 1.0, GnuTLS) binds every PSK with SHA-256: a
    // SHA-384 PSK then keys a SHA-256 handshake, and the session ends on a SHA-256 suite.
    const size_t binder_len = psks.binders[i].size();
    const uint8_t handshake_hash = binder_len == 48 ? 2 : binder_len == 32 ? 1 : 0;
    for (Psk& c : candidates) {
      if (handshake_hash != c.hash && !(c.hash == 2 && handshake_hash == 1)) continue;
      ++self->binders_checked_;
      std::vector<uint8_t> binder;
      if (psk_binder(handshake_hash, c.key.span(), psks.truncated, binder) && binder.size() == binder_len &&
          CRYPTO_memcmp(binder.data(), psks.binders[i].data(), binder.size()) == 0) {
        if (handshake_hash != c.hash)
          log::debug("{}: \"{}\": a SHA-384 PSK bound with SHA-256: the session takes a SHA-256 suite",
                     self->peer_, identity);
        self->chosen_ = std::move(c);
        self->chosen_.identity = identity;
        self->chosen_.hash = handshake_hash;
        self->chosen_valid_ = true;
        SSL_set_ciphersuites(ssl, suites_for(self->chosen_.hash));
        return SSL_CLIENT_HELLO_SUCCESS;
      }
    }
    reason(identity, "the host's binder matches no key configured for it (a wrong PSK?)");
  }
  if (tried.size() == kMaxIdentitiesTried)
    reasons += fmt::format("; only the first {} identities known here are checked", kMaxIdentitiesTried);
  if (lookups_capped)
    reasons += fmt::format("; only the first {} distinct identities are looked up", kMaxIdentitiesLookedUp);
  if (reasons_left_out) reasons += fmt::format("; {} more identities refused", reasons_left_out);
  self->refusal_ = "no usable pre-shared key: " + reasons;
  *alert = SSL_AD_HANDSHAKE_FAILURE;
  return SSL_CLIENT_HELLO_ERROR;
}

int HandshakeKeys::on_find_psk(SSL* ssl, const unsigned char* id, size_t id_len, SSL_SESSION** sess) {
  auto* self = static_cast<HandshakeKeys*>(SSL_get_ex_data(ssl, ex_index()));
  *sess = nullptr;
  if (!self->chosen_valid_ || std::string_view(reinterpret_cast<const char*>(id), id_len) != self->chosen_.identity)
    return 1;  // not the key chosen: OpenSSL goes on to the next identity
  *sess = psk_session(ssl, self->chosen_);
  return *sess ? 1 : 0;
}

int HandshakeKeys::on_use_psk(SSL* ssl, const EVP_MD* md, const unsigned char** id, size_t* id_len,
                          SSL_SESSION** sess) {
  auto* self = static_cast<HandshakeKeys*>(SSL_get_ex_data(ssl, ex_index()));
  *sess = nullptr;
  SSL_SESSION* s = psk_session(ssl, self->offered_);
  if (!s) return 0;
  if (md && md != SSL_CIPHER_get_handshake_digest(SSL_SESSION_get0_cipher(s))) {
    SSL_SESSION_free(s);  // a retry request chose a suite of another hash: this key does not fit
    return 1;
  }
  *sess = s;
  *id = reinterpret_cast<const unsigned char*>(self->offered_.identity.data());
  *id_len = self->offered_.identity.size();
  return 1;
}

void HandshakeKeys::on_keylog(const SSL* ssl, const char* line) {
  auto* self = static_cast<HandshakeKeys*>(SSL_get_ex_data(ssl, ex_index()));
  // "<LABEL> <client random, hex> <secret, hex>"
  const std::string_view l(line);
  const bool client = l.rfind("CLIENT_TRAFFIC_SECRET_0 ", 0) == 0;
  if (!self || (!client && l.rfind("SERVER_TRAFFIC_SECRET_0 ", 0) != 0)) return;
  const size_t at = l.rfind(' ');
  if (at == std::string_view::npos) return;
  const std::string_view hex = l.substr(at + 1);
  auth::SecretBytes secret(hex.size() / 2);
  for (size_t i = 0; i < secret.size(); ++i) {
    auto nib = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
    secret.data()[i] = uint8_t(nib(hex[2 * i]) << 4 | nib(hex[2 * i + 1]));
  }
  ((client == !self->server_) ? self->own_secret_ : self->peer_secret_) = std::move(secret);
}

bool HandshakeKeys::key_records(uint16_t suite, RecordProtection& tx, RecordProtection& rx, std::string& err) {
  if (own_secret_.empty() || peer_secret_.empty()) err = "OpenSSL gave no traffic secrets";
  const bool ok = err.empty() && tx.init(suite, own_secret_.span(), true, err) &&
                  rx.init(suite, peer_secret_.span(), false, err);
  own_secret_.clear();
  peer_secret_.clear();
  return ok;
}

}  // namespace nvtcp::tls
