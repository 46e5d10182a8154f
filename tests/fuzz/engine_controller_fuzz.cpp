// SPDX-License-Identifier: Apache-2.0
// libFuzzer: the controller an application sees through the offload engine (AppController),
// driven through its shared memory by an application that writes anything at any time: CC,
// the admin rings and doorbells, well-formed and garbage admin commands with data pointers
// anywhere, interleaved with the engine's own events (queues gone, queues faulted, the
// application gone) in any order.
//
// The region is one heap block, so ASan catches any access outside it. The fuzzer checks:
// every queue handed to an engine core lies inside the region; a queue is never started
// twice without being stopped; a stop is only asked for a started queue; an application
// that is gone gets nothing started; once detached, the controller finishes when its last
// queue is gone; an application never has more admin commands forwarded than its limit,
// nor more admin buffer bytes than its share, and every buffer is given back by the end;
// fabrics and other commands for the shared controller are never forwarded.
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <set>
#include <vector>

#include "engine/app_controller.hpp"
#include "shm/region.hpp"
#include "wire/features.hpp"

using namespace nvtcp;
using engine::AppController;

namespace {

struct Input {
  const uint8_t* p;
  size_t n;
  uint8_t byte() { return n ? (--n, *p++) : 0; }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(byte()) << (8 * i);
    return v;
  }
};

struct FakeBackend final : AppController::Backend {
  uint8_t* lo = nullptr;
  uint8_t* hi = nullptr;
  std::set<uint16_t> running;
  std::set<uint16_t> stopping;
  bool detached = false;
  uint8_t identify[4096] = {};
  Input* in = nullptr;

  std::unique_ptr<engine::AdminBufferPool> pool;
  engine::AdminLimits limits;
  struct Job {
    uint64_t tag;
    engine::AdminBuffer data;
  };
  std::vector<Job> jobs;  // forwarded, answered when the input says
  void forward_admin(AppController& ctl, const nvme::Sqe& sqe, engine::AdminBuffer data, bool,
                     uint64_t tag) override {
    if (detached) __builtin_trap();
    // Only what the shared controller may see reaches it.
    if (sqe.opc == uint8_t(nvme::AdminOpcode::Fabrics) || sqe.opc == uint8_t(nvme::AdminOpcode::SetFeatures))
      __builtin_trap();
    jobs.push_back({tag, std::move(data)});
    if (ctl.admin_in_flight() > limits.max_in_flight || ctl.admin_buffer_bytes() > limits.max_buffer_bytes)
      __builtin_trap();
  }
  engine::AdminBufferPool& admin_buffers() override { return *pool; }
  void answer_one(AppController& ctl) {
    if (jobs.empty()) return;
    const size_t k = in->byte() % jobs.size();
    Job j = std::move(jobs[k]);
    jobs.erase(jobs.begin() + ptrdiff_t(k));
    if (!j.data.empty()) std::memset(j.data.data(), in->byte(), j.data.size());
    host::Completion c;
    c.status = nvme::Status::from_cqe(uint16_t(in->byte() & 3) << 1);
    c.dw0 = in->u32();
    ctl.admin_forwarded(j.tag, c, std::move(j.data));
    if (ctl.admin_waiting()) ctl.resume_admin();  // as the engine does once a buffer is back
  }
  const uint8_t* remote_identify() override { return identify; }
  bool inside(const void* p, size_t len) const {
    auto* b = static_cast<const uint8_t*>(p);
    return b >= lo && b + len <= hi;
  }
  bool start_io_queue(AppController&, uint16_t qid, const shm::QueueMemory& m, int,
                      shm::EngineQueuePair::CqPosition) override {
    if (detached) __builtin_trap();
    if (running.count(qid) || stopping.count(qid)) __builtin_trap();
    if (!inside(m.words, sizeof(shm::QueueWords)) || !inside(m.sq, size_t(m.sq_size) * sizeof(nvme::Sqe)) ||
        !inside(m.cq, size_t(m.cq_size) * sizeof(nvme::Cqe)) || m.sq_size < 2 || m.cq_size < 2)
      __builtin_trap();
    running.insert(qid);
    return true;
  }
  void set_coalescing(AppController&, uint32_t) override {
    if (detached) __builtin_trap();
  }
  void stop_io_queue(AppController&, uint16_t qid, bool) override {
    if (!running.count(qid) && !stopping.count(qid)) __builtin_trap();
    running.erase(qid);
    stopping.insert(qid);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  const uint32_t pairs = 2 + in.byte() % 4;
  const uint32_t entries = 2 + in.byte() % 30;
  auto layout = shm::RegionLayout::compute(pairs, entries, 64 * 1024);
  // One heap block exactly the region's size: a read or write past it is ASan's to catch.
  auto free_aligned = [](uint8_t* p) { ::operator delete[](p, std::align_val_t(4096)); };
  std::unique_ptr<uint8_t[], decltype(free_aligned)> heap(new (std::align_val_t(4096)) uint8_t[layout->total_bytes](),
                                                          free_aligned);
  uint8_t* region = heap.get();
  layout->write_header(region);
  FakeBackend be;
  be.lo = region;
  be.hi = region + layout->total_bytes;
  be.in = &in;
  std::memset(be.identify, 0, sizeof(be.identify));
  // Small budgets, so that floods reach them: the pool may be below one application's share.
  be.pool = std::make_unique<engine::AdminBufferPool>(4096ull * (1 + in.byte() % 16));
  be.limits.max_in_flight = 1 + in.byte() % 8;
  be.limits.max_buffer_bytes = 4096ull * (1 + in.byte() % 8);
  AppController ctl(shm::Attachment::over(*layout, region), be, 1, 1 + in.byte() % 8, be.limits);
  shm::QueueMemory admin_mem = layout->queue_pair(region, 0);
  shm::ControllerRegisters& regs = shm::RegionLayout::registers(region);
  uint32_t tail = 0;

  while (in.n) {
    const uint8_t op = in.byte();
    switch (op % 9) {
      case 0:  // CC: enable, reset, shutdown, anything
        regs.cc = (op & 0x80) ? in.u32() : ((op >> 4) & 1) | (uint32_t((op >> 5) & 3) << 14);
        ctl.on_kick();
        break;
      case 1: {  // a well-formed admin command at the tail
        nvme::Sqe s{};
        static const uint8_t ops[] = {0x00, 0x01, 0x02, 0x04, 0x05, 0x06, 0x08, 0x09, 0x0A,
                                      0x0C, 0x18, 0x7C, 0x80, 0x7F, 0x0D, 0x15, 0x84, 0x10};
        s.opc = ops[in.byte() % sizeof(ops)];
        s.flags = uint8_t(nvme::kSqeFlagsPsdtSgl | (in.byte() & 0x83));
        s.cid = uint16_t(in.u32());
        s.cdw10 = in.u32();
        s.cdw11 = in.u32();
        if (op & 0x10) s.cdw10 = (s.cdw10 & 0xFFFF0000u) | (in.byte() % 10);              // small queue IDs
        if (op & 0x20) s.cdw11 = (s.cdw11 & 0x0000FFFFu) | (uint32_t(in.byte() % 10) << 16);  // small CQ IDs / vectors
        s.sgl.addr = (op & 0x40) ? in.u32() % (80 * 1024) : uint64_t(in.u32()) << 20;
        s.sgl.length = (op & 0x40) ? 4096 : in.u32();
        s.sgl.type = uint8_t(in.byte() & 0x11);
        std::memcpy(&admin_mem.sq[tail % entries], &s, sizeof(s));
        tail = (tail + 1) % entries;
        admin_mem.words->sq_tail = tail;
        ctl.on_kick();
        break;
      }
      case 2:  // any doorbell value
        (op & 0x10 ? admin_mem.words->cq_head : admin_mem.words->sq_tail) = in.u32();
        ctl.on_kick();
        break;
      case 3: {  // the application returns admin CQ slots it has read (or not)
        admin_mem.words->cq_head = in.byte() % entries;
        ctl.on_kick();
        break;
      }
      case 4: {  // scribbles over the rings and words of any queue pair
        const size_t at = in.u32() % (layout->data_offset - layout->queues_offset);
        const size_t n = std::min<size_t>(in.byte() % 64, layout->data_offset - layout->queues_offset - at);
        for (size_t k = 0; k < n; ++k) region[layout->queues_offset + at + k] = in.byte();
        break;
      }
      case 5:  // an engine core reports a stopped queue gone
        if (!be.stopping.empty()) {
          auto it = be.stopping.begin();
          std::advance(it, in.byte() % be.stopping.size());
          const uint16_t qid = *it;
          be.stopping.erase(it);
          ctl.io_queue_stopped(qid);
        }
        break;
      case 6:  // an engine core reports a running queue faulted
        if (!be.running.empty()) ctl.io_queue_faulted(*be.running.begin());
        break;
      case 7:  // the application goes
        ctl.detach();
        be.detached = true;
        break;
      case 8:
        if (op & 0x10) {
          be.answer_one(ctl);  // the remote controller answers a forwarded command
        } else if (op & 0x20) {
          // A flood: the admin SQ filled with commands the engine forwards (Get Log Page,
          // Identify, Get Features), or with fabrics commands; one doorbell for all.
          const uint32_t n = 1 + in.byte() % entries;
          for (uint32_t k = 0; k < n; ++k) {  // overwriting entries not fetched yet is the application's right
            nvme::Sqe s{};
            static const uint8_t flood_ops[] = {0x02, 0x06, 0x0A, 0x7F};
            s.opc = flood_ops[(op >> 6) & 3];
            s.flags = nvme::kSqeFlagsPsdtSgl;
            s.cid = uint16_t(k);
            s.cdw10 = s.opc == 0x02 ? (uint32_t(in.byte() % 4) << 16) | 0x02u : (s.opc == 0x06 ? 0x02u : 0x07u);
            s.sgl.addr = uint64_t(in.byte() % 16) * 4096;
            s.sgl.length = s.opc == 0x02 ? ((s.cdw10 >> 16) + 1) * 4 : 4096;
            std::memcpy(&admin_mem.sq[tail % entries], &s, sizeof(s));
            tail = (tail + 1) % entries;
          }
          admin_mem.words->sq_tail = tail;
          ctl.on_kick();
        } else {
          ctl.on_kick();
        }
        break;
    }
  }
  // Every queue the controller still has is stopped by the end (it was asked to detach).
  ctl.detach();
  be.detached = true;
  if (!be.running.empty()) __builtin_trap();
  while (!be.stopping.empty()) {
    const uint16_t qid = *be.stopping.begin();
    be.stopping.erase(be.stopping.begin());
    ctl.io_queue_stopped(qid);
  }
  while (!be.jobs.empty()) be.answer_one(ctl);  // the answers still out come back (and are dropped)
  if (!ctl.finished()) __builtin_trap();
  if (be.pool->in_use() != 0) __builtin_trap();  // every admin buffer was given back
  return 0;
}
