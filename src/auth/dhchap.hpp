// SPDX-License-Identifier: Apache-2.0
// The DH-HMAC-CHAP computations (NVMe Base Specification 2.0, 8.13.5.4), the same on the host
// and on the controller: the augmented challenge and the two responses. Input order and
// encodings as the Linux host and target use them (docs/security/interop-facts.md, 2.10-2.11).
#pragma once
#include <cstdint>
#include <string_view>

#include "auth/crypto.hpp"

namespace nvtcp::auth {

// Ca = HMAC_H(key = H(shared secret), msg = C) with a DH group; Ca = C with the NULL group
// (empty shared secret).
bool augmented_challenge(uint8_t hash, Bytes challenge, Bytes shared_secret, SecretBytes& out);

// What the response to a challenge binds: the (augmented) challenge, the sequence number and
// transaction that carried it, SC_C, and the two NQNs.
struct ResponseInput {
  Bytes challenge;           // Ca
  uint32_t seqnum = 0;       // S1 for the host's response, S2 for the controller's
  uint16_t transaction = 0;  // T_ID
  uint8_t sc_c = 0;
  std::string_view hostnqn;
  std::string_view subnqn;
};

// R1 = HMAC_H(Kt, Ca || LE32(S1) || LE16(T_ID) || SC_C || "HostHost" || NQNh || 00h || NQNs),
// keyed with the host secret transformed with the host NQN; out: hash_length(hash) bytes.
bool host_response(uint8_t hash, Bytes key, const ResponseInput& in, uint8_t* out);
// R2 = HMAC_H(Kt, Ca || LE32(S2) || LE16(T_ID) || SC_C || "Controller" || NQNs || 00h || NQNh),
// keyed with the controller secret transformed with the subsystem NQN.
bool controller_response(uint8_t hash, Bytes key, const ResponseInput& in, uint8_t* out);

// Compares two responses in time that does not depend on where they differ.
bool responses_equal(const uint8_t* a, const uint8_t* b, size_t n);

}  // namespace nvtcp::auth
