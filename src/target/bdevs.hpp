// SPDX-License-Identifier: Apache-2.0
// Block devices by name (SPDK's bdevs): what a namespace is made from. The configuration's
// namespaces each make one under the namespace's name; RPC makes them alone (bdev_null_create,
// bdev_malloc_create, bdev_aio_create) and gives them to namespaces later. A device belongs to
// at most one namespace; while none has it, the table holds it. Control path only (a mutex).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/block_device.hpp"
#include "target/config.hpp"
#include "target/io_metrics.hpp"

namespace nvtcp::target {

struct Namespace;
struct TargetConfig;

// Makes the device of a namespace in place of the built-in backends (tests, embedders):
// nullptr with err empty means "use the built-in one for nc.type".
using DeviceFactory =
    std::function<std::unique_ptr<backend::BlockDevice>(const NamespaceConfig& nc, std::string& err)>;
// Makes the device nc describes (factory first, when given).
std::unique_ptr<backend::BlockDevice> make_device(const NamespaceConfig& nc, unsigned reactors,
                                                  const DeviceFactory& factory, std::string& err);

// Whether nc's identifiers (nguid, eui64, uuid), those given, are well formed.
bool valid_identifiers(const NamespaceConfig& nc, std::string& err);

// A UUID as text in its canonical form (lowercase 8-4-4-4-12), from 32 hex digits with or
// without dashes; false if text is not one.
bool canonical_uuid(const std::string& text, std::string& out);
// A fresh random UUID (version 4): the identity of a bdev created without one, as SPDK's.
std::string random_uuid();
// The UUID of a device the configuration or command line makes without one (--file, --ram,
// --null, a saved configuration from before bdevs had UUIDs): it follows the storage, never
// the slot, so that two different devices never show one identity. A file: its inode, file
// system and birth time (the same file after a restart keeps it; another file at the path,
// even one that got the same inode number, does not); a block device: its path and device
// number. RAM: random at each start of the process (its data does not outlive it). NULL: the
// subsystem, NSID, name and size (it holds no data to mistake); random when no namespace has it.
// An RBD image: the device's storage_identity (its cluster's fsid, its pool's and its own ID),
// the same on every gateway that opens it.
std::string storage_uuid(const NamespaceConfig& spec, const std::string& subnqn, uint32_t nsid,
                         const backend::BlockDevice* device);

// Fills the identifiers nc does not give (uuid, nguid, eui64) as a namespace of the device
// whose UUID is bdev_uuid shows them (make_namespace); false if bdev_uuid is not a UUID.
bool inherit_identifiers(const std::string& bdev_uuid, NamespaceConfig& nc);

// A namespace of subnqn over device, as nc describes it (NSID, block size, its reservations
// restored from beside a regular file's image). Its identifiers are those nc gives, else its
// device's: UUID and NGUID the bdev's UUID (as SPDK's), EUI-64 a digest of it. bdev_uuid
// empty (a namespace the configuration makes): configured_device_uuid(nc, subnqn, device).
// The UUID of the device of a namespace the configuration makes: the one a saved configuration
// names for it (nc.device_uuid), else the namespace's given UUID, else storage_uuid(nc, subnqn,
// nc.nsid, device).
std::string configured_device_uuid(const NamespaceConfig& nc, const std::string& subnqn,
                                   const backend::BlockDevice* device);

std::unique_ptr<Namespace> make_namespace(const TargetConfig& cfg, const std::string& subnqn, const NamespaceConfig& nc,
                                          std::unique_ptr<backend::BlockDevice> device, std::string& err,
                                          const std::string& bdev_uuid = {});

class BdevTable {
 public:
  struct Entry {
    NamespaceConfig spec;                          // name, type, size, path, block size
    std::unique_ptr<backend::BlockDevice> device;  // while no namespace has it
    std::string subnqn;                            // the namespace that has it ("" when none)
    uint32_t nsid = 0;
    uint64_t order = 0;                            // creation order (save_config replays it)
    IoTotals past_io;                              // what the namespaces that had it before did
    // Its namespace is taken away and the commands on it are finishing (LiveConfig::Leaving):
    // still claimed, but subnqn/nsid name no namespace any more (another may have that NSID now).
    bool leaving = false;
  };
  // A snapshot of one entry, for listing.
  struct Info {
    NamespaceConfig spec;
    std::string subnqn;
    uint32_t nsid = 0;
    uint64_t size_bytes = 0;
    IoTotals past_io;  // Entry::past_io (the namespace that has it now counts the rest)
    bool leaving = false;  // Entry::leaving
  };
  // Adds a device (device nullptr: a namespace already has it, subnqn/nsid say which). False if
  // the name is taken. A spec without a UUID gets storage_uuid(spec, subnqn, nsid, device).
  bool add(const NamespaceConfig& spec, std::unique_ptr<backend::BlockDevice> device, const std::string& subnqn = {},
           uint32_t nsid = 0);
  // Takes the device of an unclaimed entry for a namespace (nullptr and why otherwise: a
  // leaving one says it is "being removed").
  std::unique_ptr<backend::BlockDevice> claim(const std::string& name, const std::string& subnqn, uint32_t nsid,
                                              NamespaceConfig& spec, std::string& why);
  // A namespace gave its device back (removed), with what its commands did: the bdev keeps
  // the counts (bdev_get_iostat), as an SPDK bdev keeps its statistics when it leaves a subsystem.
  void unclaim(const std::string& name, std::unique_ptr<backend::BlockDevice> device, const IoTotals& io = {});
  // Marks a claimed entry's namespace as taken away, its commands finishing (Entry::leaving);
  // unclaim ends it. False if there is no claimed entry by that name.
  bool set_leaving(const std::string& name);
  // Removes a leaving entry whose device its namespace closed (a bdev deleted with its
  // namespace); false if there is none such by that name.
  bool remove_leaving(const std::string& name);
  // Removes an unclaimed entry and gives its device (to close outside the table's lock: an RBD
  // image's close waits for its cluster); nullptr if there is none by that name.
  std::unique_ptr<backend::BlockDevice> take(const std::string& name);
  bool find(const std::string& name, Info& out) const;
  // The name of the bdev whose UUID is uuid (canonical text), or empty.
  std::string name_of_uuid(const std::string& uuid) const;
  // Every entry, in creation order.
  std::vector<Info> list() const;
  // Changes the recorded size (bdev_null_resize).
  void set_size(const std::string& name, uint64_t bytes);
  // Records the bdev's rate limits (bdev_set_qos_limit) and gives back the entry as it is now;
  // false if there is none by that name. A namespace that has it takes them from the caller.
  bool set_qos(const std::string& name, const QosLimits& limits, Info& out);
  // The device of an unclaimed entry (nullptr: none, or a namespace has it). It stays where it
  // is, and alive, until take(name): claim and unclaim move its owner, not the device.
  backend::BlockDevice* unclaimed_device(const std::string& name) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
  uint64_t next_order_ = 0;
};

// Ceph clusters registered by name (bdev_rbd_register_cluster): the user, configuration file,
// keyring and options an RBD bdev created with that cluster_name connects with; the images of
// one cluster share its connection (backend::make_rbd). Control path only.
class RbdClusterTable {
 public:
  // False if a cluster of that name is registered already.
  bool add(const backend::RbdSpec& cluster);
  bool remove(const std::string& name);
  bool find(const std::string& name, backend::RbdSpec& out) const;
  std::vector<backend::RbdSpec> list() const;  // by name
  // Gives spec the settings of the cluster it names (none named: unchanged); false and why
  // when that cluster is not registered.
  bool resolve(backend::RbdSpec& spec, std::string& err) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, backend::RbdSpec> clusters_;
};

}  // namespace nvtcp::target
