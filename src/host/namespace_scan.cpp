// SPDX-License-Identifier: Apache-2.0
#include "host/namespace_scan.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "nvtcp/sqe.hpp"
#include "nvtcp/wire_text.hpp"

namespace nvtcp::host::detail {

using namespace nvtcp::nvme;

std::string fixed_field(const char* p, size_t n) {
  size_t len = strnlen(p, n);
  while (len > 0 && p[len - 1] == ' ') --len;
  return std::string(p, len);
}

std::string printable_field(const char* p, size_t n) { return wire_field(p, n); }

bool same_namespace_ids(const NamespaceInfo& a, const NamespaceInfo& b) {
  return std::memcmp(a.nguid, b.nguid, sizeof(a.nguid)) == 0 && std::memcmp(a.eui64, b.eui64, sizeof(a.eui64)) == 0;
}

HostError identity_mismatch(const IdentifyController& before, const IdentifyController& now) {
  HostError err;
  auto check = [&err](const char* what, const std::string& a, const std::string& b) {
    if (a == b) return;
    if (!err.ok()) err.message += ", ";
    err.kind = HostError::Kind::WrongController;
    err.message += fmt::format("{} '{}' is now '{}'", what, a, b);
  };
  // Escaped both sides: the comparison is the same (escaping loses nothing), and the message
  // is logged and shown as it is.
  check("serial number", printable_field(before.sn, sizeof(before.sn)), printable_field(now.sn, sizeof(now.sn)));
  check("model", printable_field(before.mn, sizeof(before.mn)), printable_field(now.mn, sizeof(now.mn)));
  check("subsystem NQN", printable_field(before.subnqn, sizeof(before.subnqn)),
        printable_field(now.subnqn, sizeof(now.subnqn)));
  return err;
}

std::string firmware_revision(const IdentifyController& id) { return printable_field(id.fr, sizeof(id.fr)); }

uint32_t largest_transfer(uint8_t mdts, uint64_t cap, uint32_t own_cap) {
  if (mdts == 0) return own_cap;
  const uint32_t shift = 12u + uint32_t((cap >> 48) & 0xF) + mdts;  // 4 KiB << CAP.MPSMIN, << MDTS
  if (shift >= 32) return own_cap;  // at least 4 GiB: beyond any cap of ours
  return uint32_t(std::min<uint64_t>(uint64_t(1) << shift, own_cap));
}

uint32_t active_list_max_pages(uint32_t nn) {
  return std::max<uint32_t>(1, uint32_t((uint64_t(nn) + kActiveListPageIds - 1) / kActiveListPageIds));
}

ActiveListPage append_active_list_page(const uint8_t* page, uint32_t after, uint32_t nn, std::vector<uint32_t>& out,
                                       std::string& why) {
  uint32_t prev = after;
  for (uint32_t i = 0; i < kActiveListPageIds; ++i) {
    uint32_t nsid;
    std::memcpy(&nsid, page + i * 4, 4);
    if (nsid == 0) return ActiveListPage::End;  // a short page ends the list
    if (nsid <= prev) {
      why = fmt::format("NSID {} at entry {} does not follow {} (the list must rise strictly)", nsid, i, prev);
      return ActiveListPage::Malformed;
    }
    if (nsid > nn) {
      why = fmt::format("NSID {} at entry {} is above the controller's NN ({})", nsid, i, nn);
      return ActiveListPage::Malformed;
    }
    if (out.size() >= kMaxActiveNamespaces) return ActiveListPage::End;  // the caller says what was left out
    out.push_back(nsid);
    prev = nsid;
  }
  // A full page: more may follow, unless the last NSID there can be has been listed or no more
  // are kept.
  return prev == nn || out.size() >= kMaxActiveNamespaces ? ActiveListPage::End : ActiveListPage::More;
}

std::vector<uint32_t> parse_changed_namespaces(const uint8_t* log, size_t len, bool& all) {
  std::vector<uint32_t> out;
  all = false;
  for (size_t off = 0; off + 4 <= len; off += 4) {
    uint32_t nsid;
    std::memcpy(&nsid, log + off, 4);
    if (nsid == 0) break;  // the list ends at the first zero
    if (nsid == kNsidAll) {
      all = true;
      out.clear();
      break;
    }
    out.push_back(nsid);
  }
  return out;
}

bool namespace_from_identify(uint32_t nsid, const IdentifyNamespace& id, NamespaceInfo& out, HostError& err) {
  if (id.nsze == 0) {
    err = HostError::make(HostError::Kind::Namespace, fmt::format("namespace {} is not active", nsid));
    return false;
  }
  const uint8_t lbads = id.lbaf[id.flbas & 0xF].lbads;
  if (lbads < 9 || lbads > 16) {
    err = HostError::make(
        HostError::Kind::Namespace,
        fmt::format("namespace {}: block size 2^{} is not usable (512 bytes to 64 KiB)", nsid, lbads));
    return false;
  }
  out = NamespaceInfo{};
  out.nsid = nsid;
  out.blocks = id.nsze;
  out.block_size = 1u << lbads;
  std::memcpy(out.nguid, id.nguid, sizeof(out.nguid));
  std::memcpy(out.eui64, id.eui64, sizeof(out.eui64));
  return true;
}

const char* namespace_change_name(NamespaceChangeKind k) {
  switch (k) {
    case NamespaceChangeKind::Added: return "added";
    case NamespaceChangeKind::Removed: return "removed";
    case NamespaceChangeKind::Resized: return "resized";
    case NamespaceChangeKind::Reformatted: return "reformatted";
    case NamespaceChangeKind::Replaced: return "replaced";
  }
  return "changed";
}

std::vector<NamespaceChange> diff_namespaces(const std::map<uint32_t, NamespaceInfo>& before,
                                             const std::map<uint32_t, NamespaceInfo>& after) {
  std::vector<NamespaceChange> out;
  auto b = before.begin();
  auto a = after.begin();
  while (b != before.end() || a != after.end()) {
    if (a == after.end() || (b != before.end() && b->first < a->first)) {
      out.push_back({NamespaceChangeKind::Removed, b->first, b->second, {}});
      ++b;
    } else if (b == before.end() || a->first < b->first) {
      out.push_back({NamespaceChangeKind::Added, a->first, {}, a->second});
      ++a;
    } else {
      const NamespaceInfo& was = b->second;
      const NamespaceInfo& now = a->second;
      // As the Linux host: other identifiers under the same NSID are another namespace.
      if (!same_namespace_ids(was, now)) out.push_back({NamespaceChangeKind::Replaced, a->first, was, now});
      else if (was.block_size != now.block_size) out.push_back({NamespaceChangeKind::Reformatted, a->first, was, now});
      else if (was.blocks != now.blocks) out.push_back({NamespaceChangeKind::Resized, a->first, was, now});
      ++a;
      ++b;
    }
  }
  return out;
}

std::string describe(const NamespaceChange& c) {
  auto size = [](const NamespaceInfo& n) { return fmt::format("{} blocks of {} bytes", n.blocks, n.block_size); };
  switch (c.kind) {
    case NamespaceChangeKind::Added: return fmt::format("namespace {} added: {}", c.nsid, size(c.after));
    case NamespaceChangeKind::Removed: return fmt::format("namespace {} removed", c.nsid);
    case NamespaceChangeKind::Resized:
      return fmt::format("namespace {} resized: {} -> {} blocks of {} bytes", c.nsid, c.before.blocks, c.after.blocks,
                         c.after.block_size);
    case NamespaceChangeKind::Reformatted:
      return fmt::format("namespace {} reformatted: {} -> {}", c.nsid, size(c.before), size(c.after));
    case NamespaceChangeKind::Replaced:
      return fmt::format(
          "namespace {}: identifiers changed (NGUID {:02x} EUI-64 {:02x} -> NGUID {:02x} EUI-64 {:02x}): another "
          "namespace now, treated as removed and added ({})",
          c.nsid, fmt::join(c.before.nguid, ""), fmt::join(c.before.eui64, ""), fmt::join(c.after.nguid, ""),
          fmt::join(c.after.eui64, ""), size(c.after));
  }
  return {};
}

}  // namespace nvtcp::host::detail
