// SPDX-License-Identifier: Apache-2.0
// What a hostile or broken target can do to the host through its admin queue, against the
// scripted controller of lying_target.hpp: an active namespace list that never ends, an MDTS
// no shift can take, a flood of asynchronous events, and text meant for the user's terminal.
// Each test bounds what the target may make the host do, in counts of commands and lines.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "host/test_seams.hpp"
#include "lying_target.hpp"
#include "nvtcp/host.hpp"
#include "reactor/clock.hpp"
#include "../support/stderr_capture.hpp"

namespace nvtcp::test::host_hostile_target_test {
namespace {

constexpr const char* kNqn = "nqn.2026-11.io.nvtcp:lying";

host::TransportId trid_of(const LyingTarget& t, const char* nqn = kNqn) {
  host::TransportId id;
  id.traddr = "127.0.0.1";
  id.trsvcid = t.port();
  id.subnqn = nqn;
  return id;
}

// A list page of NSIDs after+1 .. after+1024: full whatever was asked, and never ending.
std::vector<uint8_t> endless_page(uint32_t after) {
  std::vector<uint8_t> b(4096);
  for (uint32_t i = 0; i < 1024; ++i) {
    const uint32_t id = after + 1 + i;
    std::memcpy(b.data() + i * 4, &id, 4);
  }
  return b;
}

// How much of the library's log a test echoes at its end: only the head, as a list flood
// that went wrong would bury the test report.
constexpr size_t kLogEchoLimit = 4000;

// A list that goes past NN: the scan ends at the first NSID above it, with an error that says
// so, after one page (NN 1000 fits in one).
TEST(HostileTarget, ActiveListAboveNnEndsTheScanWithAnError) {
  LyingTarget::Script s;
  s.ident = LyingTarget::controller(kNqn, 1000);
  s.active_list = endless_page;
  LyingTarget t(s);
  StderrCapture log(kLogEchoLimit);
  std::string err;
  auto c = host::Controller::connect(trid_of(t), host::ControllerOptions{}, err);
  EXPECT_FALSE(c) << "a list naming NSID 1001 of a controller with NN 1000 was taken";
  EXPECT_NE(err.find("above the controller's NN (1000)"), std::string::npos) << err;
  EXPECT_GE(log.count("namespace list not used"), 1u);
  EXPECT_EQ(t.list_pages.load(), 1u);
  EXPECT_FALSE(t.cut_off.load());
}

// A list that is full on every page: no more pages than NN allows are asked for (2 for NN
// 2048, the second ending at NSID 2048), and the namespaces they list are the ones used.
TEST(HostileTarget, EndlessActiveListIsReadNoFurtherThanNnAllows) {
  LyingTarget::Script s;
  s.ident = LyingTarget::controller(kNqn, 2048);
  s.active_list = endless_page;
  s.max_list_pages = 50;
  LyingTarget t(s);
  std::string err;
  auto c = host::Controller::connect(trid_of(t), host::ControllerOptions{}, err);
  ASSERT_TRUE(c) << err;
  EXPECT_FALSE(t.cut_off.load()) << "the host asked for " << t.list_pages.load() << " pages";
  EXPECT_EQ(t.list_pages.load(), 2u);
  const auto active = c->active_namespaces();
  ASSERT_EQ(active.size(), 2048u);
  EXPECT_EQ(active.front(), 1u);
  EXPECT_EQ(active.back(), 2048u);
}

// A target that answers each command just within its timeout (4 s of the controller's clock
// per Identify Namespace, of 64): connect() gives up once its bring-up has taken longer than
// it allows (connect timeout, CAP.TO, twice the admin timeout and 30 s: 55.5 s here), rather
// than waiting 256 s, or for ever with more namespaces.
TEST(HostileTarget, SlowBringUpEndsAtItsDeadline) {
  reactor::FakeClock clock;
  host::detail::ControllerSeam seam(clock);
  LyingTarget::Script s;
  s.ident = LyingTarget::controller(kNqn, 64);
  s.on_command = [&clock](const nvme::Sqe& sqe) {
    if (sqe.opc == uint8_t(nvme::AdminOpcode::Identify) && (sqe.cdw10 & 0xFF) == 0) clock.step_ms(4000);
  };
  LyingTarget t(s);
  std::string err;
  auto c = host::Controller::connect(trid_of(t), host::ControllerOptions{}, err);
  EXPECT_FALSE(c) << "connect() took " << t.identify_ns.load() * 4 << " s of its clock";
  EXPECT_NE(err.find("bring-up did not finish in time"), std::string::npos) << err;
  EXPECT_LE(t.identify_ns.load(), 15u);
}

// MDTS is a shift count the target chooses: too large a one is "no limit" (our cap, 8 MiB),
// not 0 bytes (every I/O refused) or 4 KiB as the unchecked shift gave.
TEST(HostileTarget, HugeMdtsMeansOurOwnCap) {
  for (uint8_t mdts : {uint8_t(52), uint8_t(64), uint8_t(200), uint8_t(255), uint8_t(5)}) {
    LyingTarget::Script s;
    s.ident = LyingTarget::controller(kNqn, 1);
    s.ident.mdts = mdts;
    LyingTarget t(s);
    std::string err;
    auto c = host::Controller::connect(trid_of(t), host::ControllerOptions{}, err);
    ASSERT_TRUE(c) << "MDTS " << int(mdts) << ": " << err;
    EXPECT_EQ(c->max_transfer_bytes(), mdts == 5 ? 128u << 10 : 8u << 20) << "MDTS " << int(mdts);
  }
}

// A controller that answers every AER at once with the event dw0: the host handles the event
// (reads its log, rescans) before it asks for the next, so answered AERs never run ahead of
// the log reads by more than the one request it keeps, and it logs the flood in a handful of
// lines (containing `line`), not one per event.
void expect_flood_is_paced_and_quiet(uint32_t dw0, uint32_t oaes, const std::string& line) {
  LyingTarget::Script s;
  s.ident = LyingTarget::controller(kNqn, 1);
  s.ident.aerl = 0;  // one AER outstanding
  s.ident.oaes = oaes;
  s.aer_flood = true;
  s.aer_dw0 = dw0;
  s.max_list_pages = UINT32_MAX;  // each namespace notice rescans: one list page each
  LyingTarget t(s);
  StderrCapture log(kLogEchoLimit);
  std::string err;
  auto c = host::Controller::connect(trid_of(t), host::ControllerOptions{}, err);
  ASSERT_TRUE(c) << err;
  constexpr uint64_t kEvents = 3000;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  uint64_t worst_lead = 0;
  while (t.aers_answered.load() < kEvents && std::chrono::steady_clock::now() < end) {
    const uint64_t answered = t.aers_answered.load();
    const uint64_t read = t.log_pages.load();  // read after: only ever more
    worst_lead = std::max(worst_lead, answered > read ? answered - read : 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_GE(t.aers_answered.load(), kEvents) << "the host stopped asking for events";
  // One AER outstanding, asked for again only once its event's log is read: at most one
  // answered and not yet read, and one more in the instant between two counters.
  EXPECT_LE(worst_lead, 2u) << "answered AERs ran ahead of the log reads";
  c.reset();
  const size_t lines = log.count(line);
  EXPECT_GE(lines, 1u);
  EXPECT_LE(lines, 20u) << "one line per event";
}

TEST(HostileTarget, AerFloodIsHandledBeforeTheNextRequestAndLoggedSparingly) {
  // An error event, information 0, log page 01h.
  expect_flood_is_paced_and_quiet(0x00010000, 0, "asynchronous event 0x00010000");
}

TEST(HostileTarget, NamespaceNoticeFloodIsPacedAndLoggedSparingly) {
  // A namespace attribute notice (type 2, information 0, log page 04h), announced in OAES.
  expect_flood_is_paced_and_quiet(0x00040002, 1u << 8, "namespace attribute notice");
}

std::string run_cli(const std::string& args, int& status) {
  const std::string cmd = std::string(NVTCP_BINARY) + " " + args + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  if (!p) return out;
  char chunk[4096];
  for (size_t n; (n = fread(chunk, 1, sizeof chunk, p)) > 0;) out.append(chunk, n);
  status = pclose(p);
  return out;
}

// Identify fields are the target's bytes: an OSC title sequence in the model, a screen clear in
// the serial number and firmware: printed escaped, not sent to the terminal.
TEST(HostileTarget, IdentifyPrintsTargetTextEscaped) {
  LyingTarget::Script s;
  s.ident = LyingTarget::controller(kNqn, 1);
  std::memset(s.ident.mn, ' ', sizeof s.ident.mn);
  std::memcpy(s.ident.mn, "\x1b]0;owned\x07model", 16);
  std::memcpy(s.ident.sn, "\x1b[2J", 4);
  std::memcpy(s.ident.fr, "\r\n", 2);
  LyingTarget t(s);
  int status = -1;
  const std::string out = run_cli(
      "identify -r \"trtype:tcp traddr:127.0.0.1 trsvcid:" + std::to_string(t.port()) + " subnqn:" + kNqn + "\"",
      status);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  EXPECT_NE(out.find("mn        : \\x1b]0;owned\\x07model\n"), std::string::npos) << out;
  EXPECT_NE(out.find("sn        : \\x1b[2J"), std::string::npos) << out;
  EXPECT_NE(out.find("fr        : \\x0d\\x0a"), std::string::npos) << out;
}

// A discovery entry whose trsvcid holds a newline and a line of its own: one trsvcid line,
// escaped, and the only subnqn line the entry's own.
TEST(HostileTarget, DiscoverPrintsEntriesEscapedAndCannotForgeLines) {
  LyingTarget::Script s;
  s.ident = LyingTarget::controller(nvme::kDiscoveryNqn, 0);
  s.ident.cntrltype = nvme::kCntrlTypeDiscovery;
  nvme::DiscoveryLogHeader h{};
  h.genctr = 1;
  h.numrec = 1;
  nvme::DiscoveryLogEntry e{};
  e.trtype = nvme::kTrtypeTcp;
  e.adrfam = nvme::kAdrfamIpv4;
  e.subtype = nvme::kSubtypeNvme;
  e.treq = nvme::kTreqNotRequired;
  std::strcpy(e.trsvcid, "4420\nsubnqn:  nqn.forged");
  std::strcpy(e.subnqn, "nqn.2026-11.io.nvtcp:real\x1b[8m");
  std::strcpy(e.traddr, "127.0.0.1");
  s.discovery_log.resize(sizeof h + sizeof e);
  std::memcpy(s.discovery_log.data(), &h, sizeof h);
  std::memcpy(s.discovery_log.data() + sizeof h, &e, sizeof e);
  LyingTarget t(s);
  int status = -1;
  const std::string out = run_cli("discover -a 127.0.0.1 -s " + std::to_string(t.port()), status);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  EXPECT_EQ(out.find("\nsubnqn:  nqn.forged"), std::string::npos) << out;
  EXPECT_NE(out.find("trsvcid: 4420\\x0asubnqn:  nqn.forged\n"), std::string::npos) << out;
  EXPECT_NE(out.find("subnqn:  nqn.2026-11.io.nvtcp:real\\x1b[8m\n"), std::string::npos) << out;
}

}  // namespace
}  // namespace nvtcp::test::host_hostile_target_test
