// One namespace's reservations: who is registered with which key, who holds the
// reservation and of which type, and whether that survives a restart (PTPL). Hosts are
// known by their 128-bit host identifier (Connect's), so every controller of one host shares
// its registration, as NVMe over Fabrics asks.
//
// Reservation commands run on whichever reactor received them, under a mutex; they are rare.
// Every other I/O command asks allowed() first, which costs one relaxed load while no
// reservation is held, the case of almost every namespace.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "nvtcp/status.hpp"
#include "wire/reservations.hpp"

namespace nvtcp::target {

class Reservations {
 public:
  using HostId = std::array<uint8_t, 16>;
  // A notification a command caused for another host (log 80h, through its controllers).
  struct Notice {
    HostId host;
    wire::ReservationNotice type;
  };

  // persist_path: where the state is kept while persistence through power loss is on
  // (file namespaces); empty: PTPL is not supported.
  explicit Reservations(std::string persist_path = {});

  // At start: the state a previous run persisted, if any. Error text, or empty.
  std::string load();
  bool ptpl_capable() const { return !path_.empty(); }
  bool ptpl() const;
  // Feature 83h; false when PTPL is not supported.
  bool set_ptpl(bool on, std::string& err);

  wire::Status do_register(const HostId& host, uint32_t cdw10, const wire::ReservationRegisterData& d,
                           std::vector<Notice>& notices);
  wire::Status acquire(const HostId& host, uint32_t cdw10, const wire::ReservationAcquireData& d,
                       std::vector<Notice>& notices);
  wire::Status release(const HostId& host, uint32_t cdw10, const wire::ReservationReleaseData& d,
                       std::vector<Notice>& notices);
  // Reservation Report into buf (len bytes, zero-filled first): the extended structure only,
  // since fabrics host identifiers are 128 bits.
  wire::Status report(bool extended, uint8_t* buf, uint32_t len) const;

  // Data path: whether host may run a command of the read group (Read, Compare, Verify)
  // or the write group (Write, Write Zeroes, DSM, Copy, Flush) now. Each connection keeps
  // the last decision for its host in an AccessCache, good until the next reservation
  // command changes the state: while a reservation is held, commands take no lock either.
  struct AccessCache {
    uint64_t version = ~0ull;
    bool read = true, write = true;
  };
  bool held() const { return type_seen_.load(std::memory_order_acquire) != 0; }
  bool allowed(const uint8_t* host, bool read_group, bool write_group, AccessCache& cache) const;

  // What a test or the log wants to know.
  uint32_t generation() const;
  wire::ReservationType type() const;

 private:
  struct Registrant {
    HostId host;
    uint64_t key;
  };
  Registrant* find(const HostId& host);
  const Registrant* find(const uint8_t* host) const;
  bool all_registrants_type() const;
  bool is_holder(const HostId& host) const;
  // Drops one registration; a holder's departure ends or passes on the reservation.
  void unregister(size_t index, const HostId& by, std::vector<Notice>& notices);
  // Removes every registrant (but by) with key; notices RegistrationPreempted. False if none.
  bool preempt_key(uint64_t key, const HostId& by, std::vector<Notice>& notices);
  void set_reservation(wire::ReservationType t, const HostId& holder);
  void clear_reservation();
  void released_notices(const HostId& by, std::vector<Notice>& notices) const;
  bool decide(const uint8_t* host, bool read_group, bool write_group) const;  // under mu_
  // After every change: a new version for the caches, and the state written when PTPL is on.
  std::string commit();
  // Writes the state when PTPL is on (temporary file, fsync, rename, fsync of the directory).
  std::string persist() const;

  mutable std::mutex mu_;
  std::vector<Registrant> registrants_;
  wire::ReservationType type_ = wire::ReservationType::None;
  HostId holder_{};                  // meaningful for the types with one holder
  std::atomic<uint8_t> type_seen_{0};  // type_, for held() without the lock
  std::atomic<uint64_t> version_{0};   // bumped by every change (commit())
  uint32_t generation_ = 0;
  bool ptpl_ = false;
  std::string path_;
};

}  // namespace nvtcp::target
