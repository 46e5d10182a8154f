// SPDX-License-Identifier: Apache-2.0
// The target's configuration changed while it serves (RPC, on the control thread): devices by
// name, namespaces added and removed, a NULL device resized, subsystems and listeners created
// and taken away, ANA states. Reactors never lock for it: a namespace appears in its
// subsystem's table with one atomic store, and one taken away is destroyed only after every
// reactor has passed a turn and the commands holding it are done (Subsystem, NamespaceHolds).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "target/config.hpp"
#include "target/target_state.hpp"

namespace nvtcp::target {

class Target;

// Whether a LiveConfig error says that what it names is in the middle of another change (a bdev
// being resized, or being removed from its namespace): the caller may try again once that is done.
inline bool busy_error(const std::string& err) {
  return err.find("being resized") != std::string::npos || err.find("being removed") != std::string::npos;
}

// From the control thread only (never a reactor: these wait for the reactors), one change at
// a time. Each returns an error, or empty.
class LiveConfig {
 public:
  explicit LiveConfig(Target& target) : t_(target) {}
  LiveConfig(const LiveConfig&) = delete;
  LiveConfig& operator=(const LiveConfig&) = delete;

  // A device by name (nc: name, type, size, path, block size) for namespaces to take later:
  // prepare_bdev, make_bdev and adopt_bdev in a row.
  std::string create_bdev(const NamespaceConfig& nc);
  // create_bdev in three steps, for a caller that makes the device off its thread (the RPC
  // server's slow methods): making one can wait on the network or a file for as long as a
  // Ceph cluster's timeout, and no lock of the target is held meanwhile.
  struct BdevInTheMaking {
    NamespaceConfig nc;  // checked; its uuid canonical, or empty (chosen once the device is made)
    unsigned reactors = 0;
    DeviceFactory factory;
    std::unique_ptr<backend::BlockDevice> device;  // what make_bdev made
    std::string err;                               // or why it could not
  };
  // The checks (the name well formed and free, the uuid, an RBD cluster resolved to its
  // settings): empty with out ready for make_bdev, or why not.
  std::string prepare_bdev(const NamespaceConfig& nc, BdevInTheMaking& out);
  // Makes the device from what prepare_bdev gave and nothing else of the target: any thread,
  // for as long as it takes, while the target changes.
  static void make_bdev(BdevInTheMaking& b);
  // Adds the device made, checking again what may have changed since prepare_bdev (the name
  // taken by another create, the uuid, the cluster unregistered); a device not added is closed.
  std::string adopt_bdev(BdevInTheMaking b);
  // Deletes a device; one a namespace has is removed from it first (as SPDK hot-removes), once
  // the commands on it are done. Refused while it is being resized, or while its namespace is
  // being removed. begin_delete_bdev, drain and settle in a row.
  std::string delete_bdev(const std::string& name);
  // A NULL or RBD device's new size (begin_resize, the device's resize, end_resize); the hosts
  // of its namespace are told.
  std::string resize_bdev(const std::string& name, uint64_t bytes);
  // resize_bdev in three steps, for a caller that waits for the device's resize (an RBD image's
  // cluster) off its thread: begin_resize checks and gives the device, which stays alive (the
  // bdev cannot be deleted, or resized again) until end_resize; device->resize(bytes) may run
  // on any thread meanwhile (devices resize beside their I/O); end_resize records its outcome.
  std::string begin_resize(const std::string& name, uint64_t bytes, backend::BlockDevice*& device);
  std::string end_resize(const std::string& name, uint64_t bytes, bool resized);
  // A namespace of subnqn over the device named nc.name, at nc.nsid (0: the lowest free), with
  // nc's identifiers if given; its NSID comes back in nsid. The subsystem's controllers get a
  // namespace attribute notice (hosts rescan).
  std::string add_namespace(const std::string& subnqn, NamespaceConfig nc, uint32_t& nsid);
  // Takes a namespace away: new commands for it fail (Invalid Namespace), commands already
  // under way complete as they would have, then its device goes back to its bdev and hosts are
  // told. Waits for those commands (a device that never answers: gives up after 60 s).
  // begin_remove_namespace, drain and settle in a row.
  std::string remove_namespace(const std::string& subnqn, uint32_t nsid);
  // Sets the ANA state of group anagrpid (0: every group) of subnqn as hosts see it through
  // the listener at address:port (as configured; the port it really got); the controllers that
  // came in through it get an ANA change notice. Subsystems without ANA reporting refuse.
  std::string set_ana_state(const std::string& subnqn, const std::string& address, uint16_t port, uint32_t anagrpid,
                            nvme::AnaState state);
  // A subsystem (nqn, serial, model, max_namespaces, allow_any_host, hosts, ana_reporting of
  // sc; no namespaces, no listeners yet: RPC adds them). The NQN must be new.
  std::string create_subsystem(SubsystemConfig sc);
  // Takes a subsystem away: Connect to it fails from now on, its controllers are torn down
  // (their connections close), the commands under way on its namespaces finish, and their
  // devices go back to their bdevs. Hosts of other subsystems are untouched.
  // begin_delete_subsystem, drain and settle in a row.
  std::string delete_subsystem(const std::string& nqn);

  // Namespaces taken away (remove_namespace, delete_subsystem, delete_bdev of a bdev a namespace
  // has) in three steps, for a caller that waits for the commands still on them off its thread
  // (the RPC server's slow methods): a device that stopped answering (a Ceph cluster gone, a
  // file on a hung network file system) keeps them for up to 60 s, and no lock of the target is
  // held meanwhile. Their bdevs stay claimed, marked leaving, until settle: a bdev leaving can
  // be neither deleted, resized nor added to a namespace (each says it is "being removed").
  struct Leaving {
    enum class What { Namespace, Subsystem, Bdev } what = What::Namespace;
    std::string subnqn;  // whose namespaces they were
    // Detached (no command finds them) and the reactors past a turn since: the job's alone
    // but for their commands still under way, which only drop their holds.
    std::vector<std::unique_ptr<Namespace>> nss;
    struct Drained {
      uint64_t held = 0;       // commands still on it when the wait ended (0: all done)
      uint64_t waited_ms = 0;  // how long they took
    };
    std::vector<Drained> drained;  // drain: one per namespace
    size_t controllers = 0;        // Subsystem: its controllers torn down
    std::string bdev;              // Bdev: its name
    // Bdev: the device to close (an unclaimed bdev's, or its namespace's once drained); drain
    // closes it.
    std::unique_ptr<backend::BlockDevice> device;
  };
  // The first step of each, on the control thread: the checks, then the namespaces detached
  // (hosts told, reactors quiesced) into out; an unclaimed bdev deleted leaves the table at once
  // with its device in out. Empty, or why not (nothing changed).
  std::string begin_remove_namespace(const std::string& subnqn, uint32_t nsid, Leaving& out);
  std::string begin_delete_subsystem(const std::string& nqn, Leaving& out);
  std::string begin_delete_bdev(const std::string& name, Leaving& out);
  // Waits for the commands on l's namespaces (up to 60 s in all) and, deleting a bdev, closes
  // its device if none is left on it. Any thread, for as long as it takes: it reaches l alone
  // (the holds the reactors drop are atomic).
  static void drain(Leaving& l);
  // The last step, on the control thread: each drained namespace's device goes back to its
  // bdev (deleting one: the bdev goes), one whose commands never finished is set aside, not
  // freed; logged as each is done. Empty, or why the bdev could not be deleted.
  std::string settle(Leaving l);
  // Makes subnqn reachable through the listener lc (opened if the target has none at that
  // address and port; port 0: any free one); lc's port becomes the real one. The discovery
  // NQN only opens the listener. Hosts on persistent discovery connections are told.
  std::string add_listener(const std::string& subnqn, ListenerConfig& lc);
  // Takes the listener address:port from subnqn: the controllers of hosts that came in
  // through it are torn down. A listener no subsystem is reachable through any more is
  // closed; the discovery NQN closes it at once, for every subsystem.
  std::string remove_listener(const std::string& subnqn, const std::string& address, uint16_t port);
  // The discovery log changed (subsystems, listeners, allowed hosts): a new generation, and a
  // notice to the hosts on persistent discovery connections.
  void discovery_log_changed();
 private:
  // Marks the bdevs of out.nss (detached) leaving and waits for every reactor to pass a turn,
  // so that none still reads them from a table (Target::control_mu_ held).
  void leave(Leaving& out);

  Target& t_;
  // Bdevs between begin_resize and end_resize (control_mu_).
  std::set<std::string> resizing_;
  // Namespaces removed whose commands never finished (a device that stopped answering): kept
  // alive rather than freed under them.
  std::mutex graveyard_mu_;
  std::vector<std::unique_ptr<Namespace>> graveyard_;
};

}  // namespace nvtcp::target
