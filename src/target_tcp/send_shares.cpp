// SPDX-License-Identifier: Apache-2.0
#include "target_tcp/send_shares.hpp"

#include <fmt/format.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <limits>

namespace nvtcp::target {

struct SendShares::Address {
  explicit Address(std::string n) : name(std::move(n)) {}
  const std::string name;
  std::atomic<uint32_t> share{0};  // what its connections set (kAutotuned: nothing)
  uint32_t connections = 0;
  uint32_t refused_at = 0;  // connections it had when last refused (0: not refusing)
  bool slowed = false;      // its share is under the ceiling (logged once when it went under)
};

namespace {

constexpr uint64_t kUnbounded = std::numeric_limits<uint64_t>::max();

uint64_t pow2_below(uint64_t v) { return v ? std::bit_floor(v) : 0; }

// Value `which` of a sysctl of three numbers (tcp_mem: pages; tcp_wmem: bytes); 0 if unreadable.
uint64_t sysctl_triple(const char* path, int which) {
  FILE* f = std::fopen(path, "re");
  if (!f) return 0;
  unsigned long long v[3] = {};
  const int got = std::fscanf(f, "%llu %llu %llu", &v[0], &v[1], &v[2]);
  std::fclose(f);
  return got == 3 ? v[which] : 0;
}

std::string size_text(uint64_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return fmt::format("{} MiB", b >> 20);
  if (b >= 1024 && b % 1024 == 0) return fmt::format("{} KiB", b >> 10);
  return fmt::format("{} bytes", b);
}

}  // namespace

SendShares::Lease& SendShares::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    release();
    owner_ = o.owner_;
    address_ = std::move(o.address_);
    fd_ = o.fd_;
    applied_ = o.applied_;
    o.owner_ = nullptr;
    o.fd_ = -1;
  }
  return *this;
}

void SendShares::Lease::release() {
  if (owner_ && address_) owner_->leave(*address_);
  owner_ = nullptr;
  address_.reset();
  fd_ = -1;
}

bool SendShares::Lease::apply() {
  if (!address_ || fd_ < 0) return false;
  const uint32_t share = address_->share.load(std::memory_order_relaxed);
  if (share == applied_ || share == kAutotuned) return false;
  const int v = int(share);
  if (::setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)) != 0) return false;
  applied_ = share;
  return true;
}

uint32_t SendShares::share_for(uint32_t n_address) const {
  uint64_t s = limits_.ceiling_bytes ? limits_.ceiling_bytes : kUnbounded;
  if (limits_.address_bytes && n_address) s = std::min(s, pow2_below(limits_.address_bytes / n_address));
  if (limits_.target_bytes && total_) s = std::min<uint64_t>(s, target_step_);
  if (s == kUnbounded || (!limits_.ceiling_bytes && s >= limits_.autotuned_up_to)) return kAutotuned;
  return uint32_t(std::max<uint64_t>(s, limits_.floor_bytes));
}

void SendShares::update_all() {
  for (auto& [name, a] : addresses_) a->share.store(share_for(a->connections), std::memory_order_relaxed);
}

SendShares::Admission SendShares::admit(const std::string& address, int fd) {
  std::lock_guard lk(mu_);
  Admission out;
  std::shared_ptr<Address>& a = addresses_[address];
  if (!a) a = std::make_shared<Address>(address);
  const bool over_limit = limits_.max_per_address && a->connections >= limits_.max_per_address;
  const bool over_share = !over_limit && limits_.address_bytes && limits_.floor_bytes &&
                          limits_.address_bytes / (uint64_t(a->connections) + 1) < limits_.floor_bytes;
  if (over_limit || over_share) {
    out.refused = over_limit ? Refusal::PerAddressLimit : Refusal::AddressShare;
    const uint64_t n = refused_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (!a->refused_at) {
      out.log = over_limit
                    ? fmt::format("connections from {} refused: it has {} open (max_connections_per_address); "
                                  "{} refused so far",
                                  address, a->connections, n)
                    : fmt::format("connections from {} refused: its {} open hold its whole share of the kernel's "
                                  "send buffers ({}, at least {} each: address_send_buffer_bytes); its newest are "
                                  "closed at accept until some end; {} refused so far",
                                  address, a->connections, size_text(limits_.address_bytes),
                                  size_text(limits_.floor_bytes), n);
    }
    a->refused_at = a->connections;
    if (a->connections == 0) addresses_.erase(address);
    return out;
  }
  ++a->connections;
  ++total_;
  peak_ = std::max(peak_, total_);
  const uint64_t step = limits_.target_bytes ? pow2_below(limits_.target_bytes / total_) : kUnbounded;
  if (step != target_step_) {
    target_step_ = step;
    update_all();
  } else {
    a->share.store(share_for(a->connections), std::memory_order_relaxed);
  }
  out.share = a->share.load(std::memory_order_relaxed);
  const bool slowed = out.share != kAutotuned && (!limits_.ceiling_bytes || out.share < limits_.ceiling_bytes);
  if (slowed && !a->slowed)
    out.log = fmt::format("connections from {}: {} open, their send buffers cut to {} each ({} for the address, "
                          "{} for the target)",
                          address, a->connections, size_text(out.share), size_text(limits_.address_bytes),
                          size_text(limits_.target_bytes));
  a->slowed = slowed;
  out.lease = Lease(this, a, fd, out.share);
  return out;
}

void SendShares::leave(Address& a) {
  bool many_gone = false;
  {
    std::lock_guard lk(mu_);
    many_gone = leave_locked(a);
  }
  if (many_gone && many_gone_) many_gone_();
}

bool SendShares::leave_locked(Address& a) {
  --a.connections;
  --total_;
  // Refusing again is logged again once the address has fallen well under where it stopped.
  if (a.refused_at && a.connections < a.refused_at - a.refused_at / 4) a.refused_at = 0;
  const uint64_t step = limits_.target_bytes && total_ ? pow2_below(limits_.target_bytes / total_) : kUnbounded;
  if (step != target_step_) {
    target_step_ = step;
    update_all();
  } else {
    a.share.store(share_for(a.connections), std::memory_order_relaxed);
  }
  const uint32_t share = a.share.load(std::memory_order_relaxed);
  a.slowed = share != kAutotuned && (!limits_.ceiling_bytes || share < limits_.ceiling_bytes);
  if (a.connections == 0) addresses_.erase(a.name);  // the last lease still holds it
  if (peak_ - total_ < kManyGone || total_ > peak_ / 2) return false;
  peak_ = total_;
  return true;
}

uint32_t SendShares::connections() const {
  std::lock_guard lk(mu_);
  return total_;
}

uint32_t SendShares::connections_of(const std::string& address) const {
  std::lock_guard lk(mu_);
  auto it = addresses_.find(address);
  return it == addresses_.end() ? 0 : it->second->connections;
}

uint32_t SendShares::share_of(const std::string& address) const {
  std::lock_guard lk(mu_);
  auto it = addresses_.find(address);
  return it == addresses_.end() ? share_for(1) : it->second->share.load(std::memory_order_relaxed);
}

uint64_t SendShares::tcp_mem_pressure_bytes() {
  return sysctl_triple("/proc/sys/net/ipv4/tcp_mem", 1) * uint64_t(::sysconf(_SC_PAGESIZE));
}

uint64_t SendShares::tcp_wmem_max_bytes() { return sysctl_triple("/proc/sys/net/ipv4/tcp_wmem", 2); }

}  // namespace nvtcp::target
