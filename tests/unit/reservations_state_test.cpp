// SPDX-License-Identifier: Apache-2.0
// The reservation state of one namespace without a target around it: the registrant limit,
// Report's count, the state file's writer (one fsync shared by the commands that arrive
// while it writes, no namespace lock held while it does) and loading a file that cannot be
// trusted. It starts threads (commands beside the writer), so CMake labels its suites
// `threaded` and the TSan pass runs them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "target/reservations.hpp"
#include "wire/reservations.hpp"

namespace nvtcp::target::reservations_state_test {
namespace {

namespace sc = nvme::sc;
using HostId = Reservations::HostId;

HostId host(uint32_t n) {
  HostId h{};
  std::memcpy(h.data(), &n, sizeof(n));
  h[15] = 0xA5;  // never all zeros
  return h;
}

uint32_t register_cdw10(uint32_t cptpl = 0) { return uint32_t(wire::RegisterAction::Register) | cptpl << 30; }

std::string hex(const HostId& h) {
  std::string s;
  char b[3];
  for (uint8_t x : h) {
    std::snprintf(b, sizeof(b), "%02x", x);
    s += b;
  }
  return s;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

// A state file as the writer writes it, with n registrants (and the reservation type t held
// by the first).
std::string state_text(uint32_t n, uint8_t type = 0) {
  std::string s = R"({"version": 1, "generation": 7, "type": )";
  s += std::to_string(type);
  s += R"(, "holder": ")";
  s += hex(host(0));
  s += R"(", "registrants": [)";
  for (uint32_t i = 0; i < n; ++i) {
    if (i) s += ',';
    s += R"({"host": ")";
    s += hex(host(i));
    s += R"(", "key": )";
    s += std::to_string(i + 1);
    s += '}';
  }
  s += "]}\n";
  return s;
}

// A directory of its own per test, removed with what is in it.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/nvtcp-resv-unit-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string file(const char* name) const { return path + "/" + name; }
};

struct ReportView {
  uint32_t gen;
  uint8_t rtype;
  uint16_t regctl;
  std::vector<uint8_t> rcsts;
};
ReportView report(const Reservations& r, uint32_t len = 4096) {
  std::vector<uint8_t> buf(len);
  EXPECT_TRUE(r.report(true, buf.data(), len).ok());
  wire::ReservationStatusExtHeader h;
  std::memcpy(&h, buf.data(), sizeof(h));
  ReportView v{h.gen, h.rtype, h.regctl, {}};
  for (size_t off = sizeof(h); off + 64 <= len && v.rcsts.size() < v.regctl; off += 64) v.rcsts.push_back(buf[off + 2]);
  return v;
}

TEST(Reservations, RegisterBeyondTheRegistrantLimitFailsAndTheRegisteredKeepWorking) {
  Reservations r({}, 4);
  std::vector<Reservations::Notice> notices;
  for (uint32_t i = 0; i < 4; ++i)
    ASSERT_TRUE(r.do_register(host(i), register_cdw10(), {0, 100 + i}, notices).ok()) << i;
  // A fifth host (a hostile one inventing host IDs, or a real one): refused, nothing stored.
  EXPECT_EQ(r.do_register(host(4), register_cdw10(), {0, 104}, notices), sc::InternalError);
  EXPECT_EQ(r.do_register(host(5), register_cdw10(), {0, 105}, notices), sc::InternalError);
  EXPECT_EQ(r.registrant_count(), 4u);
  // The registered hosts are unaffected: registering again with the same key, acquiring.
  EXPECT_TRUE(r.do_register(host(1), register_cdw10(), {0, 101}, notices).ok());
  EXPECT_TRUE(r.acquire(host(0), uint32_t(wire::AcquireAction::Acquire) | 1u << 8, {100, 0}, notices).ok());
  EXPECT_EQ(report(r).regctl, 4u);
  // One leaves: there is room again.
  EXPECT_TRUE(r.do_register(host(3), uint32_t(wire::RegisterAction::Unregister), {103, 0}, notices).ok());
  EXPECT_TRUE(r.do_register(host(4), register_cdw10(), {0, 104}, notices).ok());
  EXPECT_EQ(r.registrant_count(), 4u);
}

// Each connection caches its access decision until the state changes; a host replacing its
// key in a loop must not make every other connection's next I/O take the namespace mutex.
TEST(Reservations, AKeyReplaceLoopKeepsOtherConnectionsCachedAccess) {
  Reservations r({}, 8);
  std::vector<Reservations::Notice> n;
  ASSERT_TRUE(r.do_register(host(0), register_cdw10(), {0, 1}, n).ok());
  ASSERT_TRUE(r.do_register(host(1), register_cdw10(), {0, 2}, n).ok());
  ASSERT_TRUE(r.acquire(host(0), uint32_t(wire::AcquireAction::Acquire) | 1u << 8, {1, 0}, n).ok());
  Reservations::AccessCache other;
  EXPECT_FALSE(r.allowed(host(1).data(), false, true, other)) << "Write Exclusive: not the holder";
  const uint64_t seen = other.version;
  for (uint64_t k = 2; k < 50; ++k) {
    ASSERT_TRUE(r.do_register(host(1), uint32_t(wire::RegisterAction::Replace), {k, k + 1}, n).ok());
    ASSERT_TRUE(r.do_register(host(1), register_cdw10(), {0, k + 1}, n).ok());  // the same key again
  }
  EXPECT_FALSE(r.allowed(host(1).data(), false, true, other));
  EXPECT_EQ(other.version, seen) << "the cached decision was still good";
  ASSERT_TRUE(r.do_register(host(2), register_cdw10(), {0, 9}, n).ok());  // a registrant more
  EXPECT_FALSE(r.allowed(host(1).data(), false, true, other));
  EXPECT_NE(other.version, seen);
}

TEST(Reservations, ReportCountsTheCeilingOfRegistrantsWithoutWrapping) {
  // 65535 registrants (the ceiling: REGCTL is 16 bits), restored from a file so the test
  // does not pay one registration each.
  TempDir dir;
  const std::string path = dir.file("image.nvtcp-resv");
  spit(path, state_text(Reservations::kMaxRegistrantsCeiling, uint8_t(wire::ReservationType::ExclusiveAccessAllRegistrants)));
  Reservations r(path, Reservations::kMaxRegistrantsCeiling);
  ASSERT_EQ(r.load(), "");
  ASSERT_EQ(r.registrant_count(), Reservations::kMaxRegistrantsCeiling);
  const ReportView v = report(r, 64 + 16 * 64);
  EXPECT_EQ(v.regctl, Reservations::kMaxRegistrantsCeiling);
  EXPECT_EQ(v.rtype, uint8_t(wire::ReservationType::ExclusiveAccessAllRegistrants));
  ASSERT_EQ(v.rcsts.size(), 16u);  // as many entries as fit
  for (uint8_t s : v.rcsts) EXPECT_EQ(s, 1u) << "every registrant holds an all-registrants reservation";
  // A limit above the ceiling is held to it: the count can never wrap.
  Reservations big({}, 100000);
  EXPECT_EQ(big.max_registrants(), Reservations::kMaxRegistrantsCeiling);
}

TEST(Reservations, AStateFileWithMoreRegistrantsThanTheLimitIsRefusedNotWrapped) {
  TempDir dir;
  const std::string path = dir.file("image.nvtcp-resv");
  spit(path, state_text(300));
  Reservations r(path, 256);
  const std::string why = r.load();
  EXPECT_NE(why.find("300 registrants"), std::string::npos) << why;
  EXPECT_FALSE(r.ptpl_capable());
  EXPECT_EQ(r.registrant_count(), 0u);
  EXPECT_EQ(slurp(path), state_text(300)) << "the file is left for the operator";
}

TEST(Reservations, UntrustworthyStateFilesTurnOffPersistenceOnlyAndAreLeftAlone) {
  TempDir dir;
  const std::string victim = dir.file("victim");
  spit(victim, "precious\n");
  struct Case {
    const char* name;
    std::function<void(const std::string&)> make;
    const char* why;
  };
  const Case cases[] = {
      {"garbage", [](const std::string& p) { spit(p, "\x01garbage{"); }, "not a reservation state"},
      {"fifo", [](const std::string& p) { ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0); }, "not a regular file"},
      {"directory", [](const std::string& p) { ASSERT_EQ(::mkdir(p.c_str(), 0700), 0); }, "not a regular file"},
      {"symlink", [&](const std::string& p) { ASSERT_EQ(::symlink(victim.c_str(), p.c_str()), 0); }, "symbolic link"},
      {"oversized", [](const std::string& p) { spit(p, std::string(4096 + 4 * 160 + 1, ' ')); }, "bytes, more than"},
      {"twice", [](const std::string& p) {
         std::string s = state_text(2);
         const std::string h1 = hex(host(1)), h0 = hex(host(0));
         s.replace(s.find(h1), h1.size(), h0);
         spit(p, s);
       }, "registered twice"},
      {"holder", [](const std::string& p) {
         std::string s = state_text(1, 1);
         const std::string h0 = hex(host(0));
         s.replace(s.find(h0), h0.size(), hex(host(9)));  // the holder field comes first
         spit(p, s);
       }, "holder is not registered"},
      {"negative key", [](const std::string& p) {
         std::string s = state_text(1);
         s.replace(s.find("\"key\": 1"), 8, "\"key\": -1");
         spit(p, s);
       }, "bad registrant key"},
      {"type", [](const std::string& p) { spit(p, R"({"version":1,"generation":1,"type":9,"holder":"","registrants":[]})"); },
       "bad reservation type"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir.file(c.name);
    c.make(path);
    Reservations r(path, 4);
    ASSERT_TRUE(r.ptpl_capable());
    const std::string why = r.load();  // a FIFO opened without O_NONBLOCK would hang here
    EXPECT_NE(why.find(c.why), std::string::npos) << why;
    EXPECT_NE(why.find("persistence through power loss is off"), std::string::npos) << why;
    EXPECT_FALSE(r.ptpl_capable());
    // The namespace still has reservations, just not persistent ones.
    std::vector<Reservations::Notice> n;
    EXPECT_EQ(r.do_register(host(1), register_cdw10(wire::kCptplOn), {0, 1}, n), sc::InvalidField);
    EXPECT_TRUE(r.do_register(host(1), register_cdw10(), {0, 1}, n).ok());
    EXPECT_EQ(r.persist_writes(), 0u);
  }
  EXPECT_EQ(slurp(victim), "precious\n");
}

TEST(Reservations, AStateFileThatIsFineIsRestored) {
  TempDir dir;
  const std::string path = dir.file("image.nvtcp-resv");
  spit(path, state_text(3, uint8_t(wire::ReservationType::WriteExclusive)));
  Reservations r(path, 4);
  EXPECT_EQ(r.load(), "");
  EXPECT_TRUE(r.ptpl());
  EXPECT_EQ(r.registrant_count(), 3u);
  EXPECT_EQ(r.type(), wire::ReservationType::WriteExclusive);
  EXPECT_EQ(r.generation(), 7u);
}

TEST(Reservations, ASymlinkAtTheTemporaryNameIsReplacedNotWrittenThrough) {
  TempDir dir;
  const std::string path = dir.file("image.nvtcp-resv"), victim = dir.file("victim");
  spit(victim, "precious\n");
  ASSERT_EQ(::symlink(victim.c_str(), (path + ".tmp").c_str()), 0);
  Reservations r(path, 4);
  ASSERT_EQ(r.load(), "");
  std::vector<Reservations::Notice> n;
  ASSERT_TRUE(r.do_register(host(1), register_cdw10(wire::kCptplOn), {0, 1}, n).ok());
  EXPECT_EQ(slurp(victim), "precious\n");
  struct stat sb{};
  ASSERT_EQ(::lstat(path.c_str(), &sb), 0);
  EXPECT_TRUE(S_ISREG(sb.st_mode));
  EXPECT_NE(slurp(path).find(hex(host(1))), std::string::npos);
  EXPECT_NE(::lstat((path + ".tmp").c_str(), &sb), 0) << "the temporary name is gone after the rename";
  EXPECT_EQ(r.persist_writes(), 1u);
}

// r, loaded from a state file not yet there, with host 0 registered and persistence through a
// power loss turned on (which writes the file).
void register_persisting(Reservations& r, std::vector<Reservations::Notice>& n) {
  ASSERT_EQ(r.load(), "");
  ASSERT_TRUE(r.do_register(host(0), register_cdw10(wire::kCptplOn), {0, 1}, n).ok());
}

// The writer is held inside a write (after its snapshot); meanwhile 32 more commands change
// the state. They take the namespace mutex freely (so the writer does not hold it while it
// writes), and all 32 are made durable by one more write, not 32.
TEST(Reservations, CommandsThatArriveDuringAWriteShareTheNextOne) {
  TempDir dir;
  const std::string path = dir.file("image.nvtcp-resv");
  Reservations r(path, 64);
  std::vector<Reservations::Notice> n;
  ASSERT_NO_FATAL_FAILURE(register_persisting(r, n));
  ASSERT_EQ(r.persist_writes(), 1u);

  std::mutex m;
  std::condition_variable cv;
  bool inside = false, let_go = false, held_once = false;
  r.set_before_write_hook([&] {
    std::unique_lock lk(m);
    if (held_once) return;
    held_once = inside = true;
    cv.notify_all();
    cv.wait(lk, [&] { return let_go; });
  });
  const Reservations::Outcome first = r.apply_register(host(1), register_cdw10(), {0, 2}, n);
  ASSERT_TRUE(first.status.ok());
  ASSERT_NE(first.durable_ticket, 0u);
  {
    std::unique_lock lk(m);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(30), [&] { return inside; }));
  }
  // While the file is being written: commands, a Report and an access decision all proceed
  // (each would block on the namespace mutex if the writer held it; bounded by a future).
  auto during = std::async(std::launch::async, [&] {
    std::vector<Reservations::Notice> notices;
    uint64_t last = 0;
    for (uint32_t i = 2; i < 34; ++i) {
      const auto o = r.apply_register(host(i), register_cdw10(), {0, 10 + i}, notices);
      EXPECT_TRUE(o.status.ok());
      last = o.durable_ticket;
    }
    EXPECT_EQ(report(r).regctl, 34u);
    Reservations::AccessCache cache;
    EXPECT_TRUE(r.allowed(host(5).data(), true, true, cache));
    return last;
  });
  const bool proceeded = during.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  if (!proceeded) {  // let the writer go, so that the failure below ends the test instead of hanging it
    std::lock_guard lk(m);
    let_go = true;
    cv.notify_all();
  }
  ASSERT_TRUE(proceeded) << "a command waited for the writer's file I/O";
  const uint64_t last = during.get();
  bool first_durable = false;
  EXPECT_FALSE(r.written(first.durable_ticket, first_durable)) << "completed before its state was written";
  {
    std::lock_guard lk(m);
    let_go = true;
  }
  cv.notify_all();
  EXPECT_TRUE(r.wait_durable(last));
  EXPECT_EQ(r.persist_writes(), 3u) << "the held write, then one for all 32 commands";
  EXPECT_TRUE(r.written(first.durable_ticket, first_durable));
  EXPECT_TRUE(first_durable);
  // What reached the file is the latest state.
  Reservations again(path, 64);
  EXPECT_EQ(again.load(), "");
  EXPECT_EQ(again.registrant_count(), 34u);
}

TEST(Reservations, TurningPersistenceOffRemovesTheFileBeforeTheCommandCompletes) {
  TempDir dir;
  const std::string path = dir.file("image.nvtcp-resv");
  Reservations r(path, 4);
  std::vector<Reservations::Notice> n;
  ASSERT_NO_FATAL_FAILURE(register_persisting(r, n));
  ASSERT_EQ(::access(path.c_str(), F_OK), 0);
  ASSERT_TRUE(r.do_register(host(0), register_cdw10(wire::kCptplOff), {0, 1}, n).ok());
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
  // Off: changes write nothing.
  const uint64_t writes = r.persist_writes();
  ASSERT_TRUE(r.do_register(host(1), register_cdw10(), {0, 2}, n).ok());
  EXPECT_EQ(r.persist_writes(), writes);
  std::string err;
  ASSERT_TRUE(r.set_ptpl(true, err)) << err;
  EXPECT_NE(slurp(path).find(hex(host(1))), std::string::npos);
}

}  // namespace
}  // namespace nvtcp::target::reservations_state_test
