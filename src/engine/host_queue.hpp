// SPDX-License-Identifier: Apache-2.0
// What the engine sends on, a forwarder or a ublk device alike: one path's queue pair, or a
// multipath queue pair over every path of the remote subsystem. One type for both, checked
// once per call, so the data path above it is written once.
#pragma once
#include <cstdint>

#include "nvtcp/host.hpp"
#include "nvtcp/multipath.hpp"

namespace nvtcp::engine {

// A multipath queue pair moves a command off a failed path by itself.
class HostQueue {
 public:
  // Implicit: a forwarder is made from either.
  HostQueue(host::QueuePair& q) : one_(&q) {}             // NOLINT(google-explicit-constructor)
  HostQueue(host::MultipathQueuePair& q) : multi_(&q) {}  // NOLINT(google-explicit-constructor)
  int submit(const nvme::Sqe& sqe, void* data, uint32_t len, bool to_controller, host::CompletionFn cb, void* ctx) {
    return multi_ ? multi_->submit(sqe, data, len, to_controller, cb, ctx)
                  : one_->submit(sqe, data, len, to_controller, cb, ctx);
  }
  int read(uint32_t nsid, uint64_t slba, uint32_t nlb, void* buf, host::CompletionFn cb, void* ctx) {
    return multi_ ? multi_->read(nsid, slba, nlb, buf, cb, ctx) : one_->read(nsid, slba, nlb, buf, cb, ctx);
  }
  int write(uint32_t nsid, uint64_t slba, uint32_t nlb, const void* buf, host::CompletionFn cb, void* ctx,
            host::WriteFlags f) {
    return multi_ ? multi_->write(nsid, slba, nlb, buf, cb, ctx, f) : one_->write(nsid, slba, nlb, buf, cb, ctx, f);
  }
  int flush(uint32_t nsid, host::CompletionFn cb, void* ctx) {
    return multi_ ? multi_->flush(nsid, cb, ctx) : one_->flush(nsid, cb, ctx);
  }
  int write_zeroes(uint32_t nsid, uint64_t slba, uint32_t nlb, host::CompletionFn cb, void* ctx) {
    return multi_ ? multi_->write_zeroes(nsid, slba, nlb, cb, ctx) : one_->write_zeroes(nsid, slba, nlb, cb, ctx);
  }
  int deallocate(uint32_t nsid, const nvme::DsmRange* ranges, uint32_t n, host::CompletionFn cb, void* ctx) {
    return multi_ ? multi_->deallocate(nsid, ranges, n, cb, ctx) : one_->deallocate(nsid, ranges, n, cb, ctx);
  }
  int process_completions(uint32_t timeout_us) {
    return multi_ ? multi_->process_completions(timeout_us) : one_->process_completions(timeout_us);
  }
  uint32_t block_size(uint32_t nsid) const { return multi_ ? multi_->block_size(nsid) : one_->block_size(nsid); }
  uint32_t depth() const { return multi_ ? multi_->depth() : one_->depth(); }
  uint32_t outstanding() const { return multi_ ? multi_->outstanding() : one_->outstanding(); }

 private:
  host::QueuePair* one_ = nullptr;
  host::MultipathQueuePair* multi_ = nullptr;
};

}  // namespace nvtcp::engine
