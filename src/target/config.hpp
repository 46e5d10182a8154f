// SPDX-License-Identifier: Apache-2.0
// Target configuration: the quick command-line case and the JSON file for the full one.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "auth/keys.hpp"
#include "backend/block_device.hpp"
#include "nvtcp/log_pages.hpp"
#include "target/keyring.hpp"

namespace nvtcp::target {

// bdev_set_qos_limit's limits (0: none of that kind); QosLimiter enforces them.
struct QosLimits {
  uint64_t rw_ios_per_sec = 0, rw_mbytes_per_sec = 0, r_mbytes_per_sec = 0, w_mbytes_per_sec = 0;
  bool any() const { return rw_ios_per_sec || rw_mbytes_per_sec || r_mbytes_per_sec || w_mbytes_per_sec; }
  bool operator==(const QosLimits&) const = default;
};

struct NamespaceConfig {
  uint32_t nsid = 0;            // 0 = next free
  std::string type = "null";    // null | ram | file | rbd
  uint64_t size = 0;            // bytes (file: 0 = the file's size)
  std::string path;             // file only
  uint32_t block_size = 512;
  // Unique in the target (SPDK's bdev name, as RPC lists and removes it); empty: finalize_config
  // names it after its type ("null0", "ram1", "file0").
  std::string name;
  // The namespace's identifiers as hex text (NGUID 32 digits, EUI-64 16, UUID 8-4-4-4-12);
  // empty: its device's (bdevs.hpp, make_namespace).
  std::string nguid, eui64, uuid;
  // A namespace's device's own UUID when a saved configuration names it (bdev_*_create's
  // "uuid"); empty: configured_device_uuid.
  std::string device_uuid;
  // Its ANA group (1 .. the subsystem's max_namespaces); 0: its NSID, as SPDK does. Only
  // reported when the subsystem has ana_reporting.
  uint32_t anagrpid = 0;
  // SPDK's no_auto_visible: no host sees the namespace until named for it (nvmf_ns_add_host).
  bool no_auto_visible = false;
  std::vector<std::string> visible_hosts;  // with no_auto_visible: the hosts that see it
  QosLimits qos;                           // its bdev's rate limits (bdev_set_qos_limit)
  // rbd only: the image (pool, image) and how to reach its cluster (a ceph.conf, a client
  // ID, options such as mon_host); the size is the image's.
  backend::RbdSpec rbd;
};

// An allowed host's keys ("hosts": [{"nqn": ..., "dhchap_key": ..., ...}]), checked when the
// configuration is read. A key given inline is parsed then and shared, never copied: its
// material lives in one place. A key named in the keyring is read from its file at each use
// (HostKey::material): a DH-HMAC-CHAP transaction, a TLS handshake.
struct HostKeys {
  HostKey<auth::DhchapSecret> dhchap;       // set: the host must authenticate
  HostKey<auth::DhchapSecret> dhchap_ctrl;  // set: it may ask the controller to as well
  HostKey<auth::ConfiguredPsk> psk;         // its TLS PSK
  // A host with a PSK is admitted only over TLS: a Connect in the clear under its NQN is refused
  // (the NQN is no secret: every ClientHello carries it in the PSK identity) and its discovery
  // log lists TLS ports only. "allow_plain": true admits it on plain listeners as well, as a
  // deliberate choice the target logs at start.
  bool allow_plain = false;
  // What the target accepts from this host, as nvmet's per-host dhchap_hash and dhchap_dhgroup
  // ("dhchap_hash": "sha384", "dhchap_dhgroup": "ffdhe8192"); empty: every hash (SHA-256 first)
  // and the groups up to ffdhe4096 (ffdhe2048 first, NULL last; DhchapPolicy::controller_default).
  std::vector<uint8_t> dhchap_hashes;
  std::vector<uint8_t> dhchap_groups;
  // The keys above that name keyring keys (nvmf_subsystem_add_host) hold the name in their
  // ref(): save_config writes these names, never the keys.
};

// The highest dynamic controller ID (NVMe base spec: FFF0h and above are reserved).
inline constexpr uint16_t kMaxCntlid = 0xFFEF;

struct SubsystemConfig {
  std::string nqn;
  std::string serial;
  std::string model = "nvtcp";
  bool allow_any_host = true;
  std::vector<std::string> hosts;  // allowed host NQNs when allow_any_host is false
  std::vector<NamespaceConfig> namespaces;
  // The most namespaces it can hold, and so the highest NSID (NN), live additions included.
  // 0: finalize_config makes it kDefaultMaxNamespaces, or the highest NSID configured if higher.
  uint32_t max_namespaces = 0;
  // The listeners ("ADDRESS:PORT", as configured) through which hosts reach this subsystem:
  // its discovery log entries, and where Connect is accepted. Empty: every listener configured
  // (and the discovery port), as a Linux nvmet subsystem linked to every port; listeners added
  // later by RPC belong to the subsystems they are added to.
  std::vector<std::string> listeners;
  std::map<std::string, HostKeys> host_keys;  // by host NQN, for hosts configured with keys
  // Asymmetric Namespace Access reporting (SPDK's ana_reporting): Identify says so (CMIC bit
  // 3), log 0Ch gives each ANA group's state through the host's listener, and that state
  // can be changed per listener (RPC nvmf_subsystem_listener_set_ana_state). Off: every
  // path is optimized, as a subsystem without ANA is.
  bool ana_reporting = false;
  // States a listener starts in other than optimized (ana_reporting only): group anagrpid (0:
  // every group) through the listener "ADDRESS:PORT". save_config writes the states set by RPC
  // this way (as nvmf_subsystem_listener_set_ana_state calls), so that a restart keeps them.
  struct AnaSetting {
    std::string listener;
    uint32_t anagrpid = 0;
    nvme::AnaState state = nvme::AnaState::Optimized;
  };
  std::vector<AnaSetting> ana_states;
  // The controller IDs this subsystem hands out (SPDK's min_cntlid and max_cntlid): gateways
  // that serve one subsystem NQN each take a range of their own, so that a host never meets
  // the same CNTLID on two paths of one subsystem. 1 to 0xFFEF, the whole dynamic range, by
  // default.
  uint16_t min_cntlid = 1;
  uint16_t max_cntlid = kMaxCntlid;
};

struct ListenerConfig {
  std::string address = "127.0.0.1";
  uint16_t port = 4420;
  // "tls": "required": every connection starts with a TLS 1.3 handshake with a PSK of an allowed
  // host (and the discovery log says so); "none" (the default): plain NVMe/TCP.
  bool tls_required = false;
  // "ktls": false keeps the sealing of TLS records out in nvtcp's own record layer; by default
  // the kernel's kTLS takes it once a handshake is done, where the kernel has the tls module.
  bool ktls = true;
  // A wildcard address (0.0.0.0, ::): the discovery log gives each host the address it
  // reached the target on instead, as the Linux target does.
  bool wildcard() const { return address.empty() || address == "0.0.0.0" || address == "::"; }
};

// "ADDRESS:PORT" or "[IPV6]:PORT" into a listener; false if it is neither.
bool parse_listener(const std::string& text, ListenerConfig& out);

// A subsystem's namespace capacity (SPDK's default max_namespaces), and its upper bound: every
// I/O queue keeps a row of counters per possible namespace.
inline constexpr uint32_t kDefaultMaxNamespaces = 32;
inline constexpr uint32_t kMaxNamespacesLimit = 1024;

// The largest MDTS a target may be configured with.
inline constexpr uint32_t kMaxMdtsBytes = 8u << 20;

// Which derivations of a host's TLS PSK from its configured key the target accepts: both (the
// specification's labels, and libnvme's own up to 1.14, which nvme-cli up to 2.14 used), or one.
enum class PskDerivations : uint8_t { Both, Rfc8446, Libnvme };

struct TargetConfig {
  std::vector<ListenerConfig> listeners;
  // "tls_psk_derivation": "both" (default), "rfc8446" or "libnvme" (as a Linux target whose
  // keyring holds the key one way only).
  PskDerivations tls_psk_derivations = PskDerivations::Both;
  // Devices by name that no namespace has yet (RPC's bdevs, as save_config writes them).
  std::vector<NamespaceConfig> bdevs;
  // Ceph clusters registered by name (bdev_rbd_register_cluster), which RBD namespaces and bdevs
  // name by rbd.cluster_name; each one's pool and image are empty.
  std::vector<backend::RbdSpec> rbd_clusters;
  // SPDK's file keyring (keyring_file_add_key): keys by name that hosts name. Shared by the
  // copies of this configuration (the target's, its state's): one keyring per target.
  std::shared_ptr<Keyring> keyring = std::make_shared<Keyring>();
  uint16_t discovery_port = 8009;       // 0 = only the discovery service on every listener
  std::vector<SubsystemConfig> subsystems;
  unsigned cores = 1;                   // reactor threads
  std::vector<int> cpus;                // pin reactor i to cpus[i] when given
  bool allow_hdgst = true;
  bool allow_ddgst = true;
  uint32_t max_h2c_data = 128 * 1024;   // MAXH2CDATA announced in ICResp
  uint32_t in_capsule_data = 8192;      // I/O queue in-capsule data (IOCCSZ = 64 + this)
  uint32_t max_queue_depth = 1024;      // CAP.MQES + 1
  uint32_t max_io_queues = 128;
  uint32_t max_r2t_per_command = 4;     // outstanding R2Ts per write (also bounded by the host)
  uint32_t mdts_bytes = 1u << 20;       // largest transfer (MDTS), at most kMaxMdtsBytes
  uint32_t icreq_timeout_ms = 10000;
  // A write whose R2T has had no H2CData for this long ends its connection (the buffers it
  // holds are freed); keep-alives do not cover a host that stalls mid-transfer. 0 = never.
  uint32_t h2c_data_timeout_ms = 30000;
  // A connection with responses queued that the host has not taken for this long is closed
  // (their buffers freed): a host that sends commands and never reads would hold them. 0 = never.
  uint32_t send_timeout_ms = 30000;
  // A discovery controller that asks for no keep-alive (KATO 0, or Set Features 0Fh to 0)
  // gets this one, as the Linux target forces 120 s: otherwise idle discovery sessions,
  // open to any host, could hold every connection slot for good. 0 = no keep-alive forced.
  uint32_t discovery_kato_ms = 120000;
  // Resource limits, so that no host (or crowd of half-open connections) can starve the
  // others or grow the target's memory without bound. 0 = no limit.
  uint32_t max_connections = 4096;          // live TCP connections, all listeners together
  uint32_t max_connections_per_address = 0; // from one source IP address (0 = no limit)
  uint32_t max_connections_per_host = 0;    // queues past Connect of one host NQN (0 = no limit)
  uint64_t max_buffer_memory = 2ull << 30;  // data buffers (write data, file reads), whole target
  uint64_t max_connection_buffer_memory = 256ull << 20;  // the same, per connection
  uint64_t max_host_buffer_memory = 512ull << 20;        // the same, per host NQN (all its connections)
  uint64_t max_send_queue_bytes = 8u << 20; // per connection: new commands wait above this
  // The kernel's send buffers (target_tcp/send_shares.hpp), in SO_SNDBUF bytes (the kernel
  // doubles them): all connections together (0: a quarter of tcp_mem's pressure point), one
  // source address's connections (0: a quarter of the target's), and the least a connection
  // gets: an address whose next connection would get less is refused at accept.
  uint64_t send_buffer_budget_bytes = 0;
  uint64_t address_send_buffer_bytes = 0;
  uint32_t min_send_buffer_bytes = 64u << 10;
  // Reservation registrants per namespace (a registration outlives its host's connections,
  // as NVMe requires, so a host that invents host IDs would otherwise grow it for good).
  // At most 65535: Reservation Report counts them in 16 bits.
  uint32_t max_registrants_per_namespace = 256;
  std::string tcp_congestion;           // per-socket congestion control, empty = default
  // SO_RCVBUF and SO_SNDBUF of every accepted connection, fixed, as SPDK does (0: the
  // defaults: reactor::receive_buffer_for and send_buffer_for).
  uint64_t socket_buffer_bytes = 0;
  // SO_SNDBUF alone (0: the kernel autotunes it). Not set: socket_buffer_bytes if that is,
  // else reactor::kDefaultSendBufferBytes. The receive side keeps its own default: a bounded send
  // buffer keeps the socket's queue short, which bbr's pacing needs at large transfers, while
  // a small receive buffer slows writes.
  std::optional<uint64_t> send_buffer_bytes;
  std::string poll = "hybrid";           // interrupt | busy | hybrid (see nvtcp::PollMode)
  bool sqpoll = false;                  // an io_uring SQ thread per reactor (see reactor::ReactorOptions)
  uint32_t sqpoll_idle_ms = 2;          // the SQ thread sleeps after this long without work
  int sqpoll_cpu = -1;                  // pin the SQ threads to this CPU (-1: unpinned)
  uint32_t send_zc_threshold = 0;       // zero-copy sends of segments this large (0 = off)
  bool recv_multishot = false;          // multishot receive into a provided buffer ring
  bool spin_recv = true;                // a spinning reactor polls idle sockets with recv()
};

// The part of max_buffer_memory that I/O queues leave to admin queues and to connections
// not yet past Connect (a sixteenth).
inline uint64_t admin_buffer_reserve(const TargetConfig& cfg) { return cfg.max_buffer_memory / 16; }

// Adds one "hosts" entry (a host NQN, or an object with "nqn" and its keys, each checked) to
// sc; throws std::runtime_error naming the host and field, never a key. With a keyring, a key
// field that names one of its keys is that key: its file is read and parsed now, as a check (SPDK
// checks the key at add_host), and the host holds the key by reference, read again at each use.
void read_host(SubsystemConfig& sc, const nlohmann::json& entry, std::shared_ptr<const Keyring> keyring = nullptr);

// SPDK's save_config shape ({"subsystems": [{"subsystem": ..., "config": [...]}]}), which
// nvtcp's save_config writes too: is_spdk_config tells it from nvtcp's own format, and
// load_spdk_config replays its bdev and nvmf methods into cfg (error or empty).
bool is_spdk_config(const nlohmann::json& j);
std::string load_spdk_config(const nlohmann::json& j, TargetConfig& cfg);

// Reads a JSON configuration, in nvtcp's format or SPDK's; returns an error message or empty.
std::string load_config_file(const std::string& path, TargetConfig& out);
// The index in cfg.listeners of the listener a subsystem names ("ADDRESS:PORT" exactly as
// configured), or -1.
int listener_index(const TargetConfig& cfg, const std::string& name);

// Checks a subsystem's NQN, serial (made from index, its place in the target, if empty) and
// model; check_subsystem also its max_namespaces (0: the default). Error or empty.
std::string check_subsystem_identity(SubsystemConfig& s, unsigned index);
// An NQN (what: "subsystem NQN", "host NQN") as the spec bounds it, at most 223 bytes and
// starting "nqn.", and as text that goes into logs, listings and save_config unharmed: valid
// UTF-8 with no control characters (SPDK checks the UTF-8). Empty: valid; else why not.
std::string check_nqn(const std::string& nqn, const char* what);
// A bdev's (namespace's) name: 1 to 255 bytes of such text.
std::string check_name(const std::string& name, const char* what);
std::string check_subsystem(SubsystemConfig& s, unsigned index);

// Checks and completes a configuration (serials, nsids, listeners); returns error or empty.
std::string finalize_config(TargetConfig& cfg);

}  // namespace nvtcp::target
