// SPDX-License-Identifier: Apache-2.0
#include "tls/record.hpp"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>

#include "auth/crypto.hpp"
#include "tls/kernel_tls.hpp"

namespace nvtcp::tls {

namespace {
const EVP_CIPHER* cipher_of(uint16_t suite) {
  switch (suite) {
    case 0x1301: return EVP_aes_128_gcm();
    case 0x1302: return EVP_aes_256_gcm();
    case 0x1303: return EVP_chacha20_poly1305();
    default: return nullptr;
  }
}
}  // namespace

RecordProtection::RecordProtection() : ctx_(EVP_CIPHER_CTX_new()) {}
RecordProtection::~RecordProtection() { EVP_CIPHER_CTX_free(ctx_); }

bool RecordProtection::init(uint16_t suite, std::span<const uint8_t> secret, bool sealing, std::string& err) {
  suite_ = suite;
  hash_ = suite == 0x1302 ? 2 : 1;
  sealing_ = sealing;
  secret_ = auth::SecretBytes(secret);
  if (!ctx_ || !cipher_of(suite)) {
    err = fmt::format("cipher suite {:04x} is not one TLS for NVMe/TCP uses", suite);
    return false;
  }
  return derive(err);
}

bool RecordProtection::derive(std::string& err) {
  const EVP_CIPHER* c = cipher_of(suite_);
  auth::SecretBytes& key = key_;
  if (!auth::hkdf_expand_label(hash_, secret_.span(), "key", {}, size_t(EVP_CIPHER_get_key_length(c)), key) ||
      !auth::hkdf_expand_label(hash_, secret_.span(), "iv", {}, 12, iv_)) {
    err = "deriving the record keys failed";
    return false;
  }
  const int ok = sealing_ ? EVP_EncryptInit_ex(ctx_, c, nullptr, nullptr, nullptr)
                          : EVP_DecryptInit_ex(ctx_, c, nullptr, nullptr, nullptr);
  if (!ok || !EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_AEAD_SET_IVLEN, 12, nullptr) ||
      !(sealing_ ? EVP_EncryptInit_ex(ctx_, nullptr, nullptr, key.data(), nullptr)
                 : EVP_DecryptInit_ex(ctx_, nullptr, nullptr, key.data(), nullptr))) {
    err = "setting up the record cipher failed";
    return false;
  }
  seq_ = 0;
  return true;
}

bool RecordProtection::kernel_info(KernelCryptoInfo& out) const {
  return kernel_crypto_info(suite_, key_.span(), iv_.span(), seq_, out);
}

void RecordProtection::forget() {
  key_.clear();
  iv_.clear();
  secret_.clear();
  EVP_CIPHER_CTX_reset(ctx_);
}

bool RecordProtection::update_key(std::string& err) {
  auth::SecretBytes next;
  if (!auth::hkdf_expand_label(hash_, secret_.span(), "traffic upd", {}, auth::hash_length(hash_), next)) {
    err = "deriving the next traffic secret failed";
    return false;
  }
  secret_ = std::move(next);
  return derive(err);
}

void RecordProtection::nonce(uint8_t out[12]) const {
  for (int i = 0; i < 12; ++i) out[i] = iv_.data()[i];
  for (int i = 0; i < 8; ++i) out[11 - i] ^= uint8_t(seq_ >> (8 * i));
}

bool RecordProtection::seal_begin(uint8_t* out, size_t content_len) {
  const size_t body = content_len + 1 + kRecordTag;
  out[0] = uint8_t(ContentType::ApplicationData);
  out[1] = 0x03;
  out[2] = 0x03;
  out[3] = uint8_t(body >> 8);
  out[4] = uint8_t(body);
  uint8_t iv[12];
  nonce(iv);
  int n = 0;
  return EVP_EncryptInit_ex(ctx_, nullptr, nullptr, nullptr, iv) == 1 &&
         EVP_EncryptUpdate(ctx_, nullptr, &n, out, int(kRecordHeader)) == 1;
}

bool RecordProtection::seal_update(const uint8_t* in, size_t n, uint8_t* out) {
  int len = 0;
  return EVP_EncryptUpdate(ctx_, out, &len, in, int(n)) == 1 && size_t(len) == n;
}

bool RecordProtection::seal_end(uint8_t* out, ContentType type) {
  const uint8_t t = uint8_t(type);
  int len = 0;
  if (EVP_EncryptUpdate(ctx_, out, &len, &t, 1) != 1 || len != 1) return false;
  if (EVP_EncryptFinal_ex(ctx_, out + 1, &len) != 1) return false;
  if (EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_AEAD_GET_TAG, int(kRecordTag), out + 1) != 1) return false;
  ++seq_;
  return true;
}

bool RecordProtection::open(const uint8_t* header, const uint8_t* body, size_t len, uint8_t* out, size_t out_cap,
                            uint8_t* tail, size_t& content_len, ContentType& type, std::string& err) {
  if (len < kRecordTag + 1 || len > kMaxRecordBody) {
    err = fmt::format("a record of {} bytes", len);
    return false;
  }
  uint8_t iv[12];
  nonce(iv);
  const size_t inner = len - kRecordTag;
  const size_t first = std::min(inner, out_cap);
  int n = 0;
  if (EVP_DecryptInit_ex(ctx_, nullptr, nullptr, nullptr, iv) != 1 ||
      EVP_DecryptUpdate(ctx_, nullptr, &n, header, int(kRecordHeader)) != 1 ||
      (first && EVP_DecryptUpdate(ctx_, out, &n, body, int(first)) != 1) ||
      (inner > first && EVP_DecryptUpdate(ctx_, tail, &n, body + first, int(inner - first)) != 1) ||
      EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_AEAD_SET_TAG, int(kRecordTag), const_cast<uint8_t*>(body + inner)) != 1 ||
      EVP_DecryptFinal_ex(ctx_, tail, &n) != 1) {
    // The plaintext went out before the tag was checked: none of it may stay where it went (an
    // owner's request buffer, an application's read buffer), whatever the owner does next.
    if (first) OPENSSL_cleanse(out, first);
    if (inner > first) OPENSSL_cleanse(tail, inner - first);
    err = fmt::format("record {} does not authenticate (bad_record_mac)", seq_);
    return false;
  }
  ++seq_;
  // The content type is the last non-zero byte; zeros after it are padding.
  auto at = [&](size_t i) { return i < first ? out[i] : tail[i - first]; };
  size_t i = inner;
  while (i > 0 && at(i - 1) == 0) --i;
  if (i == 0) {
    err = "a record of padding only (unexpected_message)";
    return false;
  }
  type = ContentType(at(i - 1));
  content_len = i - 1;
  if (content_len > first) {
    err = "a record whose content does not fit where it was to go";
    return false;
  }
  return true;
}

}  // namespace nvtcp::tls
