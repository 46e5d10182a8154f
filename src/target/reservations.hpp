// SPDX-License-Identifier: Apache-2.0
// One namespace's reservations: who is registered with which key, who holds the
// reservation and of which type, and whether that survives a restart (PTPL). Hosts are
// known by their 128-bit host identifier (Connect's), so every controller of one host shares
// its registration, as NVMe over Fabrics asks.
//
// Reservation commands run on whichever reactor received them, under a mutex; they are rare.
// Every other I/O command asks allowed() first, which costs one relaxed load while no
// reservation is held, the case of almost every namespace.
//
// What any host can make this cost is bounded: at most max_registrants registrants (a
// registration outlives its host's connections, as NVMe requires, so the bound is this
// limit and not an expiry); every command is linear in them; and with persistence on, the
// file is written by one writer thread per namespace, never by a reactor and never under
// the mutex. The writer always writes the latest state, so the commands that arrive while
// it writes share the next fsync.
#pragma once
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nvtcp/status.hpp"
#include "wire/reservations.hpp"

namespace nvtcp::target {

// Preempt and Abort: the preempted hosts' commands that have not reached the device yet end
// with Command Aborted due to Preempt and Abort, wherever they wait. A command takes the
// namespace's epoch when it is parsed (one load); when it resumes from a wait it asks
// aborted_since() with that epoch, which takes the lock only if a Preempt and Abort happened
// meanwhile. One entry per host ever preempted so, bounded by the hosts that registered.
class PreemptAborts {
 public:
  using HostId = std::array<uint8_t, 16>;
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  bool aborted_since(const uint8_t* host, uint64_t epoch) const;
  // A Preempt and Abort preempted these hosts (none: nothing changes).
  void record(const std::vector<HostId>& hosts);

 private:
  mutable std::mutex mu_;
  std::atomic<uint64_t> epoch_{0};
  std::vector<std::pair<HostId, uint64_t>> at_;  // each host, the epoch it was last aborted at
};

class Reservations {
 public:
  using HostId = std::array<uint8_t, 16>;
  // A notification a command caused for another host (log 80h, through its controllers).
  struct Notice {
    HostId host;
    wire::ReservationNotice type;
  };

  // Registrants per namespace: a cluster has a handful of hosts; a host that invents host
  // IDs (one per Connect) is stopped here.
  static constexpr uint32_t kDefaultMaxRegistrants = 256;
  // Reservation Report's REGCTL is 16 bits: the limit must fit it, so the count never wraps.
  static constexpr uint32_t kMaxRegistrantsCeiling = 0xFFFF;

  // persist_path: where the state is kept while persistence through power loss is on
  // (file namespaces); empty: PTPL is not supported.
  explicit Reservations(std::string persist_path = {}, uint32_t max_registrants = kDefaultMaxRegistrants);
  ~Reservations();  // finishes a write in progress, then stops the writer
  Reservations(const Reservations&) = delete;
  Reservations& operator=(const Reservations&) = delete;

  // At start: the state a previous run persisted, if any. Never fails the start: a file that
  // cannot be trusted (not a regular file, a symlink, too large, unparsable, inconsistent,
  // more registrants than the limit) turns persistence off for this namespace only (PTPL no
  // longer offered, the file left alone for the operator) and the reason is returned for
  // the log. Empty: restored, or nothing to restore.
  std::string load();
  bool ptpl_capable() const { return !path_.empty(); }
  bool ptpl() const;
  // Feature 83h; false when PTPL is not supported or the state could not be written.
  // Returns once the change is durable (the file written, or removed).
  bool set_ptpl(bool on, std::string& err);

  // A reservation command's result: its status, and the state version that must be durable
  // before the command may complete (0: nothing to wait for). Hand the ticket to
  // written() (a reactor, which looks again on a timer) or wait_durable() (a thread that
  // may block).
  struct Outcome {
    nvme::Status status;
    uint64_t durable_ticket = 0;
  };
  Outcome apply_register(const HostId& host, uint32_t cdw10, const wire::ReservationRegisterData& d,
                         std::vector<Notice>& notices);
  Outcome apply_acquire(const HostId& host, uint32_t cdw10, const wire::ReservationAcquireData& d,
                        std::vector<Notice>& notices);
  Outcome apply_release(const HostId& host, uint32_t cdw10, const wire::ReservationReleaseData& d,
                        std::vector<Notice>& notices);
  // Feature 83h as set_ptpl() does it, without waiting: the ticket to hand to written() (0:
  // nothing to write), or Invalid Field when the namespace cannot persist (err says why).
  Outcome apply_ptpl(bool on, std::string& err);
  // Blocks until the write that covers ticket (or a later one) has been tried; true when it
  // reached the disk. Takes no namespace lock while it waits.
  bool wait_durable(uint64_t ticket);
  // Without waiting: false while the write that covers ticket is still to come; once it
  // has been tried, true, with durable saying whether it reached the disk. For a reactor,
  // which looks again on a timer: the writer thread then never reaches into a reactor (one
  // that a target shutting down may already have destroyed).
  bool written(uint64_t ticket, bool& durable);

  // The same commands, completing once durable (the caller's thread waits, without the
  // namespace mutex, while the writer writes; commands of other reactors share the fsync).
  nvme::Status do_register(const HostId& host, uint32_t cdw10, const wire::ReservationRegisterData& d,
                           std::vector<Notice>& notices);
  nvme::Status acquire(const HostId& host, uint32_t cdw10, const wire::ReservationAcquireData& d,
                       std::vector<Notice>& notices);
  nvme::Status release(const HostId& host, uint32_t cdw10, const wire::ReservationReleaseData& d,
                       std::vector<Notice>& notices);
  // Reservation Report into buf (len bytes, zero-filled first): the extended structure only,
  // since fabrics host identifiers are 128 bits. Linear in the registrants.
  nvme::Status report(bool extended, uint8_t* buf, uint32_t len) const;

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

  // Who Preempt and Abort aborted, and when (PreemptAborts).
  const PreemptAborts& aborts() const { return aborts_; }

  // What a test or the log wants to know.
  uint32_t generation() const;
  wire::ReservationType type() const;
  uint32_t max_registrants() const { return max_registrants_; }
  size_t registrant_count() const;
  // State files written and synced so far (each is one fsync of the file and one of the
  // directory): what shows that commands share writes.
  uint64_t persist_writes() const { return persist_writes_.load(std::memory_order_relaxed); }
  // Tests: runs on the writer thread after it has taken a snapshot of the state (the
  // namespace mutex released) and before it touches the file.
  void set_before_write_hook(std::function<void()> hook);

 private:
  struct Registrant {
    HostId host;
    uint64_t key;
  };
  // What the writer writes: the state as one command left it.
  struct Snapshot {
    uint64_t ticket = 0;
    bool ptpl = false;
    uint32_t generation = 0;
    wire::ReservationType type = wire::ReservationType::None;
    HostId holder{};
    std::vector<Registrant> registrants;
  };

  Registrant* find(const HostId& host);
  const Registrant* find(const uint8_t* host) const;
  // Whether a registrant holds the reservation: O(1), with no search.
  bool holds(const Registrant& r) const;
  // Drops one registration; a holder's departure ends or passes on the reservation.
  void unregister(size_t index, const HostId& by, std::vector<Notice>& notices);
  // Removes every registrant (but by) with key, in one pass; notices RegistrationPreempted.
  // False if none.
  bool preempt_key(uint64_t key, const HostId& by, std::vector<Notice>& notices);
  void set_reservation(wire::ReservationType t, const HostId& holder);
  void clear_reservation();
  void released_notices(const HostId& by, std::vector<Notice>& notices) const;
  bool decide(const uint8_t* host, bool read_group, bool write_group) const;  // under mu_
  // After every change (under mu_): a new version for the caches when who may do what can
  // have changed and, while the state belongs on disk (PTPL on, or just turned off so the
  // file must go), a ticket for the writer. The one place a change is recorded.
  enum class Access { MayHaveChanged, Unchanged };
  uint64_t changed(Access access, bool persistence_changed = false);
  // Outside mu_: wakes the writer for ticket (starting it the first time).
  void request_write(uint64_t ticket);
  Outcome finish(nvme::Status st, uint64_t ticket);
  nvme::Status wait_for(const Outcome& o);
  void writer_loop();
  // Writes (or, PTPL off, removes) the state file: temporary file created exclusively,
  // written, fsynced, renamed over the old one, then the directory fsynced. Error or empty.
  std::string write_state(const Snapshot& s) const;

  mutable std::mutex mu_;
  std::vector<Registrant> registrants_;
  wire::ReservationType type_ = wire::ReservationType::None;
  HostId holder_{};                  // meaningful for the types with one holder
  std::atomic<uint8_t> type_seen_{0};  // type_, for held() without the lock
  // Bumped by changes that can change access (changed()): every connection with a cached
  // decision then takes mu_ once on its next command, so a key Replace loop must not bump it.
  std::atomic<uint64_t> version_{0};
  PreemptAborts aborts_;
  uint32_t generation_ = 0;
  bool ptpl_ = false;
  uint64_t state_ticket_ = 0;        // the last change that must reach the file (under mu_)
  bool full_reported_ = false;       // the registrant limit was logged since it was last hit
  std::string path_;
  const uint32_t max_registrants_;

  // The writer (its own lock; never taken together with mu_).
  std::mutex persist_mu_;
  std::condition_variable persist_cv_;     // the writer waits for work here
  std::condition_variable durable_cv_;     // wait_durable() waits here
  uint64_t requested_ticket_ = 0;          // highest ticket asked for
  uint64_t attempted_ticket_ = 0;          // highest ticket a write has covered, well or not
  uint64_t durable_ticket_ = 0;            // highest ticket written and synced
  std::function<void()> before_write_hook_;
  bool stopping_ = false;
  std::thread writer_;
  std::atomic<uint64_t> persist_writes_{0};
};

}  // namespace nvtcp::target
