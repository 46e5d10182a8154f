// SPDX-License-Identifier: Apache-2.0
// The keys of one TlsStream's handshake (tls_stream.hpp), apart from its records: the PSK a
// client offers; the one a server chooses among a ClientHello's identities by their binders,
// with the work a stranger's hello may cause bounded; and the traffic secrets OpenSSL derives,
// which then key the stream's own record layer. OpenSSL's callbacks find it through the SSL's
// ex_data.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "auth/secret_bytes.hpp"
#include "tls/psk.hpp"
#include "tls/record.hpp"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_session_st SSL_SESSION;
typedef struct evp_md_st EVP_MD;

namespace nvtcp::tls {

class HandshakeKeys {
 public:
  // peer names the connection in log lines; binders_checked counts the PSK binders computed for
  // a ClientHello. Both are the stream's, which outlives its keys.
  HandshakeKeys(bool server, const std::string& peer, uint64_t& binders_checked)
      : server_(server), peer_(peer), binders_checked_(binders_checked) {}
  HandshakeKeys(const HandshakeKeys&) = delete;
  HandshakeKeys& operator=(const HandshakeKeys&) = delete;

  // OpenSSL's callbacks for a context of each side.
  static void install(SSL_CTX* c, bool server);
  // ssl's callbacks act on these keys.
  void attach(SSL* ssl);
  // A server: keys come from resolver (which must outlive the stream).
  void serve(const PskResolver& resolver) { resolver_ = &resolver; }
  // A client offering one key; ssl offers the suites of its hash.
  void offer(SSL* ssl, Psk psk);

  // Server: a ClientHello's bytes as they come, kept until the key is chosen. 1: the hello is
  // whole (client_hello()); 0: more to come; -1: not a hello we take (why).
  int gather_client_hello(const uint8_t* data, size_t len, std::string& why);
  const std::vector<uint8_t>& client_hello() const { return client_hello_; }
  void drop_client_hello() { client_hello_ = {}; }
  bool hello_seen() const { return hello_seen_; }
  // Why a server refused the ClientHello (empty if it did not), taken once.
  std::string take_refusal();

  // The key the handshake ended with (its identity and, on a server, how it was derived); the
  // key's bytes are wiped, since the traffic secrets are all the records need.
  const Psk& used() const { return server_ ? chosen_ : offered_; }
  void forget_keys();
  // Keys the records both ways with the traffic secrets OpenSSL derived, and wipes them.
  bool key_records(uint16_t suite, RecordProtection& tx, RecordProtection& rx, std::string& err);

 private:
  static int on_client_hello(SSL* ssl, int* alert, void* arg);
  static int on_find_psk(SSL* ssl, const unsigned char* id, size_t id_len, SSL_SESSION** sess);
  static int on_use_psk(SSL* ssl, const EVP_MD* md, const unsigned char** id, size_t* id_len, SSL_SESSION** sess);
  // The traffic secrets OpenSSL derives, as it reports them for key logging.
  static void on_keylog(const SSL* ssl, const char* line);

  const bool server_;
  const std::string& peer_;
  uint64_t& binders_checked_;
  // Server: the keys, the ClientHello's bytes (kept until the key is chosen) and the key chosen.
  const PskResolver* resolver_ = nullptr;
  std::vector<uint8_t> client_hello_;
  bool hello_seen_ = false;
  bool chosen_valid_ = false;
  Psk chosen_;
  // Client: the key offered.
  Psk offered_;
  std::string refusal_;
  auth::SecretBytes own_secret_, peer_secret_;
};

}  // namespace nvtcp::tls
