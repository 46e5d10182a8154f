// SPDX-License-Identifier: Apache-2.0
// The controller's list of active namespaces as the admin thread keeps it: scanned at connect,
// after a namespace attribute notice, at a reconnect and on rescan_namespaces().
#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "host/controller_state.hpp"
#include "host/namespace_scan.hpp"
#include "nvtcp/identify.hpp"
#include "util/log.hpp"
#include "wire/commands.hpp"

namespace nvtcp::host {

using namespace nvtcp::wire;

bool Controller::State::read_active_list(std::vector<uint32_t>& out, bool& refused, HostError& err) {
  out.clear();
  refused = false;
  alignas(8) uint8_t buf[kIdentifyLen];
  // The target decides when the list ends: NN bounds how many pages it can fill, and
  // kMaxActiveNamespaces how many NSIDs are kept, whatever it answers.
  const uint32_t nn = reinterpret_cast<const IdentifyController*>(ident_now)->nn;
  const uint32_t max_pages = detail::active_list_max_pages(nn);
  uint32_t after = 0;
  for (uint32_t page = 0; page < max_pages; ++page) {
    Completion c = admin_sync(cmd::identify(uint8_t(Cns::ActiveNamespaceList), after, 0), buf, kIdentifyLen, false);
    if (!c.status.ok()) {
      refused = admin_up();  // an answer, not a lost queue: a controller without the list
      err = HostError::from_status(c.status,
                                   fmt::format("Identify (active namespace list): {}", status_name(c.status)));
      return false;
    }
    std::string why;
    switch (detail::append_active_list_page(buf, after, nn, out, why)) {
      case detail::ActiveListPage::More:
        after = out.back();
        continue;
      case detail::ActiveListPage::End:
        if (out.size() >= detail::kMaxActiveNamespaces)
          log::warn("{}: the active namespace list goes on past {} namespaces; using the first {} only",
                    trid.subnqn, out.size(), out.size());
        return true;
      case detail::ActiveListPage::Malformed:
        err = HostError::make(HostError::Kind::Controller,
                              fmt::format("Identify (active namespace list), page {}: {}", page + 1, why));
        log::warn("{}: {}; namespace list not used", trid.subnqn, err.message);
        out.clear();
        return false;
    }
  }
  // Every page was full, and NN says no more can follow: a list that says otherwise is not
  // asked again.
  return true;
}

bool Controller::State::scan_namespaces(const std::vector<uint32_t>* listed, bool notify, HostError& err) {
  std::vector<uint32_t> active;
  bool sequential = false;  // NSIDs tried one by one: most of them are expected to be inactive
  bool refused = false;
  if (!read_active_list(active, refused, err)) {
    // A lost queue, or a list that cannot be trusted: what was known stays as it was.
    if (!refused) return false;
    // A controller older than NVMe 1.1 has no list: try every NSID up to NN, as Linux does.
    const uint32_t nn = std::min<uint32_t>(reinterpret_cast<const IdentifyController*>(ident_now)->nn,
                                           detail::BlockSizeTable::kCapacity);
    log::info("{}: {}; identifying namespaces 1 to {} instead", trid.subnqn, err.message, nn);
    for (uint32_t nsid = 1; nsid <= nn; ++nsid) active.push_back(nsid);
    sequential = true;
    err = HostError{};
  }
  std::map<uint32_t, NamespaceInfo> next;
  alignas(8) uint8_t buf[kIdentifyLen];
  for (uint32_t nsid : active) {
    auto known = namespaces.find(nsid);  // this thread is the only writer: no lock to read
    if (listed && known != namespaces.end() && std::find(listed->begin(), listed->end(), nsid) == listed->end()) {
      next.emplace(nsid, known->second);
      continue;
    }
    Completion c = admin_sync(cmd::identify(uint8_t(Cns::Namespace), nsid, 0), buf, kIdentifyLen, false);
    if (!admin_up()) {
      err = HostError::make(HostError::Kind::Transport,
                            fmt::format("Identify Namespace {}: {}", nsid, status_name(c.status)));
      return false;
    }
    if (!c.status.ok()) {
      // As the Linux host: an error is no reason to drop a namespace we know.
      if (known != namespaces.end() || !sequential)
        log::warn("{}: Identify Namespace {}: {}{}", trid.subnqn, nsid, status_name(c.status),
                  known != namespaces.end() ? "; keeping what was known" : "; not used");
      if (known != namespaces.end()) next.emplace(nsid, known->second);
      continue;
    }
    const auto* id = reinterpret_cast<const IdentifyNamespace*>(buf);
    if (id->nsze == 0) continue;  // inactive (removed since the list was read)
    NamespaceInfo ni;
    HostError why;
    if (detail::namespace_from_identify(nsid, *id, ni, why)) next.emplace(nsid, ni);
    else log::warn("{}: {}: not used", trid.subnqn, why.message);
  }
  const auto changes = detail::diff_namespaces(namespaces, next);
  if (changes.empty()) return true;
  std::vector<std::pair<uint32_t, uint32_t>> sizes;
  for (const auto& [nsid, ni] : next) sizes.emplace_back(nsid, ni.block_size);
  if (!block_sizes->publish(sizes))
    log::warn("{}: {} namespaces; read()/write() know the block size of the first {} only", trid.subnqn,
              sizes.size(), detail::BlockSizeTable::kCapacity);
  {
    // Under the lock with the new state: whoever lists a namespace sees the generation moved.
    std::lock_guard lk(ns_mu);
    namespaces = std::move(next);
    if (notify) ns_generation.fetch_add(1, std::memory_order_release);
  }
  if (!notify) return true;
  for (const auto& ch : changes) {
    using Kind = detail::NamespaceChangeKind;
    // What was written there is gone for the application: louder than a size change.
    if (ch.kind == Kind::Removed || ch.kind == Kind::Replaced) log::warn("{}: {}", trid.subnqn, detail::describe(ch));
    else log::info("{}: {}", trid.subnqn, detail::describe(ch));
  }
  if (opts.on_namespace_change)
    for (const auto& ch : changes) opts.on_namespace_change(ch.nsid);
  return true;
}

}  // namespace nvtcp::host
