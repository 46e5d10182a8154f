// SPDX-License-Identifier: Apache-2.0
// Subsystems and their namespaces, shared by every reactor. The namespace table is an array of
// atomic pointers by NSID, read without locks; namespaces come and go by RPC (control thread):
// one that goes is first taken out of the table, then every reactor passes a turn (after which
// none can still be finding it), then the commands that hold it finish (counted per reactor),
// and only then is it destroyed. The controller table changes only on Connect and teardown,
// under a mutex that the data path never takes; the allowed hosts are a HostAccess.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/block_device.hpp"
#include "nvtcp/log_pages.hpp"
#include "nvtcp/sqe.hpp"
#include "nvtcp/status.hpp"
#include "target/config.hpp"
#include "target/host_access.hpp"
#include "target/io_metrics.hpp"
#include "target/qos.hpp"
#include "target/reservations.hpp"
#include "target/subsystem_listeners.hpp"

namespace nvtcp::target {

class Controller;

// Makes a fused Compare and Write atomic against every other write to its namespace, from
// any reactor. Writes count themselves in flight, each reactor in its own slot (no shared
// cache line on the data path); a fused operation takes the fence, waits until no write is
// in flight, compares and writes, and lets go. A write that finds the fence taken waits.
//
// Turns, so that neither side starves the other: a write that had to wait registers itself
// (once) as waiting, and while any write waits no fused operation may take the fence. So
// after each fused operation every write it held back goes first, and a fused operation
// waits only for those; writes that find the fence free never wait and never register.
// (Without this, two hosts issuing fused pairs back to back kept the fence owned nearly all
// the time and another host's writes, retrying on a timer, got through by chance.)
class WriteFence {
 public:
  void init(uint32_t reactors) {
    slots_ = std::make_unique<Slot[]>(reactors);
    nslots_ = reactors;
  }
  // A write may start (and is counted) unless a fused operation holds the fence. waiting is
  // the write's own flag: set here when it must wait, cleared when it starts.
  bool begin_write(uint32_t slot, bool& waiting) {
    slots_[slot].n.fetch_add(1, std::memory_order_seq_cst);
    if (owned_.load(std::memory_order_seq_cst) == 0) {
      stop_waiting(waiting);
      return true;
    }
    slots_[slot].n.fetch_sub(1, std::memory_order_release);
    if (!waiting) {
      waiting = true;
      writers_waiting_.fetch_add(1, std::memory_order_seq_cst);
    }
    return false;
  }
  // A waiting write that will not start after all (its connection closed).
  void stop_waiting(bool& waiting) {
    if (!waiting) return;
    waiting = false;
    writers_waiting_.fetch_sub(1, std::memory_order_seq_cst);
  }
  void end_write(uint32_t slot) { slots_[slot].n.fetch_sub(1, std::memory_order_release); }
  // False while another fused operation holds the fence or a write it held back waits.
  bool try_own() {
    if (writers_waiting_.load(std::memory_order_seq_cst) != 0) return false;
    uint32_t expected = 0;
    return owned_.compare_exchange_strong(expected, 1, std::memory_order_seq_cst);
  }
  // With the fence owned: no write still in flight.
  bool drained() const {
    for (uint32_t i = 0; i < nslots_; ++i)
      if (slots_[i].n.load(std::memory_order_acquire) != 0) return false;
    return true;
  }
  void release() { owned_.store(0, std::memory_order_release); }
  uint32_t writers_waiting() const { return writers_waiting_.load(std::memory_order_relaxed); }
  bool owned() const { return owned_.load(std::memory_order_relaxed) != 0; }  // for tests and statistics

 private:
  struct alignas(64) Slot {
    std::atomic<uint32_t> n{0};
  };
  std::atomic<uint32_t> owned_{0};
  std::atomic<uint32_t> writers_waiting_{0};
  std::unique_ptr<Slot[]> slots_;
  uint32_t nslots_ = 0;
};

// The commands that hold a namespace, counted per reactor: each slot is written by its reactor
// only (a plain load and store, no locked instruction), read by the control thread waiting for
// a removed namespace to drain.
class NamespaceHolds {
 public:
  void init(uint32_t reactors) {
    slots_ = std::make_unique<Slot[]>(reactors);
    nslots_ = reactors;
  }
  void hold(uint32_t slot) { slots_[slot].n.store(slots_[slot].n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  void drop(uint32_t slot) { slots_[slot].n.store(slots_[slot].n.load(std::memory_order_relaxed) - 1, std::memory_order_release); }
  uint64_t total() const {
    uint64_t t = 0;
    for (uint32_t i = 0; i < nslots_; ++i) t += slots_[i].n.load(std::memory_order_acquire);
    return t;
  }

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> n{0};
  };
  std::unique_ptr<Slot[]> slots_;
  uint32_t nslots_ = 0;
};

struct Namespace {
  uint32_t nsid = 0;
  std::string name;              // NamespaceConfig::name
  uint32_t index = 0;            // = nsid: its row in per-namespace counters (sized by max_namespaces)
  std::unique_ptr<backend::BlockDevice> device;
  uint32_t block_size = 512;
  uint8_t lbads = 9;             // log2(block_size)
  // Changes only when the backing file is resized (Subsystem::revalidate_namespaces); every
  // command reads it once for its range check.
  std::atomic<uint64_t> blocks{0};
  uint8_t nguid[16] = {};
  uint8_t uuid[16] = {};
  uint8_t eui64[8] = {};
  // Its ANA group: 1 .. the subsystem's max_namespaces (ANAGRPMAX). Read by every I/O command
  // (Controller::ana_status); moved live by nvmf_subsystem_set_ns_ana_group.
  std::atomic<uint32_t> anagrpid{1};
  Reservations reservations;  // persisted next to a regular file's image (PTPL)
  WriteFence fence;           // one slot per reactor
  NamespaceHolds holds;       // one slot per reactor
  IoMetrics metrics;   // one slot per reactor (the metrics endpoint)
  QosLimiter qos;      // its bdev's rate limits, on every reactor (IoCommands::submit)
  // Masking (SPDK's no_auto_visible): without auto_visible only the hosts named here see the
  // namespace. The list changes on the control thread under both of the subsystem's locks
  // (Subsystem::set_namespace_visible); commands never read it: each controller keeps its own
  // answer (Controller::find_namespace), worked out as it joins and whenever the list changes.
  bool auto_visible = true;
  std::set<std::string> visible_hosts;
  bool visible_to(const std::string& hostnqn) const { return auto_visible || visible_hosts.count(hostnqn) != 0; }

  explicit Namespace(std::string reservations_path = {},
                     uint32_t max_registrants = Reservations::kDefaultMaxRegistrants)
      : reservations(std::move(reservations_path), max_registrants) {}
};

struct Listener {
  std::string address;
  uint16_t port = 0;
  uint16_t portid = 0;  // 1, 2, ... in configuration order; 0 is the discovery-only port
  bool ipv6 = false;
  bool wildcard = false;  // 0.0.0.0 or ::: advertised as the address each host reached
  bool tls_required = false;  // connections start with TLS (discovery log: TREQ, TSAS)
};

class Subsystem : public std::enable_shared_from_this<Subsystem> {
 public:
  // reactors: the target's reactor count (one metrics slot each).
  Subsystem(const SubsystemConfig& cfg, bool discovery, uint32_t reactors);

  const std::string& nqn() const { return nqn_; }
  const std::string& serial() const { return serial_; }
  const std::string& model() const { return model_; }
  bool is_discovery() const { return discovery_; }
  // Who may come in, with which keys (read at Connect and in the TLS handshake; RPC changes it).
  HostAccess& hosts() { return hosts_; }
  const HostAccess& hosts() const { return hosts_; }
  // Takes the host off the allowed list (false: it was not on it) and, unless any host is
  // allowed, tears its controllers down: their connections close within a controller poll.
  bool remove_host(const std::string& hostnqn);
  // The controllers now (for listing).
  std::vector<std::shared_ptr<Controller>> controllers() const;
  // The listeners hosts reach it through, and its ANA states and I/O counters through each.
  SubsystemListeners& listeners() { return listeners_; }
  const SubsystemListeners& listeners() const { return listeners_; }
  // Ends the controllers of hosts that came in through portid (their listener was taken from
  // this subsystem); returns how many.
  size_t tear_down_controllers_on(uint16_t portid);
  // Deleted (RPC): no controller is added any more, and those there are torn down (their
  // queues close within a controller poll). Returns how many.
  size_t mark_deleted();
  bool deleted() const { return deleted_.load(std::memory_order_acquire); }

  // Asymmetric Namespace Access (SubsystemConfig::ana_reporting). Groups are 1 ..
  // max_namespaces. Without ANA reporting every path stays optimized.
  bool ana_reporting() const { return ana_reporting_; }
  // Sets group grp (0: every group) to state through listener portid, and gives every
  // controller that came in through it an ANA change notice when something changed. Returns
  // the groups whose state changed (control path).
  std::vector<uint32_t> set_ana_state(uint16_t portid, uint32_t grp, nvme::AnaState state);
  // The groups that have a namespace now, ascending (log 0Ch lists those).
  std::vector<uint32_t> ana_groups() const;

  // The most namespaces it can hold, and the highest NSID (NN in Identify Controller).
  uint32_t max_namespaces() const { return max_namespaces_; }
  // The controller IDs it hands out (SPDK's min_cntlid and max_cntlid).
  std::pair<uint16_t, uint16_t> cntlid_range() const { return {min_cntlid_, max_cntlid_}; }
  Namespace* find_namespace(uint32_t nsid) const {
    return nsid != 0 && nsid <= max_namespaces_ ? ns_by_id_[nsid].load(std::memory_order_acquire) : nullptr;
  }
  // The active namespaces now, by NSID (control and admin paths; each pointer is good until the
  // calling reactor's turn ends, or on the control thread until the namespace is removed).
  std::vector<Namespace*> namespaces() const;
  // Adds a namespace at its NSID (free, from 1 to max_namespaces); false if that is taken.
  // Control path; hosts hear of it through notify_namespace_changed. Each controller learns
  // whether its host sees it before any command can find it.
  bool add_namespace(std::unique_ptr<Namespace> ns);
  // nvmf_ns_add_host / nvmf_ns_remove_host: hostnqn sees namespace nsid from now on, or no
  // longer; that host's controllers get a namespace attribute notice with nsid in their
  // changed-namespace log when it changed for them. 0, or SPDK's errno: -ENOENT (no such
  // namespace), -EPERM (it is seen by every host: no_auto_visible was not set).
  int set_namespace_visible(uint32_t nsid, const std::string& hostnqn, bool visible);
  // nvmf_subsystem_set_ns_ana_group: namespace nsid moves to ANA group grp. Every controller
  // gets a namespace attribute notice for it and, with ANA reporting, an ANA change notice (the
  // ANA log lists it under its new group, with a new CHGCNT). 0, -EINVAL (grp not 1 ..
  // max_namespaces) or -ENOENT (no such namespace).
  int set_namespace_ana_group(uint32_t nsid, uint32_t grp);
  // Takes the namespace out of the table: no new command finds it. The caller must let every
  // reactor pass a turn and wait for its holds to drain before destroying it (Target does).
  std::unique_ptr<Namespace> detach_namespace(uint32_t nsid);
  // Every controller gets a namespace attribute notice with nsid in its changed-namespace log
  // (a namespace added, removed or resized).
  void notify_namespace_changed(uint32_t nsid);
  // Every controller gets a discovery log change notice (the discovery subsystem's, whose
  // hosts asked for them: persistent discovery controllers).
  void notify_discovery_log_changed();
  // Some namespace can lose a completed write until it is flushed (Identify VWC).
  bool volatile_write_cache() const;
  // Feature 06h: the cache is on for some namespace that has one.
  bool write_cache_enabled() const;
  void set_write_cache_enabled(bool on);

  // Looks at each namespace's backing again (Target: once a second, on reactor 0): a
  // namespace whose size changed takes the new size, and every controller gets a namespace
  // attribute notice for it (with the NSID in its changed-namespace log), as nvmet does
  // when told to revalidate. Returns the NSIDs that changed.
  std::vector<uint32_t> revalidate_namespaces();

  // Reservation notices a command caused: to every controller of each host named.
  void notify_reservation(uint32_t nsid, const std::vector<Reservations::Notice>& notices);

  // The controller added, or null if the subsystem was deleted meanwhile.
  std::shared_ptr<Controller> add_controller(std::shared_ptr<Controller> c);
  std::shared_ptr<Controller> find_controller(uint16_t cntlid) const;
  void remove_controller(uint16_t cntlid);
  uint16_t allocate_cntlid();
  size_t controller_count() const;

 private:
  std::string nqn_, serial_, model_;
  bool discovery_;
  HostAccess hosts_;
  std::atomic<bool> deleted_{false};
  uint32_t max_namespaces_;
  std::unique_ptr<std::atomic<Namespace*>[]> ns_by_id_;  // [0 .. max_namespaces_], 0 unused
  mutable std::mutex ns_mu_;                             // namespaces_ (control path)
  std::map<uint32_t, std::unique_ptr<Namespace>> namespaces_;
  bool ana_reporting_ = false;
  SubsystemListeners listeners_;
  uint16_t min_cntlid_, max_cntlid_;

  mutable std::mutex mu_;
  std::unordered_map<uint16_t, std::shared_ptr<Controller>> controllers_;
  uint16_t next_cntlid_;
};

}  // namespace nvtcp::target
