// SPDX-License-Identifier: Apache-2.0
// The keyring_* methods: SPDK's file keyring (module/keyring/file and lib/keyring, SPDK 24.05
// and later), as Ceph's NVMe-oF gateway drives it: keys by name, each in a file, that
// nvmf_subsystem_add_host then names. Errors are SPDK's: the negative errno as the code and
// its strerror text as the message; the details (SPDK's log words) go to nvtcp's log.
#include <fmt/format.h>

#include <cstring>
#include <map>
#include <set>

#include "control/method_table.hpp"
#include "util/log.hpp"

namespace nvtcp::control {
namespace {

using target::Keyring;
using target::Target;

Keyring& keyring_of(Target& t) { return *t.state().config.keyring; }

// How many host keys hold each keyring key (by id), across every subsystem: SPDK's refcnt
// counts one for the keyring itself and one per user.
std::map<uint64_t, int> key_users(Target& t) {
  std::map<uint64_t, int> users;
  for (const auto& s : t.state().subsystems())
    for (const auto& h : s->hosts().list())
      for (const target::KeyringRef* r : {&h.dhchap_ref, &h.dhchap_ctrl_ref, &h.psk_ref})
        if (*r) ++users[r->id];
  return users;
}

// The keys as they are now: removed keys that no host holds any more are gone, as SPDK frees a
// key at its last reference.
std::vector<Keyring::Key> current_keys(Target& t, std::map<uint64_t, int>& users) {
  users = key_users(t);
  std::set<uint64_t> held;
  for (const auto& [id, n] : users) held.insert(id);
  keyring_of(t).forget_unused(held);
  return keyring_of(t).keys();
}

// A parameter error as SPDK answers it (Invalid Params, "Invalid argument"), logged with what
// was wrong.
template <class Read>
auto read_params(const char* method, Read read) {
  try {
    return read();
  } catch (const RpcError& e) {
    log::warn("RPC {}: {}", method, e.what());
    throw RpcError(kInvalidParams, std::strerror(EINVAL));
  }
}

// SPDK decodes these parameters leniently (names it does not know are ignored), so a newer
// client's extra options do not fail here either.
Json keyring_file_add_key(MethodContext& ctx, const Json& params) {
  if (!params.is_object()) {
    log::warn("RPC keyring_file_add_key: parameters must be given by name");
    throw RpcError(kInvalidParams, std::strerror(EINVAL));
  }
  const auto [name, path] = read_params("keyring_file_add_key", [&] {
    Params p(params);
    return std::pair{p.str("name"), p.str("path")};
  });
  std::string why;
  if (int rc = keyring_of(ctx.target).add_file_key(name, path, why); rc != 0) throw RpcError(rc, std::strerror(-rc));
  return Json(true);
}

Json keyring_file_remove_key(MethodContext& ctx, const Json& params) {
  const std::string name = read_params("keyring_file_remove_key", [&] {
    Params p(params);
    std::string n = p.str("name");
    p.done();
    return n;
  });
  std::string why;
  if (int rc = keyring_of(ctx.target).remove_file_key(name, why); rc != 0) throw RpcError(rc, std::strerror(-rc));
  return Json(true);
}

// Each key as SPDK's keyring_dump_key_info writes it: a removed key has no path any more.
// probed is false: a file key is added by name, never found by probing.
Json keyring_get_keys(MethodContext& ctx, const Json& params) {
  read_params("keyring_get_keys", [&] {
    Params p(params);
    p.done();
    return 0;
  });
  std::map<uint64_t, int> users;
  Json out = Json::array();
  for (const Keyring::Key& k : current_keys(ctx.target, users)) {
    const int held = users.count(k.id) ? users[k.id] : 0;
    Json j{{"name", k.name},
           {"module", "keyring_file"},
           {"removed", k.removed},
           {"probed", false},
           {"refcnt", (k.removed ? 0 : 1) + held}};
    if (!k.removed) j["path"] = k.path;
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

// What save_config writes for the keyring: each key by name and path (never the key), before
// the nvmf section whose hosts name them. Removed keys are not written, as SPDK does not.
Json keyring_config(Target& t) {
  std::map<uint64_t, int> users;
  Json out = Json::array();
  for (const Keyring::Key& k : current_keys(t, users))
    if (!k.removed)
      out.push_back(Json{{"method", "keyring_file_add_key"}, {"params", {{"name", k.name}, {"path", k.path}}}});
  return out;
}

std::span<const MethodEntry> keyring_methods() {
  static constexpr MethodEntry kMethods[] = {
    {"keyring_file_add_key", keyring_file_add_key},
    {"keyring_file_remove_key", keyring_file_remove_key},
    {"keyring_get_keys", keyring_get_keys},
  };
  return kMethods;
}

}  // namespace nvtcp::control
