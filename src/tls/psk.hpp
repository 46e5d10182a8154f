// SPDX-License-Identifier: Apache-2.0
// The pre-shared keys a TLS stream's handshake works with (tls_stream.hpp, handshake_keys.hpp):
// a key as the handshake uses it, and a server's store of them.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "auth/secret_bytes.hpp"

namespace nvtcp::tls {

// One pre-shared key as the handshake uses it: the TLS PSK (already derived) and its hash
// (1: SHA-256, 2: SHA-384), named by its identity; a server's candidate says how it was derived.
struct Psk {
  std::string identity;
  uint8_t hash = 1;
  auth::SecretBytes key;
  const char* derivation = "";  // for the log, e.g. "RFC 8446 labels"
};

// The server's key store: the TLS PSKs an offered identity may stand for. More than one when
// implementations derive it differently (libnvme before 1.15 encoded the HKDF labels its own
// way): the stream keeps the one the client's binder proves.
class PskResolver {
 public:
  virtual ~PskResolver() = default;
  // False, with why, when the identity names no key this server holds.
  virtual bool resolve(std::string_view identity, std::vector<Psk>& candidates, std::string& why) const = 0;
};

}  // namespace nvtcp::tls
