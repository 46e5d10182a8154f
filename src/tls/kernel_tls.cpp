// SPDX-License-Identifier: Apache-2.0
#include "tls/kernel_tls.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "auth/secret_bytes.hpp"

#ifndef SOL_TLS
#define SOL_TLS 282
#endif
#ifndef TCP_ULP
#define TCP_ULP 31
#endif

namespace nvtcp::tls {

KernelCryptoInfo::~KernelCryptoInfo() { auth::wipe(&u, sizeof(u)); }

namespace {
void put_seq(unsigned char* out, uint64_t seq) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(seq >> (56 - 8 * i));
}

// AES-GCM (128 and 256 alike): the first 4 bytes of the IV are the kernel's salt, the last 8 its IV.
template <class Info>
bool fill_gcm(Info& c, uint16_t cipher, std::span<const uint8_t> key, std::span<const uint8_t> iv, uint64_t seq,
              socklen_t& len) {
  if (key.size() != sizeof(c.key)) return false;
  c.info.version = TLS_1_3_VERSION;
  c.info.cipher_type = cipher;
  std::memcpy(c.salt, iv.data(), sizeof(c.salt));
  std::memcpy(c.iv, iv.data() + sizeof(c.salt), sizeof(c.iv));
  std::memcpy(c.key, key.data(), sizeof(c.key));
  put_seq(c.rec_seq, seq);
  len = sizeof(c);
  return true;
}
}  // namespace

bool kernel_crypto_info(uint16_t suite, std::span<const uint8_t> key, std::span<const uint8_t> iv, uint64_t seq,
                        KernelCryptoInfo& out) {
  out.u = {};
  out.len = 0;
  if (iv.size() != 12) return false;
  switch (suite) {
    case 0x1301: return fill_gcm(out.u.aes128, TLS_CIPHER_AES_GCM_128, key, iv, seq, out.len);
    case 0x1302: return fill_gcm(out.u.aes256, TLS_CIPHER_AES_GCM_256, key, iv, seq, out.len);
    case 0x1303: {
      auto& c = out.u.chacha;
      if (key.size() != sizeof(c.key)) return false;
      c.info.version = TLS_1_3_VERSION;
      c.info.cipher_type = TLS_CIPHER_CHACHA20_POLY1305;
      std::memcpy(c.iv, iv.data(), sizeof(c.iv));  // no salt: the whole IV
      std::memcpy(c.key, key.data(), sizeof(c.key));
      put_seq(c.rec_seq, seq);
      out.len = sizeof(c);
      return true;
    }
    default:
      return false;
  }
}

KernelTxResult enable_kernel_tx(int fd, const KernelCryptoInfo& info) {
  KernelTxResult r;
  if (info.len == 0) {
    r.err = -EINVAL;
    r.why = "no kernel cipher for this suite";
    return r;
  }
  static constexpr char kUlp[] = "tls";
  if (setsockopt(fd, IPPROTO_TCP, TCP_ULP, kUlp, sizeof(kUlp) - 1) < 0) {
    r.err = -errno;
    r.why = errno == ENOENT
                ? "the kernel has no tls module loaded (modprobe tls; an unprivileged process cannot load it)"
                : fmt::format("setsockopt(TCP_ULP, \"tls\"): {}", strerror(errno));
    return r;
  }
  r.ulp_attached = true;
  if (setsockopt(fd, SOL_TLS, TLS_TX, &info.u, info.len) < 0) {
    r.err = -errno;
    r.why = errno == ENOENT || errno == ENOPKG
                ? fmt::format("the kernel has no {} cipher for kTLS (its crypto modules are not loaded)",
                              info.u.info.cipher_type == TLS_CIPHER_CHACHA20_POLY1305 ? "ChaCha20-Poly1305" : "AES-GCM")
                : fmt::format("setsockopt(TLS_TX): {}", strerror(errno));
  }
  return r;
}

}  // namespace nvtcp::tls
