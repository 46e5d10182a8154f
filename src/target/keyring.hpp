// SPDX-License-Identifier: Apache-2.0
// SPDK's file keyring (keyring_file_add_key, keyring_file_remove_key, keyring_get_keys): keys
// known by name, each a file that holds the key in its interchange form ("DHHC-1:..." or
// "NVMeTLSkey-1:..."). Hosts name keys (nvmf_subsystem_add_host), so that what the target saves
// and lists is a name and a path, never the key. The keyring holds paths only: a host's key is
// read from its file each time it is used (a DH-HMAC-CHAP transaction, a TLS handshake), as
// SPDK's keyring_file reads it, so that an administrator who rewrites the file rotates the key
// for the next connection without an RPC; adding the host only checks that it reads.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "auth/secret_bytes.hpp"

namespace nvtcp::target {

// Which keyring key a host's key is (empty name and id 0: the key was given inline). The id
// tells one key from another added later under the same name after the first was removed: a
// host holds the key it was given, whatever the name means now.
struct KeyringRef {
  std::string name;
  uint64_t id = 0;
  explicit operator bool() const { return id != 0; }
};

class Keyring {
 public:
  struct Key {
    std::string name;
    std::string path;
    uint64_t id = 0;
    // Taken away by keyring_file_remove_key while hosts still hold it: listed (as SPDK lists it)
    // until the last of them goes, no longer found by name, and no longer usable (SPDK's
    // spdk_key_get_key answers -ENOKEY for a removed key): those hosts are refused from then on.
    bool removed = false;
  };

  // keyring_file_add_key, with SPDK's checks: the path absolute, the file there, owned by this
  // process's user and neither readable nor writable by group or others; a name not taken. 0, or
  // a negative errno as SPDK answers (-EPERM, -ENOENT, -EEXIST, -EINVAL); why is the log line.
  int add_file_key(const std::string& name, const std::string& path, std::string& why);
  // keyring_file_remove_key: 0, or -ENOKEY for a name it does not have. The key is marked
  // removed: hosts that name it keep the reference, and their next use of it fails.
  int remove_file_key(const std::string& name, std::string& why);
  // The key a name gives now (not a removed one). "key0" and ":key0" are the same name, as in
  // SPDK (its global keyring, the only one).
  std::optional<Key> find(std::string_view name) const;
  // The key's file read for a host: the interchange text in out and the reference in ref, or
  // false and why (never the key). The file is checked again: it may have changed since it was
  // added.
  bool read(std::string_view name, auth::SecretString& out, KeyringRef& ref, std::string& why) const;
  // The key ref holds, used now: its file checked and read as SPDK's keyring_file reads it at
  // each use, and its interchange text handed to parse. False, with why naming the key and its
  // file (never the key), when the key was removed or no longer is in the keyring, its file is
  // gone, unreadable, or no longer someone's key file, or parse refuses it. A read of a file of
  // at most 4 KiB (auth::read_key_value).
  using ParseText = std::function<bool(std::string_view text, std::string& why)>;
  bool use(const KeyringRef& ref, const ParseText& parse, std::string& why) const;
  // Every key in the order added, then the removed ones still held.
  std::vector<Key> keys() const;
  // Forgets removed keys no host holds any more (in_use: the ids hosts hold).
  void forget_unused(const std::set<uint64_t>& in_use);

 private:
  // The name as the keyring compares it (without a leading ':').
  static std::string_view plain_name(std::string_view name);
  const Key* find_locked(std::string_view name) const;

  mutable std::mutex mu_;  // keys_ and next_id_ (RPC, configuration load, and each use of a key)
  std::vector<Key> keys_;
  uint64_t next_id_ = 1;
};

// One key of a host, as nvmf_subsystem_add_host (or the configuration) gave it: the key itself
// (parsed once, when the host was added), or the name of a keyring key, read from its file at
// each use (Keyring::use). Material is auth::DhchapSecret or auth::ConfiguredPsk, parsed by
// auth::parse_dhchap_secret or auth::parse_tls_psk. Copies are cheap and share the key.
template <class Material>
class HostKey {
 public:
  using Parse = bool (*)(std::string_view text, Material& out, std::string& why);
  HostKey() = default;
  // A key given inline (or none, for a null pointer).
  template <class M>
    requires std::is_convertible_v<M*, const Material*>
  HostKey(std::shared_ptr<M> key) : inline_(std::move(key)) {}  // NOLINT(google-explicit-constructor)
  HostKey(std::shared_ptr<const Keyring> keyring, KeyringRef ref, Parse parse)
      : keyring_(std::move(keyring)), ref_(std::move(ref)), parse_(parse) {}

  // Whether the host has this key (configured; whether it can be had now is material's answer).
  explicit operator bool() const { return inline_ || ref_; }
  // The keyring key it names; unset for a key given inline.
  const KeyringRef& ref() const { return ref_; }
  // The key now: the inline one, or the keyring key's file read and parsed afresh. Null, with
  // why (naming the key and its file, never the key), when it cannot be had: whoever uses it
  // refuses the host as with a wrong key. Reads a file for a keyring key: never on the data path.
  std::shared_ptr<const Material> material(std::string& why) const {
    if (!ref_ || !keyring_) return inline_;
    auto key = std::make_shared<Material>();
    const Parse parse = parse_;
    if (!keyring_->use(ref_, [&](std::string_view text, std::string& e) { return parse(text, *key, e); }, why))
      return nullptr;
    return key;
  }

 private:
  std::shared_ptr<const Material> inline_;
  std::shared_ptr<const Keyring> keyring_;
  KeyringRef ref_;
  Parse parse_ = nullptr;
};

}  // namespace nvtcp::target
