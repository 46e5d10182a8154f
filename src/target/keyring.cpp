// SPDX-License-Identifier: Apache-2.0
#include "target/keyring.hpp"

#include <fmt/format.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "auth/keys.hpp"
#include "util/log.hpp"

namespace nvtcp::target {

namespace {

// SPDK's checks of a key file, in its order and words (module/keyring/file): a relative path
// would mean something else to each process that reads the saved configuration, and a key
// others can read or write is no longer this target's alone.
int check_key_file(const std::string& path, std::string& why) {
  if (path.empty() || path.front() != '/') {
    why = fmt::format("Non-absolute paths are not allowed: {}", path);
    return -EPERM;
  }
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    const int e = errno;
    why = fmt::format("Could not stat key file '{}': {}", path, std::strerror(e));
    return -e;
  }
  if ((st.st_mode & 077) || st.st_uid != ::getuid()) {
    why = fmt::format("Invalid permissions for key file '{}': 0{:o}", path, unsigned(st.st_mode));
    return -EPERM;
  }
  return 0;
}

}  // namespace

std::string_view Keyring::plain_name(std::string_view name) {
  return !name.empty() && name.front() == ':' ? name.substr(1) : name;
}

const Keyring::Key* Keyring::find_locked(std::string_view name) const {
  for (const Key& k : keys_)
    if (!k.removed && plain_name(k.name) == plain_name(name)) return &k;
  return nullptr;
}

int Keyring::add_file_key(const std::string& name, const std::string& path, std::string& why) {
  int rc = 0;
  // SPDK has one keyring, the global one: "ring:key" names a keyring that does not exist.
  const size_t colon = name.find(':');
  if (plain_name(name).empty()) {
    why = "a key needs a name";
    rc = -EINVAL;
  } else if (colon != std::string::npos && colon != 0) {
    why = fmt::format("Couldn't add key '{}' to the keyring: keyring doesn't exist", name);
    rc = -EINVAL;
  } else {
    std::lock_guard lk(mu_);
    if (find_locked(name)) {
      why = fmt::format("Key '{}' already exists", name);
      rc = -EEXIST;
    } else if ((rc = check_key_file(path, why)) == 0) {
      keys_.push_back(Key{name, path, next_id_++, false});
    }
  }
  if (rc) log::warn("keyring: key '{}' not added: {}", name, why);
  else log::info("keyring: key '{}' added from {}", name, path);
  return rc;
}

int Keyring::remove_file_key(const std::string& name, std::string& why) {
  std::lock_guard lk(mu_);
  auto it = std::find_if(keys_.begin(), keys_.end(),
                         [&](const Key& k) { return !k.removed && plain_name(k.name) == plain_name(name); });
  if (it == keys_.end()) {
    why = fmt::format("Key '{}' does not exist", name);
    log::warn("keyring: {}", why);
    return -ENOKEY;
  }
  it->removed = true;
  // Listed after the keys still by name, as SPDK lists its removed keys.
  std::stable_partition(keys_.begin(), keys_.end(), [](const Key& k) { return !k.removed; });
  log::info("keyring: key '{}' removed (hosts that name it are refused from their next connection on)", name);
  return 0;
}

std::optional<Keyring::Key> Keyring::find(std::string_view name) const {
  std::lock_guard lk(mu_);
  const Key* k = find_locked(name);
  if (!k) return std::nullopt;
  return *k;
}

bool Keyring::read(std::string_view name, auth::SecretString& out, KeyringRef& ref, std::string& why) const {
  const std::optional<Key> k = find(name);
  if (!k) {
    why = fmt::format("Key '{}' does not exist", name);
    return false;
  }
  if (check_key_file(k->path, why) != 0) return false;
  // read_key_value checks the file once more as it opens it (a regular file, its owner's
  // only), which closes the gap between the check above and the read.
  if (!auth::read_key_value("@" + k->path, out, why)) return false;
  ref = KeyringRef{k->name, k->id};
  return true;
}

bool Keyring::use(const KeyringRef& ref, const ParseText& parse, std::string& why) const {
  std::optional<Key> k;
  {
    std::lock_guard lk(mu_);  // held for the lookup only: the file is read without it
    for (const Key& key : keys_)
      if (key.id == ref.id) k = key;
  }
  if (!k || k->removed) {
    why = fmt::format("keyring key '{}' was removed (keyring_file_remove_key): it is no longer usable", ref.name);
    return false;
  }
  auth::SecretString text;
  std::string err;
  // As SPDK's keyring_file_get_key: the file checked as at keyring_file_add_key, then read.
  const bool ok = check_key_file(k->path, err) == 0 && auth::read_key_value("@" + k->path, text, err) &&
                  parse(text.view(), err);
  if (!ok) why = fmt::format("keyring key '{}' (file {}): {}", k->name, k->path, err);
  return ok;
}

std::vector<Keyring::Key> Keyring::keys() const {
  std::lock_guard lk(mu_);
  return keys_;
}

void Keyring::forget_unused(const std::set<uint64_t>& in_use) {
  std::lock_guard lk(mu_);
  std::erase_if(keys_, [&](const Key& k) { return k.removed && !in_use.count(k.id); });
}

}  // namespace nvtcp::target
