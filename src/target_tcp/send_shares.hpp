// SPDX-License-Identifier: Apache-2.0
// The kernel's send-queue memory, shared out by source address. Every accepted connection gets
// a fixed SO_SNDBUF (reactor::kDefaultSendBufferBytes unless configured), and a socket whose host
// does not read its responses keeps that much queued in the kernel (twice it, in tcp_mem's
// accounting) until send_timeout_ms closes it. Without a bound one address with a thousand
// connections pins about a gigabyte, close to tcp_mem's pressure point, where every connection
// of the machine is slowed. So the send buffers of one address add up to at most its budget,
// and those of the whole target to at most the target's:
//
//   share = max(floor, min(ceiling, pow2 below address_budget / its connections,
//                                    pow2 below target_budget / all connections))
//
// An address with more connections than its budget covers at the ceiling gets smaller send
// buffers (it is slowed: each of its connections has less in flight); when one more would take
// its share under the floor, its newest connections are refused at accept. Other addresses
// keep the ceiling until the whole target is over its budget. Shares move in powers of two, so
// a thousand connections arriving change each socket's buffer a few times, not a thousand. One
// log line when an address is first slowed and one when it is first refused (again only after
// it came back under).
//
// Control path: accept (reactor 0) and connection end (any reactor) take a lock; a connection
// reads its share with one relaxed load on its periodic check and sets SO_SNDBUF only when it
// moved (Lease::apply), never per I/O.
#pragma once
#include <atomic>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace nvtcp::target {

class SendShares {
 public:
  struct Limits {
    uint64_t target_bytes = 0;   // SO_SNDBUF of all connections together (0: no bound)
    uint64_t address_bytes = 0;  // of one source address's connections (0: no bound)
    uint32_t ceiling_bytes = 0;  // a connection's SO_SNDBUF when nothing is short (0: autotuned)
    // With ceiling 0: a share this large or larger is left to autotuning (what autotuning can
    // reach: tcp_wmem's maximum, halved to SO_SNDBUF terms).
    uint32_t autotuned_up_to = 2u << 20;
    uint32_t floor_bytes = 0;    // never less; an address whose next share would be less is refused
    uint32_t max_per_address = 0;  // connections from one address (0: no limit)
  };
  // The share of a connection whose ceiling is "autotuned" while no budget binds: nothing is
  // set, the kernel grows the buffer itself.
  static constexpr uint32_t kAutotuned = 0;

  struct Address;
  // One connection's part: counted until it is destroyed; apply() sets the socket's SO_SNDBUF
  // to its address's share when that moved. An empty lease (tests, the fuzzer) does nothing.
  class Lease {
   public:
    Lease() = default;
    Lease(SendShares* owner, std::shared_ptr<Address> address, int fd, uint32_t applied)
        : owner_(owner), address_(std::move(address)), fd_(fd), applied_(applied) {}
    Lease(Lease&& o) noexcept { *this = std::move(o); }
    Lease& operator=(Lease&& o) noexcept;
    ~Lease() { release(); }
    // Sets the socket's SO_SNDBUF to its address's share if that moved since the last apply (or
    // accept); true if it did. A share that went back to "autotuned" leaves the last one set
    // (a socket cannot be handed back to autotuning).
    bool apply();
    uint32_t applied() const { return applied_; }
    explicit operator bool() const { return address_ != nullptr; }

   private:
    void release();
    SendShares* owner_ = nullptr;
    std::shared_ptr<Address> address_;
    int fd_ = -1;
    uint32_t applied_ = 0;
  };

  enum class Refusal { None, PerAddressLimit, AddressShare };
  struct Admission {
    Lease lease;        // empty when refused
    Refusal refused = Refusal::None;
    uint32_t share = 0;  // the SO_SNDBUF to set at accept (kAutotuned: none)
    std::string log;     // a line to log (slowed or refused for the first time), or empty
  };

  explicit SendShares(Limits limits) : limits_(limits) {}
  SendShares(const SendShares&) = delete;
  SendShares& operator=(const SendShares&) = delete;

  // At accept: counts a connection from address (fd: the socket, for later applies), or
  // refuses it.
  Admission admit(const std::string& address, int fd);

  // fn runs (on the thread that ended the connection, outside the lock) when the target's
  // connections have fallen to half of their peak since the last time, by kManyGone or more:
  // what a crowd's connections allocated is free then, and the allocator keeps it unless told
  // (ListenSockets has a worker give it back to the system).
  static constexpr uint32_t kManyGone = 256;
  void on_many_gone(std::function<void()> fn) { many_gone_ = std::move(fn); }

  const Limits& limits() const { return limits_; }
  uint32_t connections() const;
  uint32_t connections_of(const std::string& address) const;
  // The share of address's connections now (the ceiling for an address with none).
  uint32_t share_of(const std::string& address) const;
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

  // tcp_mem's middle value, where the kernel starts to hold every TCP socket back, in bytes, from
  // /proc (0 if it cannot be read).
  static uint64_t tcp_mem_pressure_bytes();
  // tcp_wmem's maximum in bytes, from /proc (0 if it cannot be read).
  static uint64_t tcp_wmem_max_bytes();

 private:
  void leave(Address& a);
  bool leave_locked(Address& a);  // true: many have gone (on_many_gone)
  uint32_t share_for(uint32_t n_address) const;  // with mu_ held
  void update_all();                              // with mu_ held: the target's step moved

  Limits limits_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<Address>> addresses_;
  uint32_t total_ = 0;
  uint32_t peak_ = 0;  // the most connections since many_gone_ last ran
  std::function<void()> many_gone_;
  uint64_t target_step_ = 0;  // pow2 below target_bytes / total_ (UINT64_MAX: no bound), last computed
  std::atomic<uint64_t> refused_{0};
};

}  // namespace nvtcp::target
