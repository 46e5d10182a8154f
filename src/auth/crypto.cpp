// SPDX-License-Identifier: Apache-2.0
#include "auth/crypto.hpp"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/dh.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/param_build.h>
#include <openssl/rand.h>

#include <cstring>

namespace nvtcp::auth {

void wipe(void* p, size_t n) { OPENSSL_cleanse(p, n); }

namespace {

const char* digest_name(uint8_t hash) {
  switch (hash) {
    case 1: return "SHA256";
    case 2: return "SHA384";
    case 3: return "SHA512";
  }
  return nullptr;
}

const char* group_name(wire::DhGroup g) {
  switch (g) {
    case wire::DhGroup::Ffdhe2048: return "ffdhe2048";
    case wire::DhGroup::Ffdhe3072: return "ffdhe3072";
    case wire::DhGroup::Ffdhe4096: return "ffdhe4096";
    case wire::DhGroup::Ffdhe6144: return "ffdhe6144";
    case wire::DhGroup::Ffdhe8192: return "ffdhe8192";
    case wire::DhGroup::Null: break;
  }
  return nullptr;
}

// OpenSSL's reason for the last failure, for a log line (never key material).
std::string openssl_error(const std::string& what) {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (!e) return what;
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return what + ": " + buf;
}

template <class T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const { F(p); }
};
using MdCtx = std::unique_ptr<EVP_MD_CTX, Deleter<EVP_MD_CTX, EVP_MD_CTX_free>>;
using Mac = std::unique_ptr<EVP_MAC, Deleter<EVP_MAC, EVP_MAC_free>>;
using MacCtx = std::unique_ptr<EVP_MAC_CTX, Deleter<EVP_MAC_CTX, EVP_MAC_CTX_free>>;
using Kdf = std::unique_ptr<EVP_KDF, Deleter<EVP_KDF, EVP_KDF_free>>;
using KdfCtx = std::unique_ptr<EVP_KDF_CTX, Deleter<EVP_KDF_CTX, EVP_KDF_CTX_free>>;
using Pkey = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using PkeyCtx = std::unique_ptr<EVP_PKEY_CTX, Deleter<EVP_PKEY_CTX, EVP_PKEY_CTX_free>>;
using Bn = std::unique_ptr<BIGNUM, Deleter<BIGNUM, BN_clear_free>>;
using ParamBld = std::unique_ptr<OSSL_PARAM_BLD, Deleter<OSSL_PARAM_BLD, OSSL_PARAM_BLD_free>>;
using Params = std::unique_ptr<OSSL_PARAM, Deleter<OSSL_PARAM, OSSL_PARAM_free>>;

bool hkdf(uint8_t hash, int mode, Bytes key, Bytes info, uint8_t* out, size_t len) {
  const char* md = digest_name(hash);
  if (!md) return false;
  Kdf kdf(EVP_KDF_fetch(nullptr, "HKDF", nullptr));
  if (!kdf) return false;
  KdfCtx ctx(EVP_KDF_CTX_new(kdf.get()));
  if (!ctx) return false;
  OSSL_PARAM params[5];
  int n = 0;
  params[n++] = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, const_cast<char*>(md), 0);
  params[n++] = OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode);
  params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<uint8_t*>(key.data()), key.size());
  if (mode == EVP_KDF_HKDF_MODE_EXPAND_ONLY)
    params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, const_cast<uint8_t*>(info.data()), info.size());
  params[n] = OSSL_PARAM_construct_end();
  return EVP_KDF_derive(ctx.get(), out, len, params) == 1;
}

// A DH key of the named group from its values: a key pair (priv set) or a peer's public value.
Pkey dh_key_from(const char* group, const BIGNUM* priv, const BIGNUM* pub) {
  ParamBld bld(OSSL_PARAM_BLD_new());
  if (!bld || OSSL_PARAM_BLD_push_utf8_string(bld.get(), OSSL_PKEY_PARAM_GROUP_NAME, group, 0) != 1 ||
      (priv && OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_PRIV_KEY, priv) != 1) ||
      OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_PUB_KEY, pub) != 1)
    return nullptr;
  Params ps(OSSL_PARAM_BLD_to_param(bld.get()));
  PkeyCtx ctx(EVP_PKEY_CTX_new_from_name(nullptr, "DH", nullptr));
  EVP_PKEY* k = nullptr;
  if (!ps || !ctx || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
      EVP_PKEY_fromdata(ctx.get(), &k, priv ? EVP_PKEY_KEYPAIR : EVP_PKEY_PUBLIC_KEY, ps.get()) != 1)
    return nullptr;
  return Pkey(k);
}

}  // namespace

uint32_t hash_length(uint8_t hash) { return wire::dhchap_hash_length(wire::DhchapHash(hash)); }

bool digest(uint8_t hash, std::initializer_list<Bytes> parts, uint8_t* out) {
  const char* name = digest_name(hash);
  if (!name) return false;
  MdCtx ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex2(ctx.get(), EVP_get_digestbyname(name), nullptr) != 1) return false;
  for (Bytes p : parts)
    if (!p.empty() && EVP_DigestUpdate(ctx.get(), p.data(), p.size()) != 1) return false;
  unsigned int n = 0;
  return EVP_DigestFinal_ex(ctx.get(), out, &n) == 1 && n == hash_length(hash);
}

bool hmac(uint8_t hash, Bytes key, std::initializer_list<Bytes> parts, uint8_t* out) {
  const char* name = digest_name(hash);
  if (!name || key.empty()) return false;
  Mac mac(EVP_MAC_fetch(nullptr, "HMAC", nullptr));
  if (!mac) return false;
  MacCtx ctx(EVP_MAC_CTX_new(mac.get()));
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, const_cast<char*>(name), 0),
                         OSSL_PARAM_construct_end()};
  if (!ctx || EVP_MAC_init(ctx.get(), key.data(), key.size(), params) != 1) return false;
  for (Bytes p : parts)
    if (!p.empty() && EVP_MAC_update(ctx.get(), p.data(), p.size()) != 1) return false;
  size_t n = 0;
  return EVP_MAC_final(ctx.get(), out, &n, hash_length(hash)) == 1 && n == hash_length(hash);
}

bool hkdf_extract(uint8_t hash, Bytes ikm, SecretBytes& prk) {
  prk.resize(hash_length(hash));
  if (prk.empty() || !hkdf(hash, EVP_KDF_HKDF_MODE_EXTRACT_ONLY, ikm, {}, prk.data(), prk.size())) {
    prk.clear();
    return false;
  }
  return true;
}

bool hkdf_expand(uint8_t hash, Bytes prk, Bytes info, size_t len, SecretBytes& out) {
  out.resize(len);
  if (len == 0 || !hkdf(hash, EVP_KDF_HKDF_MODE_EXPAND_ONLY, prk, info, out.data(), len)) {
    out.clear();
    return false;
  }
  return true;
}

bool hkdf_expand_label(uint8_t hash, Bytes prk, std::string_view label, Bytes context, size_t len,
                       SecretBytes& out) {
  constexpr std::string_view kPrefix = "tls13 ";
  if (len > 0xFFFF || kPrefix.size() + label.size() > 255 || context.size() > 255) return false;
  std::vector<uint8_t> info;
  info.reserve(4 + kPrefix.size() + label.size() + context.size());
  info.push_back(uint8_t(len >> 8));
  info.push_back(uint8_t(len));
  info.push_back(uint8_t(kPrefix.size() + label.size()));
  info.insert(info.end(), kPrefix.begin(), kPrefix.end());
  info.insert(info.end(), label.begin(), label.end());
  info.push_back(uint8_t(context.size()));
  info.insert(info.end(), context.begin(), context.end());
  return hkdf_expand(hash, prk, info, len, out);
}

std::string base64_encode(Bytes b) {
  std::string s(4 * ((b.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(s.data()), b.data(), int(b.size()));
  s.resize(size_t(n));
  return s;
}

bool base64_decode(std::string_view s, SecretBytes& out) {
  out.clear();
  if (s.size() % 4 != 0) return false;
  size_t pad = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '=') {
      if (i + 2 < s.size()) return false;  // '=' only in the last two places
      ++pad;
      continue;
    }
    if (pad) return false;  // a character after padding
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/'))
      return false;
  }
  SecretBytes buf(s.size() / 4 * 3);
  if (s.empty()) return true;
  int n = EVP_DecodeBlock(buf.data(), reinterpret_cast<const unsigned char*>(s.data()), int(s.size()));
  if (n < 0 || size_t(n) != buf.size()) return false;
  out = SecretBytes(buf.data(), buf.size() - pad);
  return true;
}

bool random_bytes(uint8_t* p, size_t n) { return RAND_bytes(p, int(n)) == 1; }

struct DhKeyPair::Key {
  Pkey pkey;
};

DhKeyPair::DhKeyPair() : key_(std::make_unique<Key>()) {}
DhKeyPair::~DhKeyPair() = default;

bool DhKeyPair::load_public(std::string& err) {
  BIGNUM* pub = nullptr;
  if (EVP_PKEY_get_bn_param(key_->pkey.get(), OSSL_PKEY_PARAM_PUB_KEY, &pub) != 1) {
    err = openssl_error("DH public value");
    return false;
  }
  Bn owned(pub);
  public_.assign(wire::dh_group_bytes(group_), 0);
  if (BN_bn2binpad(pub, public_.data(), int(public_.size())) < 0) {
    err = "DH public value longer than the group's prime";
    return false;
  }
  return true;
}

bool DhKeyPair::generate(wire::DhGroup g, std::string& err) {
  const char* name = group_name(g);
  if (!name) {
    err = "no Diffie-Hellman exchange in the NULL group";
    return false;
  }
  PkeyCtx ctx(EVP_PKEY_CTX_new_from_name(nullptr, "DH", nullptr));
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, const_cast<char*>(name), 0),
                         OSSL_PARAM_construct_end()};
  EVP_PKEY* k = nullptr;
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1 || EVP_PKEY_CTX_set_params(ctx.get(), params) != 1 ||
      EVP_PKEY_generate(ctx.get(), &k) != 1) {
    err = openssl_error("DH key generation");
    return false;
  }
  key_->pkey.reset(k);
  group_ = g;
  return load_public(err);
}

bool DhKeyPair::set_private(wire::DhGroup g, Bytes priv, std::string& err) {
  const char* name = group_name(g);
  if (!name) {
    err = "no Diffie-Hellman exchange in the NULL group";
    return false;
  }
  // The public value g^x mod p, from the group's own p and g.
  PkeyCtx pctx(EVP_PKEY_CTX_new_from_name(nullptr, "DH", nullptr));
  OSSL_PARAM gp[] = {OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, const_cast<char*>(name), 0),
                     OSSL_PARAM_construct_end()};
  EVP_PKEY* params = nullptr;
  if (!pctx || EVP_PKEY_paramgen_init(pctx.get()) != 1 || EVP_PKEY_CTX_set_params(pctx.get(), gp) != 1 ||
      EVP_PKEY_generate(pctx.get(), &params) != 1) {
    err = openssl_error("DH group parameters");
    return false;
  }
  Pkey group_key(params);
  BIGNUM *p = nullptr, *gen = nullptr;
  EVP_PKEY_get_bn_param(params, OSSL_PKEY_PARAM_FFC_P, &p);
  EVP_PKEY_get_bn_param(params, OSSL_PKEY_PARAM_FFC_G, &gen);
  Bn pb(p), gb(gen), x(BN_bin2bn(priv.data(), int(priv.size()), nullptr)), y(BN_new());
  std::unique_ptr<BN_CTX, Deleter<BN_CTX, BN_CTX_free>> bctx(BN_CTX_new());
  if (!p || !gen || !x || !y || !bctx || BN_mod_exp(y.get(), gb.get(), x.get(), pb.get(), bctx.get()) != 1) {
    err = openssl_error("DH public value");
    return false;
  }
  Pkey k = dh_key_from(name, x.get(), y.get());
  if (!k) {
    err = openssl_error("DH key");
    return false;
  }
  key_->pkey = std::move(k);
  group_ = g;
  return load_public(err);
}

bool DhKeyPair::shared_secret(Bytes peer, SecretBytes& out, std::string& err) const {
  out.clear();
  const char* name = group_name(group_);
  const size_t plen = wire::dh_group_bytes(group_);
  if (!name || !key_->pkey) {
    err = "no DH key";
    return false;
  }
  if (peer.empty() || peer.size() > plen) {
    err = "DH public value of " + std::to_string(peer.size()) + " bytes in a group of " + std::to_string(plen);
    return false;
  }
  Bn y(BN_bin2bn(peer.data(), int(peer.size()), nullptr));
  Pkey peer_key = y ? dh_key_from(name, nullptr, y.get()) : nullptr;
  if (!peer_key) {
    err = openssl_error("peer DH value");
    return false;
  }
  PkeyCtx dctx(EVP_PKEY_CTX_new_from_pkey(nullptr, key_->pkey.get(), nullptr));
  // Left-padded to the prime's length, as the Linux kernel writes it; the peer's value is
  // checked (1 < y < p - 1, and of the subgroup's order) before it is used.
  if (!dctx || EVP_PKEY_derive_init(dctx.get()) != 1 || EVP_PKEY_CTX_set_dh_pad(dctx.get(), 1) != 1) {
    err = openssl_error("DH derivation");
    return false;
  }
  if (EVP_PKEY_derive_set_peer_ex(dctx.get(), peer_key.get(), 1) != 1) {
    err = openssl_error("peer DH value not valid in " + std::string(name));
    return false;
  }
  size_t n = plen;
  out.resize(plen);
  if (EVP_PKEY_derive(dctx.get(), out.data(), &n) != 1 || n != plen) {
    out.clear();
    err = openssl_error("DH derivation");
    return false;
  }
  return true;
}

}  // namespace nvtcp::auth
