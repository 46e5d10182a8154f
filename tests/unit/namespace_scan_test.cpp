// SPDX-License-Identifier: Apache-2.0
// What the host concludes from Identify data and the changed-namespace log, on bytes: the
// identity check of a reconnect, the namespace differences it logs and reports, and the
// lock-free block size table the data path reads while a rescan is published.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "host/block_size_table.hpp"
#include "host/namespace_scan.hpp"
#include "nvtcp/identify.hpp"
#include "nvtcp/sqe.hpp"

namespace nvtcp::host::detail::namespace_scan_test {
namespace {

using nvme::IdentifyController;
using nvme::IdentifyNamespace;

void put(char* field, size_t n, const char* s) {
  std::memset(field, ' ', n);
  std::memcpy(field, s, std::strlen(s));
}

IdentifyController controller(const char* sn, const char* mn, const char* fr, const char* subnqn) {
  IdentifyController id{};
  put(id.sn, sizeof(id.sn), sn);
  put(id.mn, sizeof(id.mn), mn);
  put(id.fr, sizeof(id.fr), fr);
  std::strcpy(id.subnqn, subnqn);  // NUL padded, as the specification has it
  return id;
}

TEST(IdentityCheck, SameSubsystemWithNewFirmwareAndControllerIdIsTheSameController) {
  IdentifyController before = controller("SN1", "nvtcp", "0.1.0", "nqn.2026-11.io.nvtcp:a");
  IdentifyController after = controller("SN1", "nvtcp", "0.2.0", "nqn.2026-11.io.nvtcp:a");
  before.cntlid = 1;
  after.cntlid = 7;
  EXPECT_TRUE(identity_mismatch(before, after).ok());
  EXPECT_EQ(firmware_revision(before), "0.1.0");
  EXPECT_EQ(firmware_revision(after), "0.2.0");
}

TEST(IdentityCheck, EachIdentifierThatDiffersIsNamed) {
  const IdentifyController a = controller("SN1", "nvtcp", "0.1.0", "nqn.2026-11.io.nvtcp:a");
  EXPECT_EQ(identity_mismatch(a, controller("SN2", "nvtcp", "0.1.0", "nqn.2026-11.io.nvtcp:a")).kind,
            HostError::Kind::WrongController);
  EXPECT_EQ(identity_mismatch(a, controller("SN2", "nvtcp", "0.1.0", "nqn.2026-11.io.nvtcp:a")).message,
            "serial number 'SN1' is now 'SN2'");
  EXPECT_EQ(identity_mismatch(a, controller("SN1", "other", "0.1.0", "nqn.2026-11.io.nvtcp:a")).message,
            "model 'nvtcp' is now 'other'");
  EXPECT_EQ(identity_mismatch(a, controller("SN2", "nvtcp", "0.1.0", "nqn.2026-11.io.nvtcp:b")).message,
            "serial number 'SN1' is now 'SN2', subsystem NQN 'nqn.2026-11.io.nvtcp:a' is now 'nqn.2026-11.io.nvtcp:b'");
  // A field that fills its whole width has no terminator and must not run into the next.
  IdentifyController full = a, other_model = a;
  std::memcpy(full.sn, "12345678901234567890", 20);
  other_model = full;
  put(other_model.mn, sizeof(other_model.mn), "other");
  EXPECT_EQ(identity_mismatch(full, other_model).message, "model 'nvtcp' is now 'other'");
}

TEST(IdentityCheck, TargetTextInTheMessageIsEscaped) {
  // The message is logged: a model with an escape sequence or a newline must not reach the
  // terminal as one, nor a firmware revision.
  const IdentifyController a = controller("SN1", "nvtcp", "0.1.0", "nqn.2026-11.io.nvtcp:a");
  const IdentifyController b = controller("SN1", "\x1b]0;owned\x07\n\\x", "\r1", "nqn.2026-11.io.nvtcp:a");
  EXPECT_EQ(identity_mismatch(a, b).message, "model 'nvtcp' is now '\\x1b]0;owned\\x07\\x0a\\\\x'");
  EXPECT_EQ(firmware_revision(b), "\\x0d1");
  EXPECT_EQ(printable_field("\xff", 1), "\\xff");
}

std::vector<uint8_t> changed_log(const std::vector<uint32_t>& ids) {
  std::vector<uint8_t> log(4096, 0);
  if (!ids.empty()) std::memcpy(log.data(), ids.data(), ids.size() * 4);
  return log;
}

TEST(ChangedNamespaceLog, ListsUpToTheFirstZero) {
  bool all = true;
  auto log = changed_log({4, 9, 0, 5});
  EXPECT_EQ(parse_changed_namespaces(log.data(), log.size(), all), (std::vector<uint32_t>{4, 9}));
  EXPECT_FALSE(all);
  log = changed_log({});
  EXPECT_TRUE(parse_changed_namespaces(log.data(), log.size(), all).empty());
  EXPECT_FALSE(all);
  // A full page has no terminator.
  std::vector<uint32_t> many(1024);
  for (uint32_t i = 0; i < 1024; ++i) many[i] = i + 1;
  log = changed_log(many);
  EXPECT_EQ(parse_changed_namespaces(log.data(), log.size(), all).size(), 1024u);
}

TEST(ChangedNamespaceLog, FFFFFFFFhMeansEveryNamespace) {
  bool all = false;
  auto log = changed_log({nvme::kNsidAll});
  EXPECT_TRUE(parse_changed_namespaces(log.data(), log.size(), all).empty());
  EXPECT_TRUE(all);
}

TEST(IdentifyNamespaceData, SizeBlockSizeAndIdentifiers) {
  IdentifyNamespace id{};
  id.nsze = 32768;
  id.flbas = 1;
  id.lbaf[0].lbads = 9;
  id.lbaf[1].lbads = 12;
  for (int i = 0; i < 16; ++i) id.nguid[i] = uint8_t(i + 1);
  for (int i = 0; i < 8; ++i) id.eui64[i] = uint8_t(0xE0 + i);
  NamespaceInfo ni;
  HostError why;
  ASSERT_TRUE(namespace_from_identify(3, id, ni, why)) << why.message;
  EXPECT_EQ(ni.nsid, 3u);
  EXPECT_EQ(ni.blocks, 32768u);
  EXPECT_EQ(ni.block_size, 4096u);
  EXPECT_EQ(ni.nguid[15], 16);
  EXPECT_EQ(ni.eui64[7], 0xE7);
}

TEST(IdentifyNamespaceData, InactiveAndUnusableFormatsAreRefused) {
  IdentifyNamespace id{};
  NamespaceInfo ni;
  HostError why;
  EXPECT_FALSE(namespace_from_identify(5, id, ni, why));  // NSZE 0: an inactive NSID
  EXPECT_EQ(why.kind, HostError::Kind::Namespace);
  EXPECT_EQ(why.message, "namespace 5 is not active");
  id.nsze = 100;
  id.lbaf[0].lbads = 0;  // would be a 1-byte block
  why = {};
  EXPECT_FALSE(namespace_from_identify(5, id, ni, why));
  EXPECT_EQ(why.kind, HostError::Kind::Namespace);
  id.lbaf[0].lbads = 40;  // 1 << 40 does not fit a block size
  why = {};
  EXPECT_FALSE(namespace_from_identify(5, id, ni, why));
  EXPECT_EQ(why.kind, HostError::Kind::Namespace);
}

NamespaceInfo ns(uint32_t nsid, uint64_t blocks, uint32_t bs, uint8_t id_seed) {
  NamespaceInfo n;
  n.nsid = nsid;
  n.blocks = blocks;
  n.block_size = bs;
  std::memset(n.nguid, id_seed, sizeof(n.nguid));
  std::memset(n.eui64, id_seed, sizeof(n.eui64));
  return n;
}

TEST(NamespaceDiff, NothingChangedIsEmpty) {
  std::map<uint32_t, NamespaceInfo> m{{1, ns(1, 100, 512, 1)}, {2, ns(2, 200, 4096, 2)}};
  EXPECT_TRUE(diff_namespaces(m, m).empty());
  EXPECT_TRUE(diff_namespaces({}, {}).empty());
}

TEST(NamespaceDiff, EveryKindInNsidOrder) {
  std::map<uint32_t, NamespaceInfo> before{
      {1, ns(1, 100, 512, 1)}, {2, ns(2, 200, 512, 2)}, {3, ns(3, 300, 512, 3)}, {5, ns(5, 500, 512, 5)},
      {6, ns(6, 600, 512, 6)}};
  std::map<uint32_t, NamespaceInfo> after{
      {1, ns(1, 100, 512, 1)},    // unchanged
      {2, ns(2, 400, 512, 2)},    // grown
      {3, ns(3, 300, 512, 9)},    // another namespace under NSID 3
      {4, ns(4, 10, 4096, 4)},    // new
      {6, ns(6, 75, 4096, 6)}};   // reformatted (the size follows the block size); 5 is gone
  auto d = diff_namespaces(before, after);
  ASSERT_EQ(d.size(), 5u);
  EXPECT_EQ(d[0].nsid, 2u);
  EXPECT_EQ(d[0].kind, NamespaceChangeKind::Resized);
  EXPECT_EQ(describe(d[0]), "namespace 2 resized: 200 -> 400 blocks of 512 bytes");
  EXPECT_EQ(d[1].nsid, 3u);
  EXPECT_EQ(d[1].kind, NamespaceChangeKind::Replaced);
  EXPECT_NE(describe(d[1]).find("identifiers changed (NGUID 03030303030303030303030303030303 EUI-64 "
                                "0303030303030303 -> NGUID 09090909090909090909090909090909"),
            std::string::npos)
      << describe(d[1]);
  EXPECT_EQ(d[2].nsid, 4u);
  EXPECT_EQ(d[2].kind, NamespaceChangeKind::Added);
  EXPECT_EQ(describe(d[2]), "namespace 4 added: 10 blocks of 4096 bytes");
  EXPECT_EQ(d[3].nsid, 5u);
  EXPECT_EQ(d[3].kind, NamespaceChangeKind::Removed);
  EXPECT_EQ(describe(d[3]), "namespace 5 removed");
  EXPECT_EQ(d[4].nsid, 6u);
  EXPECT_EQ(d[4].kind, NamespaceChangeKind::Reformatted);
  EXPECT_EQ(describe(d[4]), "namespace 6 reformatted: 600 blocks of 512 bytes -> 75 blocks of 4096 bytes");
}

TEST(NamespaceDiff, ReplacedWinsOverResized) {
  auto d = diff_namespaces({{7, ns(7, 100, 512, 1)}}, {{7, ns(7, 200, 4096, 2)}});
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].kind, NamespaceChangeKind::Replaced);
}

TEST(BlockSizeTable, FindsWhatWasPublished) {
  BlockSizeTable t;
  EXPECT_EQ(t.find(1), 0u);
  EXPECT_TRUE(t.publish({{1, 512}, {3, 4096}}));
  EXPECT_EQ(t.find(1), 512u);
  EXPECT_EQ(t.find(3), 4096u);
  EXPECT_EQ(t.find(2), 0u);
  EXPECT_TRUE(t.publish({{3, 512}}));
  EXPECT_EQ(t.find(1), 0u) << "a removed namespace";
  EXPECT_EQ(t.find(3), 512u);
  std::vector<std::pair<uint32_t, uint32_t>> many;
  for (uint32_t i = 1; i <= BlockSizeTable::kCapacity + 1; ++i) many.emplace_back(i, 512);
  EXPECT_FALSE(t.publish(many)) << "more than fit";
  EXPECT_EQ(t.find(BlockSizeTable::kCapacity), 512u);
  EXPECT_EQ(t.find(BlockSizeTable::kCapacity + 1), 0u);
}

#if defined(__SANITIZE_THREAD__)
constexpr uint64_t kLookups = 20000;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr uint64_t kLookups = 20000;
#else
constexpr uint64_t kLookups = 200000;
#endif
#else
constexpr uint64_t kLookups = 200000;
#endif

// Readers never see a half-published table: the two tables put the same namespaces in
// other slots, so a reader that mixed them would miss a namespace (find() == 0) or see a
// block size neither table has for it.
TEST(BlockSizeTable, ReadersSeeOneWholeTableWhileItIsRepublished) {
  BlockSizeTable t;
  std::vector<std::pair<uint32_t, uint32_t>> a, b;
  for (uint32_t i = 1; i <= 64; ++i) a.emplace_back(i, 512);
  for (uint32_t i = 64; i >= 1; --i) b.emplace_back(i, 4096);
  t.publish(a);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bad{0}, reads{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r)
    readers.emplace_back([&] {
      for (uint64_t n = 1; !stop.load(std::memory_order_relaxed); ++n) {
        const uint32_t bs = t.find(uint32_t(n % 64) + 1);
        if (bs != 512 && bs != 4096) bad.fetch_add(1, std::memory_order_relaxed);
        if (n % 1024 == 0) reads.fetch_add(1024, std::memory_order_relaxed);
      }
    });
  // Publishes until the readers have done many lookups (however slow this machine is). Under
  // ThreadSanitizer (kLookups above) every atomic access is a call, so a lookup is slow enough
  // that the publisher, which never pauses, overlaps most of them and the readers retry: there
  // 200000 lookups took a million publishes and over a minute on two busy cores, where 20000
  // still see tens of thousands of publishes in a few seconds, each access checked by TSan.
  uint64_t publishes = 0;
  while (reads.load(std::memory_order_relaxed) < kLookups || publishes < 1000) t.publish(publishes++ % 2 ? a : b);
  stop = true;
  for (auto& th : readers) th.join();
  EXPECT_EQ(bad.load(), 0u) << "of " << reads.load() << " lookups";
  EXPECT_GT(reads.load(), 0u);
}

// CAP with MPSMIN (bits 51:48) set to n: pages of 4 KiB << n.
constexpr uint64_t cap_mpsmin(uint64_t n) { return n << 48; }

TEST(LargestTransfer, MdtsInMinimumPagesUpToOurCap) {
  constexpr uint32_t kCap = 8u << 20;
  EXPECT_EQ(largest_transfer(0, 0, kCap), kCap);           // 0: no limit but ours
  EXPECT_EQ(largest_transfer(1, 0, kCap), 8192u);          // 2 pages of 4 KiB
  EXPECT_EQ(largest_transfer(5, 0, kCap), 128u << 10);     // 32 pages
  EXPECT_EQ(largest_transfer(11, 0, kCap), kCap);          // exactly our cap
  EXPECT_EQ(largest_transfer(12, 0, kCap), kCap);          // above it
  // A shift past the width of the arithmetic is "no limit", not 0 bytes (52), 4 KiB (64) or
  // 1 MiB (200) as an unchecked shift gave.
  EXPECT_EQ(largest_transfer(20, 0, kCap), kCap);
  EXPECT_EQ(largest_transfer(52, 0, kCap), kCap);
  EXPECT_EQ(largest_transfer(64, 0, kCap), kCap);
  EXPECT_EQ(largest_transfer(200, 0, kCap), kCap);
  EXPECT_EQ(largest_transfer(255, 0, kCap), kCap);
  EXPECT_EQ(largest_transfer(255, cap_mpsmin(15), kCap), kCap);
  // A larger minimum page (CAP.MPSMIN) scales MDTS: 8 KiB, 16 KiB and 128 MiB pages.
  EXPECT_EQ(largest_transfer(5, cap_mpsmin(1), kCap), 256u << 10);
  EXPECT_EQ(largest_transfer(1, cap_mpsmin(1), kCap), 16u << 10);
  EXPECT_EQ(largest_transfer(1, cap_mpsmin(15), 1u << 30), 256u << 20);
  EXPECT_EQ(largest_transfer(2, cap_mpsmin(2), 1u << 30), 64u << 10);
  // The engine's cap of 1 GiB: reached at MDTS 18, never wrapped past.
  EXPECT_EQ(largest_transfer(18, 0, 1u << 30), 1u << 30);
  EXPECT_EQ(largest_transfer(17, 0, 1u << 30), 512u << 20);
  EXPECT_EQ(largest_transfer(52, 0, 1u << 30), 1u << 30);
}

// A 4 KiB page of the active namespace list holding ids (the rest zero).
std::vector<uint8_t> list_page(const std::vector<uint32_t>& ids) {
  std::vector<uint8_t> p(4096, 0);
  std::memcpy(p.data(), ids.data(), std::min<size_t>(ids.size(), 1024) * 4);
  return p;
}

std::vector<uint32_t> run(uint32_t from, uint32_t n) {
  std::vector<uint32_t> v;
  for (uint32_t i = 0; i < n; ++i) v.push_back(from + i);
  return v;
}

TEST(ActiveNamespaceList, PagesAllowedByNn) {
  EXPECT_EQ(active_list_max_pages(0), 1u);
  EXPECT_EQ(active_list_max_pages(1), 1u);
  EXPECT_EQ(active_list_max_pages(1024), 1u);
  EXPECT_EQ(active_list_max_pages(1025), 2u);
  EXPECT_EQ(active_list_max_pages(0xFFFFFFFEu), 4194304u);  // no overflow at the largest NN
}

TEST(ActiveNamespaceList, ShortPageEndsAndFullPageAsksForMore) {
  std::vector<uint32_t> out;
  std::string why;
  auto p = list_page({1, 2, 7});
  EXPECT_EQ(append_active_list_page(p.data(), 0, 32, out, why), ActiveListPage::End);
  EXPECT_EQ(out, (std::vector<uint32_t>{1, 2, 7}));
  out.clear();
  p = list_page(run(1, 1024));
  EXPECT_EQ(append_active_list_page(p.data(), 0, 4096, out, why), ActiveListPage::More);
  p = list_page(run(1025, 1024));
  EXPECT_EQ(append_active_list_page(p.data(), 1024, 4096, out, why), ActiveListPage::More);
  EXPECT_EQ(out.size(), 2048u);
  // A full page whose last NSID is NN: nothing can follow, no further page is asked for.
  p = list_page(run(3073, 1024));
  EXPECT_EQ(append_active_list_page(p.data(), 2048, 4096, out, why), ActiveListPage::End);
}

TEST(ActiveNamespaceList, NsidsThatDoNotRiseOrExceedNnAreMalformed) {
  std::vector<uint32_t> out;
  std::string why;
  auto p = list_page({1, 3, 3});
  EXPECT_EQ(append_active_list_page(p.data(), 0, 32, out, why), ActiveListPage::Malformed);
  EXPECT_NE(why.find("NSID 3 at entry 2 does not follow 3"), std::string::npos) << why;
  out.clear();
  p = list_page({5, 4});
  EXPECT_EQ(append_active_list_page(p.data(), 0, 32, out, why), ActiveListPage::Malformed);
  out.clear();
  p = list_page({10});  // asked for NSIDs after 20: the page goes back
  EXPECT_EQ(append_active_list_page(p.data(), 20, 32, out, why), ActiveListPage::Malformed);
  out.clear();
  p = list_page({1, 33});
  EXPECT_EQ(append_active_list_page(p.data(), 0, 32, out, why), ActiveListPage::Malformed);
  EXPECT_NE(why.find("above the controller's NN (32)"), std::string::npos) << why;
  out.clear();
  p = list_page({1});  // NN 0: a controller with no namespaces lists none
  EXPECT_EQ(append_active_list_page(p.data(), 0, 0, out, why), ActiveListPage::Malformed);
}

TEST(ActiveNamespaceList, StopsAtTheNsidsKept) {
  // An endless list of valid NSIDs under the largest NN: pages stop once the cap is kept.
  std::vector<uint32_t> out;
  std::string why;
  uint32_t after = 0, pages = 0;
  ActiveListPage r = ActiveListPage::More;
  while (r == ActiveListPage::More && pages < 1000) {
    auto p = list_page(run(after + 1, 1024));
    r = append_active_list_page(p.data(), after, 0xFFFFFFFEu, out, why);
    after = out.back();
    ++pages;
  }
  EXPECT_EQ(r, ActiveListPage::End);
  EXPECT_EQ(out.size(), kMaxActiveNamespaces);
  EXPECT_EQ(pages, kMaxActiveNamespaces / 1024);
}

}  // namespace
}  // namespace nvtcp::host::detail::namespace_scan_test
