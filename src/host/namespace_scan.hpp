// SPDX-License-Identifier: Apache-2.0
// What the host concludes from a controller's Identify data, kept apart from the admin
// thread so it can be tested on bytes: is a reconnected controller still the one we had,
// what the changed-namespace log lists, and what changed between two namespace scans.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "host/host_error.hpp"
#include "nvtcp/host.hpp"
#include "nvtcp/identify.hpp"

namespace nvtcp::host::detail {

// ok() when `now` (Identify Controller after a reconnect) is the controller we had before: the
// same serial number, model and subsystem NQN. Otherwise Kind::WrongController, its message
// naming what differs: another subsystem answers at that address now, and its namespaces are
// not ours to write.
HostError identity_mismatch(const nvme::IdentifyController& before, const nvme::IdentifyController& now);

// A fixed-size ASCII field of Identify or a log page as a string: up to the first NUL, trailing
// spaces dropped.
std::string fixed_field(const char* p, size_t n);

// Whether two controllers show one namespace under an NSID: the same NGUID and EUI-64.
bool same_namespace_ids(const NamespaceInfo& a, const NamespaceInfo& b);

// The firmware revision, printable (space padding and NULs trimmed).
std::string firmware_revision(const nvme::IdentifyController& id);

// The largest transfer a controller takes, in bytes: MDTS is a power of two in units of the
// minimum memory page size (CAP.MPSMIN: 4 KiB << n); 0 means no limit. A target can send any
// MDTS up to 255: a shift that would reach 2^32 or beyond (or past our own cap) is "no limit
// beyond own_cap", never a shift the language leaves undefined.
uint32_t largest_transfer(uint8_t mdts, uint64_t cap, uint32_t own_cap);

// The changed-namespace log (LID 04h): the NSIDs it lists, or all = true when it says more
// changed than it can list (FFFFFFFFh first).
std::vector<uint32_t> parse_changed_namespaces(const uint8_t* log, size_t len, bool& all);

// Identify Namespace into NamespaceInfo. False (HostError::Kind::Namespace) for an inactive
// NSID (NSZE 0) and for a format whose block size is not one a host can use (below 512 bytes or
// above 64 KiB).
bool namespace_from_identify(uint32_t nsid, const nvme::IdentifyNamespace& id, NamespaceInfo& out, HostError& err);

// One namespace's difference between two scans. Replaced: the NSID now names another
// namespace (its NGUID or EUI-64 changed): what was written to the old one is not there.
enum class NamespaceChangeKind : uint8_t { Added, Removed, Resized, Reformatted, Replaced };
const char* namespace_change_name(NamespaceChangeKind k);

struct NamespaceChange {
  NamespaceChangeKind kind;
  uint32_t nsid = 0;
  NamespaceInfo before;  // zero for Added
  NamespaceInfo after;   // zero for Removed
};

// In NSID order; empty when nothing changed.
std::vector<NamespaceChange> diff_namespaces(const std::map<uint32_t, NamespaceInfo>& before,
                                             const std::map<uint32_t, NamespaceInfo>& after);

// One log line's worth, e.g. "namespace 4 resized: 16384 -> 32768 blocks of 512 bytes".
std::string describe(const NamespaceChange& c);

}  // namespace nvtcp::host::detail
