// SPDX-License-Identifier: Apache-2.0
// "Stop taking new work, wait for what is in flight, then release once" as a type, after
// Seastar's gate: an owner whose work outlives the moment it is told to stop (a connection
// whose requests are still inside a device when its socket closes) closes its gate instead
// of deleting itself behind a counter, and the gate runs the release (which may free the
// owner, gate and all) when the last piece of work leaves.
//
// One thread owns a gate (a reactor): no atomics. The release is a plain function and its
// argument, so nothing is allocated.
#pragma once
#include <cassert>
#include <cstdint>

namespace nvtcp {

class Gate {
 public:
  using Release = void (*)(void* ctx);
  Gate(Release release, void* ctx) : release_(release), ctx_(ctx) {}
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  // One more piece of work in flight; false once the gate is closed (do not start it).
  [[nodiscard]] bool enter() {
    if (closed_) return false;
    ++inflight_;
    return true;
  }
  // That work is done. The last one out of a closed gate runs the release: the caller must
  // not touch what the release may free after this returns.
  void leave() {
    assert(inflight_ > 0);
    if (--inflight_ == 0 && closed_) release_(ctx_);
  }
  // No new work from now on; releases at once when nothing is in flight, else at the last
  // leave(). Closing again does nothing.
  void close() {
    if (closed_) return;
    closed_ = true;
    if (inflight_ == 0) release_(ctx_);
  }
  bool closed() const { return closed_; }
  uint32_t inflight() const { return inflight_; }

 private:
  Release release_;
  void* ctx_;
  uint32_t inflight_ = 0;
  bool closed_ = false;
};

}  // namespace nvtcp
