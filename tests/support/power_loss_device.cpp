// SPDX-License-Identifier: Apache-2.0
#include "power_loss_device.hpp"

#include <algorithm>
#include <cstring>

namespace nvtcp::test {

// Device-private use of BlockIo::progress while a request waits: the power cycle it was
// submitted in (high 32 bits) and the turns it still has to wait (low 32 bits).
namespace {
uint32_t epoch_of(const backend::BlockIo* io) { return uint32_t(io->progress >> 32); }
uint32_t turns_of(const backend::BlockIo* io) { return uint32_t(io->progress); }
}  // namespace

PowerLossDevice::PowerLossDevice(uint64_t size, uint32_t block_size, uint64_t seed, uint32_t max_delay_turns)
    : size_(size - size % block_size),
      bs_(block_size),
      max_delay_(max_delay_turns),
      rng_(seed),
      volatile_(size_, 0),
      durable_(size_, 0),
      dirty_(size_ / block_size, false) {}

void PowerLossDevice::submit(backend::BlockIo* io, reactor::Reactor& r) {
  io->device = this;
  io->reactor = &r;
  uint32_t turns = 0;
  {
    std::lock_guard lk(mu_);
    turns = uint32_t(rng_() % (max_delay_ + 1));
    io->progress = (uint64_t(epoch_) << 32) | turns;
  }
  io->completion.owner = io;
  io->completion.fn = [](reactor::Completion* c, int, uint32_t) {
    auto* bio = static_cast<reactor::OwnedCompletion<backend::BlockIo>*>(c)->owner;
    static_cast<PowerLossDevice*>(bio->device)->step(bio);
  };
  io_uring_sqe* sqe = r.get_sqe();
  io_uring_prep_nop(sqe);
  r.prep(sqe, &io->completion);
}

void PowerLossDevice::step(backend::BlockIo* io) {
  if (turns_of(io) > 0) {
    io->progress -= 1;
    io_uring_sqe* sqe = io->reactor->get_sqe();
    io_uring_prep_nop(sqe);
    io->reactor->prep(sqe, &io->completion);
    return;
  }
  apply(io);
}

void PowerLossDevice::apply(backend::BlockIo* io) {
  nvme::Status st = nvme::sc::Success;
  {
    std::lock_guard lk(mu_);
    const uint64_t first = io->offset / bs_, count = io->length / bs_;
    if (epoch_of(io) != epoch_) {
      ++counts_.lost_in_flight;  // power went away while the device held it
      st = io->op == backend::BlockIo::Op::Read ? nvme::sc::UnrecoveredReadError : nvme::sc::WriteFault;
    } else {
      switch (io->op) {
        case backend::BlockIo::Op::Read:
          std::memcpy(io->buffer, volatile_.data() + io->offset, io->length);
          io->read_data = io->buffer;
          break;
        case backend::BlockIo::Op::Write:
        case backend::BlockIo::Op::WriteZeroes:
        case backend::BlockIo::Op::Deallocate:
          if (io->op == backend::BlockIo::Op::Write) std::memcpy(volatile_.data() + io->offset, io->buffer, io->length);
          else std::memset(volatile_.data() + io->offset, 0, io->length);
          if (io->fua) {
            std::memcpy(durable_.data() + io->offset, volatile_.data() + io->offset, io->length);
            std::fill(dirty_.begin() + long(first), dirty_.begin() + long(first + count), false);
            ++counts_.fua_writes;
          } else {
            std::fill(dirty_.begin() + long(first), dirty_.begin() + long(first + count), true);
          }
          ++counts_.writes;
          break;
        case backend::BlockIo::Op::Flush:
          for (uint64_t b = 0; b < dirty_.size(); ++b) {
            if (!dirty_[b]) continue;
            std::memcpy(durable_.data() + b * bs_, volatile_.data() + b * bs_, bs_);
            dirty_[b] = false;
          }
          ++counts_.flushes;
          break;
        case backend::BlockIo::Op::CompareAndWrite:  // not atomic_compare_and_write(): never sent
          st = nvme::sc::InternalError;
          break;
      }
    }
  }
  io->done(io, st);
}

std::vector<uint8_t> PowerLossDevice::power_cut() {
  std::lock_guard lk(mu_);
  ++epoch_;
  ++counts_.cuts;
  volatile_ = durable_;
  std::fill(dirty_.begin(), dirty_.end(), false);
  return durable_;
}

std::vector<uint8_t> PowerLossDevice::current_image() {
  std::lock_guard lk(mu_);
  return volatile_;
}

PowerLossDevice::Counts PowerLossDevice::counts() {
  std::lock_guard lk(mu_);
  return counts_;
}

}  // namespace nvtcp::test
