// SPDX-License-Identifier: Apache-2.0
// The RBD backend in a build configured without librbd (librbd-dev, which `make deps`
// installs): an RBD namespace fails to start and says why.
#include "backend/block_device.hpp"

namespace nvtcp::backend {

bool rbd_available() { return false; }

std::unique_ptr<BlockDevice> make_rbd(const RbdSpec&, uint32_t, std::string& err) {
  err = "this nvtcp was built without librbd: install librbd-dev (make deps) and build it again";
  return nullptr;
}

}  // namespace nvtcp::backend
