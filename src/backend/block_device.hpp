// SPDX-License-Identifier: Apache-2.0
// What a namespace stores its blocks in. Requests complete asynchronously through a
// callback (the file backend finishes on a later reactor turn; null and RAM inline).
//
// Durability, as NVMe defines it for a controller with a volatile write cache: a completed
// write may still sit in a cache; it is durable once a Flush that was submitted after it
// completes, or at once when it carried FUA. A device without a volatile cache stores a
// write durably (as durably as its medium allows: see Persistence) before it completes.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nvtcp/size.hpp"
#include "nvtcp/status.hpp"
#include "reactor/reactor.hpp"

namespace nvtcp::backend {

struct BlockIo {
  // CompareAndWrite: the blocks are compared with `compare` and, only if they match, written
  // with `buffer`, as one operation on the storage itself (a fused Compare and Write that must
  // be atomic against other gateways of the same storage). Sent only to a device whose
  // atomic_compare_and_write() is true; a mismatch completes with Compare Failure.
  enum class Op : uint8_t { Read, Write, Flush, WriteZeroes, Deallocate, CompareAndWrite };
  Op op = Op::Read;
  uint64_t offset = 0;        // bytes
  uint64_t length = 0;        // bytes
  uint8_t* buffer = nullptr;  // Write: data to store. Read: where to put data if copying.
  const uint8_t* compare = nullptr;  // CompareAndWrite: what the blocks must hold
  // Write, WriteZeroes: Force Unit Access; done is called only once the data is durable.
  bool fua = false;
  // Read: a device that can serve data without a copy points this at it (valid, and
  // unchanged, until the request's data has been sent: the socket reads it turns later);
  // otherwise it fills buffer and sets read_data = buffer.
  const uint8_t* read_data = nullptr;
  void (*done)(BlockIo* io, nvme::Status status) = nullptr;
  void* user = nullptr;       // the submitter's context for done
  // Device-private state for devices that go through io_uring (partial transfers resume).
  reactor::OwnedCompletion<BlockIo> completion;
  class BlockDevice* device = nullptr;
  reactor::Reactor* reactor = nullptr;
  uint64_t progress = 0;
  bool write_through = false;  // this write must be durable before done (FUA or cache off)
  bool syncing = false;        // the data is in; now the sync that makes it durable runs
  // Devices whose library completes on a thread of its own (RBD): the result it gave, on its
  // way back to the submitting reactor.
  struct Remote : reactor::RemoteCompletion {
    BlockIo* io = nullptr;
    int64_t result = 0;
    uint64_t mismatch_offset = 0;  // CompareAndWrite: where the first difference was
    void* via = nullptr;           // the device's handle the operation went through
  };
  Remote remote;
};

// How long what a device stores lasts, whatever is flushed.
enum class Persistence : uint8_t {
  None,     // null: writes are discarded
  Process,  // RAM: gone when the target process exits
  Machine,  // a file on tmpfs or ramfs: survives the process, gone at reboot or power loss
  Media,    // a file or block device on storage: survives power loss once durable
};
const char* persistence_name(Persistence p);

// A test's window on when a device makes data durable (see BlockDevice::set_sync_observer).
class SyncObserver {
 public:
  virtual ~SyncObserver() = default;
  // Called on the submitting reactor's thread when the sync that makes io durable has
  // completed (a FUA or write-through write, or a Flush), before io->done.
  virtual void on_sync_complete(const BlockIo& io) = 0;
};

class BlockDevice {
 public:
  virtual ~BlockDevice() = default;
  virtual uint64_t size_bytes() const = 0;
  // Looks again at what backs the device (a file or block device an administrator grew or
  // shrank) and returns the size in effect from now on. Control path; fixed-size devices
  // return size_bytes().
  virtual uint64_t revalidate_size() { return size_bytes(); }
  // Takes a new size (control path; NULL devices only, as SPDK resizes null bdevs); false when
  // the device cannot. The namespace then takes it as revalidate_size() reports it.
  virtual bool resize(uint64_t) { return false; }
  virtual uint32_t block_size() const = 0;
  virtual const char* kind() const = 0;
  // What names this device's storage wherever it is opened, by any process on any machine
  // (an RBD image: its cluster's fsid, its pool's ID and its own ID); empty when nothing
  // beyond the device's configuration does.
  virtual std::string storage_identity() const { return {}; }
  // Read needs a caller buffer only when this is false. True only for a device whose blocks
  // no command can change while a read's data is still being sent (NULL).
  virtual bool zero_copy_reads() const { return false; }
  // True for a device that moves a Read's or a Write's bytes on the submitting reactor's
  // thread before submit returns (RAM: a memcpy): the target then runs a large one a piece at
  // a time within its reactor's budget of work per turn, so that it does not hold every other
  // command of that reactor for the whole copy.
  virtual bool copies_on_reactor() const { return false; }
  // True for a device that never looks at what a Write gives it (NULL): the target then
  // receives a Write's data into no buffer at all (its digest is still checked), as the
  // data would only be copied once more to be dropped.
  virtual bool ignores_write_data() const { return false; }
  // Whether it carries out Op::CompareAndWrite itself, atomically on its storage (RBD:
  // rbd_aio_compare_and_write, atomic at the OSD against every client of the image). Others
  // get a fused Compare and Write as a read, a compare and a write under the namespace's
  // fence, which is atomic only against this target's own writes.
  virtual bool atomic_compare_and_write() const { return false; }
  // Runs on the calling reactor's thread; io->done is called exactly once.
  virtual void submit(BlockIo* io, reactor::Reactor& r) = 0;

  virtual Persistence persistence() const = 0;
  // True when a completed write can still be lost (power loss) until a Flush makes it
  // durable: the namespace then reports a volatile write cache to the host.
  virtual bool volatile_write_cache() const { return false; }
  // Feature 06h: with the cache off every write is durable before it completes. Only
  // meaningful when volatile_write_cache(); any reactor may read it while one writes it.
  virtual bool write_cache_enabled() const { return false; }
  virtual void set_write_cache_enabled(bool) {}
  // Test hook: observer (owned by the caller, outliving the device's use) is told about
  // every sync this device completes; nullptr removes it. Devices without syncs ignore it.
  virtual void set_sync_observer(SyncObserver*) {}
};

using ::nvtcp::parse_size;  // "512", "4K", "1G", "1T" -> bytes (nvtcp/size.hpp)

std::unique_ptr<BlockDevice> make_null(uint64_t size, uint32_t block_size);
// reactors: how many reactor threads submit to it (more than one: commands on the same
// blocks are made atomic per block, and reads copy).
std::unique_ptr<BlockDevice> make_ram(uint64_t size, uint32_t block_size, unsigned reactors, std::string& err);
// Opens a regular file or block device (O_DIRECT when the device allows it). size 0 means
// "the file's size"; a regular file smaller than size is extended.
std::unique_ptr<BlockDevice> make_file(const std::string& path, uint64_t size, uint32_t block_size,
                                       std::string& err);

// A Ceph RBD image: POOL/IMAGE on the cluster the Ceph configuration names (SPDK's
// bdev_rbd_create and bdev_rbd_register_cluster take the same).
struct RbdSpec {
  std::string pool, image;
  // A cluster registered by name (bdev_rbd_register_cluster): the settings below are its, and
  // the images opened through it share one rados connection. Empty: an image of its own
  // settings, with a connection of its own (as SPDK opens one without a cluster name).
  std::string cluster_name;
  std::string user;                                  // the client ID ("admin"); empty: librados' default
  std::string config_file;                           // a ceph.conf; empty: librados' search path
  std::string key_file;                              // a keyring
  std::vector<std::pair<std::string, std::string>> config;  // options set after the file (mon_host, ...)
};
// Connects, opens the image and takes its size (control path: it blocks while it connects).
// Without librbd in the build, fails saying so.
std::unique_ptr<BlockDevice> make_rbd(const RbdSpec& spec, uint32_t block_size, std::string& err);
// Whether this build has the RBD backend (librbd was found when it was configured).
bool rbd_available();

}  // namespace nvtcp::backend
