// SPDX-License-Identifier: Apache-2.0
// TLS 1.3 record protection (RFC 8446, 5.2-5.3 and 7.3) for one direction of a connection, after
// OpenSSL has done the handshake: what the kernel's kTLS does, in userspace. OpenSSL 3.0's own
// record layer allocates twice per record and copies every byte through its buffers and the BIO;
// this one seals straight from the owner's segments into the send chunk and opens into the
// owner's memory, with one cipher context per direction and no allocation per record.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "auth/secret_bytes.hpp"

typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;

namespace nvtcp::tls {

struct KernelCryptoInfo;

inline constexpr size_t kRecordHeader = 5;
inline constexpr size_t kRecordTag = 16;
inline constexpr size_t kMaxPlaintext = 16384;
// The most a record's body may hold: plaintext, content type, padding and tag (RFC 8446, 5.2).
inline constexpr size_t kMaxRecordBody = kMaxPlaintext + 256;

enum class ContentType : uint8_t { Alert = 21, Handshake = 22, ApplicationData = 23 };

class RecordProtection {
 public:
  RecordProtection();
  ~RecordProtection();
  RecordProtection(const RecordProtection&) = delete;
  RecordProtection& operator=(const RecordProtection&) = delete;

  // suite: the TLS cipher suite (0x1301 TLS_AES_128_GCM_SHA256, 0x1302 TLS_AES_256_GCM_SHA384,
  // 0x1303 TLS_CHACHA20_POLY1305_SHA256); secret: the traffic secret of this direction.
  bool init(uint16_t suite, std::span<const uint8_t> secret, bool sealing, std::string& err);
  // KeyUpdate: the next traffic secret, its key and IV, and the sequence number back to 0.
  bool update_key(std::string& err);

  // Sealing one record of content_len bytes: begin writes the header at out (kRecordHeader
  // bytes); update encrypts the content, in as many pieces as it comes in, to where each piece
  // goes; end writes the content type (application data, or a handshake message such as a
  // KeyUpdate) and the tag (1 + kRecordTag bytes).
  bool seal_begin(uint8_t* out, size_t content_len);
  bool seal_update(const uint8_t* in, size_t n, uint8_t* out);
  bool seal_end(uint8_t* out, ContentType type = ContentType::ApplicationData);
  static constexpr size_t sealed_size(size_t content_len) { return kRecordHeader + content_len + 1 + kRecordTag; }

  // Opening one record: header (kRecordHeader bytes) and body (len bytes, tag last). The inner
  // plaintext (body less the tag: content, type, padding) goes to out for its first out_cap bytes
  // and to tail for the rest (so content can land in the owner's memory, and the type byte after
  // it elsewhere); tail must hold kMaxRecordBody bytes. False when the tag does not verify or the
  // record is malformed; else content_len and type say what it held.
  bool open(const uint8_t* header, const uint8_t* body, size_t len, uint8_t* out, size_t out_cap, uint8_t* tail,
            size_t& content_len, ContentType& type, std::string& err);

  uint64_t sequence() const { return seq_; }
  // This direction's suite, record key, IV and next record number as the kernel's kTLS takes
  // them (kernel_tls.hpp); false for a suite kTLS has no cipher for.
  bool kernel_info(KernelCryptoInfo& out) const;
  // Wipes the keys (the kernel holds them now).
  void forget();

 private:
  bool derive(std::string& err);
  void nonce(uint8_t out[12]) const;

  EVP_CIPHER_CTX* ctx_ = nullptr;
  uint16_t suite_ = 0;
  uint8_t hash_ = 1;
  bool sealing_ = false;
  auth::SecretBytes secret_;
  auth::SecretBytes key_;
  auth::SecretBytes iv_;
  uint64_t seq_ = 0;
};

}  // namespace nvtcp::tls
