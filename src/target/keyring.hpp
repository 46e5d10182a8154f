// SPDX-License-Identifier: Apache-2.0
// SPDK's file keyring (keyring_file_add_key, keyring_file_remove_key, keyring_get_keys): keys
// known by name, each a file that holds the key in its interchange form ("DHHC-1:..." or
// "NVMeTLSkey-1:..."). Hosts name keys (nvmf_subsystem_add_host), so that what the target saves
// and lists is a name and a path, never the key. The keyring holds paths only: a host's key is
// read from its file when the host is added, and stays with that host.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "auth/secret_bytes.hpp"

namespace nvtcp::target {

// Which keyring key a host's key was read from (empty name and id 0: the key was given inline).
// The id tells one key from another added later under the same name after the first was removed:
// a host holds the key it was given, whatever the name means now.
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
    // until the last of them goes, and no longer found by name.
    bool removed = false;
  };

  // keyring_file_add_key, with SPDK's checks: the path absolute, the file there, owned by this
  // process's user and neither readable nor writable by group or others; a name not taken. 0, or
  // a negative errno as SPDK answers (-EPERM, -ENOENT, -EEXIST, -EINVAL); why is the log line.
  int add_file_key(const std::string& name, const std::string& path, std::string& why);
  // keyring_file_remove_key: 0, or -ENOKEY for a name it does not have. The key is marked
  // removed; hosts that hold it keep it.
  int remove_file_key(const std::string& name, std::string& why);
  // The key a name gives now (not a removed one). "key0" and ":key0" are the same name, as in
  // SPDK (its global keyring, the only one).
  std::optional<Key> find(std::string_view name) const;
  // The key's file read for a host: the interchange text in out and the reference in ref, or
  // false and why (never the key). The file is checked again: it may have changed since it was
  // added.
  bool read(std::string_view name, auth::SecretString& out, KeyringRef& ref, std::string& why) const;
  // Every key in the order added, then the removed ones still held.
  std::vector<Key> keys() const;
  // Forgets removed keys no host holds any more (in_use: the ids hosts hold).
  void forget_unused(const std::set<uint64_t>& in_use);

 private:
  // The name as the keyring compares it (without a leading ':').
  static std::string_view plain_name(std::string_view name);
  const Key* find_locked(std::string_view name) const;

  mutable std::mutex mu_;  // keys_ and next_id_ (RPC and configuration load)
  std::vector<Key> keys_;
  uint64_t next_id_ = 1;
};

}  // namespace nvtcp::target
