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

// A fixed-size field as fixed_field() reads it, made fit for a log line: the target chose
// those bytes, so control and non-ASCII bytes are written \xNN (and the backslash \\): no
// escape sequence reaches the terminal of whoever reads the log, and no newline forges a line.
std::string printable_field(const char* p, size_t n);

// Whether two controllers show one namespace under an NSID: the same NGUID and EUI-64.
bool same_namespace_ids(const NamespaceInfo& a, const NamespaceInfo& b);

// The firmware revision, printable (space padding and NULs trimmed, other bytes escaped as
// printable_field() does).
std::string firmware_revision(const nvme::IdentifyController& id);

// The largest transfer a controller takes, in bytes: MDTS is a power of two in units of the
// minimum memory page size (CAP.MPSMIN: 4 KiB << n); 0 means no limit. A target can send any
// MDTS up to 255: a shift that would reach 2^32 or beyond (or past our own cap) is "no limit
// beyond own_cap", never a shift the language leaves undefined.
uint32_t largest_transfer(uint8_t mdts, uint64_t cap, uint32_t own_cap);

// The active namespace list (Identify CNS 02h) is read a page of 1024 NSIDs at a time, each page
// starting after the last NSID of the one before. A target decides how many pages there are: the
// host keeps at most this many NSIDs, so that a list that never ends costs a bounded number of
// commands and bounded memory. The block-size table and the changed-namespace log hold 1024;
// this leaves room for subsystems far larger than any seen, at 64 pages.
inline constexpr uint32_t kMaxActiveNamespaces = 64 * 1024;
inline constexpr uint32_t kActiveListPageIds = 1024;

// The most pages a controller reporting nn namespaces (Identify Controller NN) can fill: NN/1024
// rounded up, at least 1 (the first page is read whatever NN says, to see the list's end).
uint32_t active_list_max_pages(uint32_t nn);

enum class ActiveListPage : uint8_t {
  More,       // the page was full: ask for the next one, after the last NSID
  End,        // the list ended (a zero, NSID NN reached, or kMaxActiveNamespaces kept)
  Malformed,  // an NSID not above the one before, or above NN: why says which
};

// Appends one page (kActiveListPageIds little-endian NSIDs, zero-terminated when short) to out.
// after: the NSID the page was asked for after (0 for the first). NSIDs must rise strictly and
// stay within 1..nn; the first that does not makes the whole list untrustworthy (Malformed).
ActiveListPage append_active_list_page(const uint8_t* page, uint32_t after, uint32_t nn, std::vector<uint32_t>& out,
                                       std::string& why);

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
