// SPDX-License-Identifier: Apache-2.0
// A remote namespace as a local block device through ublk (Linux 6.0+, ublk_drv): the kernel
// hands each block request to this process through io_uring commands on /dev/ublkcN, and
// the engine carries it to the remote controller over NVMe/TCP. Unmodified programs (fio
// with libaio or io_uring, mkfs, a database) then use /dev/ublkbN as the study's fio used the
// card's /dev/nvme device.
//
// One device per namespace, one hardware queue, served by a thread of its own whose reactor
// drives both the ublk commands and the device's NVMe/TCP queue pair (or, over several paths,
// every path's queue pair): a request's fetch, its NVMe command and its commit are all
// completions of that one ring.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "nvtcp/host.hpp"
#include "nvtcp/multipath.hpp"

namespace nvtcp::engine {

struct UblkOptions {
  uint32_t queue_depth = 64;          // requests the kernel may have outstanding
  uint32_t max_io_bytes = 512 * 1024; // largest request (also bounded by the controller's MDTS)
};

class UblkDevice {
 public:
  // Whether this kernel offers ublk (/dev/ublk-control), and why not.
  static bool available(std::string& why);
  // Adds and starts /dev/ublkbN for namespace nsid of ctrl. With mp (ctrl then one of its
  // paths' controllers, for Identify), requests go through a multipath queue pair over every
  // path: a path's loss or ANA change moves them, and the block device sees no error. nullptr
  // and err on failure.
  static std::unique_ptr<UblkDevice> create(host::Controller& ctrl, host::MultipathController* mp, uint32_t nsid,
                                            const UblkOptions& o, std::string& err);
  // Stops the device (the kernel waits for requests in flight) and deletes it.
  ~UblkDevice();
  UblkDevice(const UblkDevice&) = delete;
  UblkDevice& operator=(const UblkDevice&) = delete;

  int dev_id() const;
  std::string block_path() const { return "/dev/ublkb" + std::to_string(dev_id()); }
  uint64_t requests() const;  // block requests served

  struct Impl;

 private:
  explicit UblkDevice(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nvtcp::engine
