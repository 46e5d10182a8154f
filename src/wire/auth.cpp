// SPDX-License-Identifier: Apache-2.0
#include "wire/auth.hpp"

namespace nvtcp::wire {

const char* auth_failure_name(uint8_t reason) {
  switch (AuthFailureReason(reason)) {
    case AuthFailureReason::Failed: return "authentication failed";
    case AuthFailureReason::NotUsable: return "protocol not usable";
    case AuthFailureReason::ConcatMismatch: return "secure channel concatenation mismatch";
    case AuthFailureReason::HashUnusable: return "hash function not usable";
    case AuthFailureReason::DhGroupUnusable: return "DH group not usable";
    case AuthFailureReason::IncorrectPayload: return "incorrect payload";
    case AuthFailureReason::IncorrectMessage: return "incorrect protocol message";
  }
  return "unknown reason";
}

const char* dh_group_name(uint8_t id) {
  switch (DhGroup(id)) {
    case DhGroup::Null: return "null";
    case DhGroup::Ffdhe2048: return "ffdhe2048";
    case DhGroup::Ffdhe3072: return "ffdhe3072";
    case DhGroup::Ffdhe4096: return "ffdhe4096";
    case DhGroup::Ffdhe6144: return "ffdhe6144";
    case DhGroup::Ffdhe8192: return "ffdhe8192";
  }
  return "unknown group";
}

const char* dhchap_hash_name(uint8_t id) {
  switch (DhchapHash(id)) {
    case DhchapHash::Sha256: return "hmac(sha256)";
    case DhchapHash::Sha384: return "hmac(sha384)";
    case DhchapHash::Sha512: return "hmac(sha512)";
  }
  return "unknown hash";
}

}  // namespace nvtcp::wire
