// SPDX-License-Identifier: Apache-2.0
#include "auth/dhchap.hpp"

#include <openssl/crypto.h>

namespace nvtcp::auth {

bool augmented_challenge(uint8_t hash, Bytes challenge, Bytes shared_secret, SecretBytes& out) {
  const uint32_t hl = hash_length(hash);
  if (!hl) return false;
  if (shared_secret.empty()) {
    out = SecretBytes(challenge);
    return true;
  }
  SecretBytes hashed(hl);
  out.resize(hl);
  if (!digest(hash, {shared_secret}, hashed.data()) || !hmac(hash, hashed.span(), {challenge}, out.data())) {
    out.clear();
    return false;
  }
  return true;
}

namespace {

bool response(uint8_t hash, Bytes key, const ResponseInput& in, std::string_view role, std::string_view first_nqn,
              std::string_view second_nqn, uint8_t* out) {
  const uint8_t seq[4] = {uint8_t(in.seqnum), uint8_t(in.seqnum >> 8), uint8_t(in.seqnum >> 16),
                          uint8_t(in.seqnum >> 24)};
  const uint8_t tid[2] = {uint8_t(in.transaction), uint8_t(in.transaction >> 8)};
  const uint8_t scc[1] = {in.sc_c};
  const uint8_t zero[1] = {0};
  return hmac(hash, key,
              {in.challenge, Bytes(seq), Bytes(tid), Bytes(scc), as_bytes(role), as_bytes(first_nqn), Bytes(zero),
               as_bytes(second_nqn)},
              out);
}

}  // namespace

bool host_response(uint8_t hash, Bytes key, const ResponseInput& in, uint8_t* out) {
  return response(hash, key, in, "HostHost", in.hostnqn, in.subnqn, out);
}

bool controller_response(uint8_t hash, Bytes key, const ResponseInput& in, uint8_t* out) {
  return response(hash, key, in, "Controller", in.subnqn, in.hostnqn, out);
}

bool responses_equal(const uint8_t* a, const uint8_t* b, size_t n) { return CRYPTO_memcmp(a, b, n) == 0; }

}  // namespace nvtcp::auth
