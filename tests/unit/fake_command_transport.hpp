// SPDX-License-Identifier: Apache-2.0
// The transport's side of the command layer's seam, and nothing more, for tests that run the
// command layer with no socket (command_queue_test.cpp, wait_composition_test.cpp): it hands
// commands to parse() and execute(), gives them buffers and the host's data, takes them back
// at complete() and releases them when the test is done with them. The device, the steps, the
// worker and the holds are the command layer's own code.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "target/command_queue.hpp"
#include "wire/commands.hpp"

namespace nvtcp::test::command_layer {

using Bytes = std::vector<uint8_t>;
using S = target::Command::State;

// A command as the fake carries it: the command layer's part, and the buffer the fake owns.
struct FakeCommand : target::Command {
  bool in_use = false;
  std::unique_ptr<uint8_t, void (*)(void*)> owned{nullptr, free};
};

// The transport's side of the seam and nothing more: it hands commands to parse() and
// execute(), gives them buffers, takes them back at complete() and releases them when the
// test is done with them. Whatever the command layer does in between (the device, the steps,
// the worker, its holds) is the command layer's own code.
class FakeTransport : public target::CommandTransport {
 public:
  FakeTransport(reactor::Reactor& r, target::ReactorCommands& shared, target::TargetState& ts,
                const reactor::Clock& clock = reactor::monotonic_clock())
      : reactor_(r),
        link_{&r, &clock, "fake", target::Arrival{}},
        commands_(ts, *this, link_, memory_, shared, [](void*) {}, nullptr),
        memory_(ts.config, ts.usage, sizeof(FakeCommand)),
        slots_(kSlots) {}
  // As the TCP queue keeps its requests' memory while the command layer's gate counts them in
  // flight (a device operation, a step's no-op on the reactor), the fake keeps its slots until
  // those have come back.
  ~FakeTransport() override {
    commands_.closed();
    for (int i = 0; i < 1000 && commands_.in_flight(); ++i) reactor_.run_once(1000);
  }

  target::CommandQueue& commands() { return commands_; }
  uint32_t command_count(S s) const { return commands_.command_states(uint32_t(kSlots))[size_t(s)]; }

  // A command as the TCP queue would carry it: data (if any) in the capsule, or, with r2t,
  // asked for and delivered whole. Returns the command, wherever it is now.
  target::Command* run(const wire::Sqe& sqe, const Bytes& data = {}, bool r2t = false) {
    FakeCommand* r = alloc();
    EXPECT_NE(r, nullptr) << "every slot is in use";
    if (!r) return nullptr;
    r->start(0);
    r->sqe = sqe;
    if (!data.empty() && !r2t) {
      give_buffer(*r, commands_.in_capsule_buffer(r->sqe, uint32_t(data.size())));
      std::memcpy(r->buf, data.data(), data.size());
      r->capsule_len = uint32_t(data.size());
    }
    commands_.parse(*r);
    if (!r->status.ok()) {
      commands_.fail(*r, r->status);
      return r;
    }
    if (r->xfer.buffer > r->buf_cap) give_buffer(*r, r->xfer.buffer);
    if (r->xfer.dir == target::Command::Direction::HostToController && r->capsule_len == 0) {
      r->waited = true;
      ++r2t_transfers;
      if (while_data_travels) while_data_travels();
      EXPECT_EQ(data.size(), r->xfer.len) << "the test passes the data its R2Ts ask for";
      std::memcpy(r->buf, data.data(), std::min<size_t>(data.size(), r->xfer.len));
    }
    commands_.execute(*r);
    return r;
  }
  // The next steps waiting now run, as on one reactor turn (each may wait for the turn after).
  size_t run_next_steps() {
    const size_t held = command_count(S::BetweenSteps);
    if (held) reactor_.run_once(1'000'000);
    return held;
  }
  // Device operations started so far (NULL and RAM answer at once).
  int device_ops() const { return int(commands_.command_entries()[size_t(S::InDevice)]); }
  // A command the test is done with goes back, as the transport releases one whose response
  // has left.
  void release(target::Command* r) {
    commands_.release(*r);
    static_cast<FakeCommand*>(r)->in_use = false;
  }
  // Frees the buffers of the slots not in use.
  void drop_idle_buffers() {
    for (FakeCommand& c : slots_)
      if (!c.in_use) drop_buffer(c);
  }

  // CommandTransport
  void complete(target::Command& r) override {
    EXPECT_EQ(r.state(), S::Idle) << "a command completes out of the command layer";
    cqes.push_back(r.cqe);
    completed.push_back(&r);
    sent.emplace_back(r.tx_data, r.tx_data + r.tx_len);
    sent.back().resize(size_t(r.tx_len) + r.tx_pad, 0);
  }
  void need_buffer(target::Command& r, uint32_t len) override {
    ++buffer_requests;
    if (hold_next_buffer_request) {  // the buffer comes later, as when the queue's memory is short
      hold_next_buffer_request = false;
      waiting_for_buffer.emplace_back(&r, len);
      return;
    }
    give_buffer(static_cast<FakeCommand&>(r), len);
    commands_.execute(r);
  }
  // The buffers held back come, and their commands run again.
  void give_held_buffers() {
    auto waiting = std::move(waiting_for_buffer);
    for (auto [r, len] : waiting) {
      give_buffer(static_cast<FakeCommand&>(*r), len);
      commands_.execute(*r);
    }
  }
  AbortLookup abort_before_execution(uint16_t cid) override {
    for (FakeCommand& c : slots_)
      if (c.in_use && c.sqe.cid == cid && c.state() != S::Idle) return {false, &c};
    return {};
  }
  void close(const std::string& why) override {
    closed_why = why;
    link_.closing = true;
  }
  // The queue came in through listener portid (before its Connect).
  void set_portid(uint16_t portid) { link_.arrival.portid = portid; }
  // The queue runs in a TLS session with this PSK identity.
  void set_tls_identity(const std::string& identity) { link_.tls_identity = identity; }
  std::vector<target::Command*> completed;
  std::vector<wire::Cqe> cqes;
  std::vector<Bytes> sent;  // each response's data, its zero padding included
  int r2t_transfers = 0, buffer_requests = 0;
  bool hold_next_buffer_request = false;
  std::vector<std::pair<target::Command*, uint32_t>> waiting_for_buffer;
  std::function<void()> while_data_travels;  // runs between an R2T command's parse and its execute
  std::string closed_why;

 private:
  static constexpr size_t kSlots = 64;
  FakeCommand* alloc() {
    for (FakeCommand& c : slots_)
      if (!c.in_use) {
        c.in_use = true;
        return &c;
      }
    return nullptr;
  }
  void give_buffer(FakeCommand& c, uint32_t len) {
    if (len <= c.buf_cap) return;
    drop_buffer(c);
    const uint32_t cap = (len + 4095) & ~4095u;
    void* p = nullptr;
    ASSERT_EQ(posix_memalign(&p, 4096, cap), 0);
    c.owned.reset(static_cast<uint8_t*>(p));
    c.buf = c.owned.get();
    c.buf_cap = cap;
  }
  static void drop_buffer(FakeCommand& c) {
    c.owned.reset();
    c.buf = nullptr;
    c.buf_cap = 0;
  }

  reactor::Reactor& reactor_;
  target::QueueLink link_;
  target::CommandQueue commands_;  // before the memory, which gives its bytes back to its host's budget
  target::QueueMemory memory_;
  std::deque<FakeCommand> slots_;
};


// The status of q's last completion; its command is released for the next one.
inline wire::Status last_status(FakeTransport& q) {
  EXPECT_FALSE(q.completed.empty());
  if (q.completed.empty()) return wire::sc::InternalError;
  target::Command* r = q.completed.back();
  const wire::Status st = r->status;
  q.release(r);
  q.completed.pop_back();
  return st;
}

inline wire::Sqe with_sgl(wire::Sqe s, uint16_t cid, uint32_t len, uint8_t type = wire::kSglTransportDataBlock) {
  s.cid = cid;
  s.flags = (s.flags & ~wire::kSqeFlagsPsdtMask) | wire::kSqeFlagsPsdtSgl;
  s.sgl.length = len;
  s.sgl.type = type;
  return s;
}

template <class T>
Bytes bytes_of(const T& v) {
  Bytes b(sizeof(T));
  std::memcpy(b.data(), &v, sizeof(T));
  return b;
}

}  // namespace nvtcp::test::command_layer
