// SPDX-License-Identifier: Apache-2.0
// A TLS 1.3 ClientHello as the server's key choice needs it (RFC 8446, 4.1.2 and 4.2.11): the PSK
// identities offered, their binders, and the transcript a binder is computed over. OpenSSL checks
// the binder of the key we hand it; this lets the server first find which of its candidate keys
// the client holds (two derivations of one configured PSK are in the field), and so answer with
// the right one instead of failing the handshake.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "auth/secret_bytes.hpp"

namespace nvtcp::tls {

struct ClientHelloPsks {
  std::vector<std::string> identities;
  std::vector<std::vector<uint8_t>> binders;  // one per identity, in order
  // The ClientHello up to its binders list: what each binder's transcript hash covers.
  std::vector<uint8_t> truncated;
};

// Gathers the first handshake message from the TLS records at the start of a stream. Returns
// 1 with the message (header included) when it is whole, 0 when more bytes are needed, -1 with
// why when the bytes are not TLS handshake records (a host speaking NVMe/TCP in the clear, say).
int first_handshake_message(std::span<const uint8_t> records, std::vector<uint8_t>& msg, std::string& why);

// Parses a ClientHello (handshake header included): its pre_shared_key extension, which must
// be the last extension. False with why when the message is malformed; true with no identities
// when it offers no PSK.
bool parse_client_hello_psks(std::span<const uint8_t> msg, ClientHelloPsks& out, std::string& why);

// binder = HMAC(finished_key, Hash(truncated)) for an external PSK with hash 1 (SHA-256) or 2
// (SHA-384), RFC 8446 4.2.11.2 and 7.1 ("ext binder").
bool psk_binder(uint8_t hash, std::span<const uint8_t> psk, std::span<const uint8_t> truncated,
                std::vector<uint8_t>& out);

}  // namespace nvtcp::tls
