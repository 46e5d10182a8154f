// SPDX-License-Identifier: Apache-2.0
// The kernel's TLS record layer (kTLS, Linux net/tls) for a connection whose handshake OpenSSL did
// in userspace: once TCP_ULP "tls" is on a socket and TLS_TX holds the sending direction's key,
// IV and next record number, every plain send() leaves the socket as TLS 1.3 records the kernel
// sealed, so the stream above hands its owner's segments to the socket as they are.
//
// Only the sending direction: with TLS_RX, Linux before 6.14 cannot take a peer's KeyUpdate (the
// socket fails with EBADMSG and a second TLS_RX is refused), and receiving needs a recvmsg with
// control messages for every non-data record. Received records stay with the userspace layer
// (record.hpp), which opens them into the owner's memory without a copy.
#pragma once
#include <linux/tls.h>
#include <sys/socket.h>

#include <cstdint>
#include <span>
#include <string>

namespace nvtcp::tls {

// The TLS_TX option's value for one of the suites NVMe/TCP uses: the kernel's crypto_info
// structure of that cipher, and its exact length (the kernel refuses any other).
struct KernelCryptoInfo {
  union {
    tls_crypto_info info;
    tls12_crypto_info_aes_gcm_128 aes128;
    tls12_crypto_info_aes_gcm_256 aes256;
    tls12_crypto_info_chacha20_poly1305 chacha;
  } u{};
  socklen_t len = 0;
  ~KernelCryptoInfo();  // wipes the key
};
static_assert(sizeof(tls12_crypto_info_aes_gcm_128) == 40, "Linux uapi: 4 + iv 8 + key 16 + salt 4 + rec_seq 8");
static_assert(sizeof(tls12_crypto_info_aes_gcm_256) == 56, "Linux uapi: 4 + iv 8 + key 32 + salt 4 + rec_seq 8");
static_assert(sizeof(tls12_crypto_info_chacha20_poly1305) == 56, "Linux uapi: 4 + iv 12 + key 32 + rec_seq 8");

// Fills out for suite (0x1301, 0x1302, 0x1303) from the direction's record key, its 12-byte IV
// (RFC 8446 7.3: for AES-GCM the first 4 bytes are the kernel's salt, the last 8 its IV) and the
// number of the next record (sent big-endian). False for a suite kTLS has no cipher for.
bool kernel_crypto_info(uint16_t suite, std::span<const uint8_t> key, std::span<const uint8_t> iv, uint64_t seq,
                        KernelCryptoInfo& out);

// What turning kTLS on for sending did.
struct KernelTxResult {
  int err = 0;               // 0: the kernel seals what is sent from now on; else -errno
  bool ulp_attached = false;  // the tls ULP is on the socket (zero-copy sends are refused from now on)
  std::string why;           // when err: what failed, in words an operator can act on
};
// Puts the tls ULP on a connected TCP socket and gives it the sending key. Call only with nothing
// of ours still to be written to the socket: the kernel seals what is sent after this call.
KernelTxResult enable_kernel_tx(int fd, const KernelCryptoInfo& info);

}  // namespace nvtcp::tls
