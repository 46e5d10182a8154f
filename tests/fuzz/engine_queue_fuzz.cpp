// SPDX-License-Identifier: Apache-2.0
// libFuzzer: the engine's side of a shared-memory queue pair against an application that
// writes anything at any time: the SQ ring, the CQ ring and both doorbells come from the
// input, and are rewritten between engine steps. The engine must never read or write
// outside the rings (ASan watches: the region is one heap block), must keep a fault once it
// has one, and while it has none, must only ever fetch from and post to slots in range.
#include <cstdint>
#include <cstring>
#include <vector>

#include "shm/shm_queue.hpp"

using namespace nvtcp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint32_t sq_size = 2 + data[0] % 63, cq_size = 2 + data[1] % 63;
  std::vector<uint8_t> region(sizeof(shm::QueueWords) + sq_size * sizeof(nvme::Sqe) + cq_size * sizeof(nvme::Cqe));
  shm::QueueMemory m;
  m.words = reinterpret_cast<shm::QueueWords*>(region.data());
  m.sq = reinterpret_cast<nvme::Sqe*>(region.data() + sizeof(shm::QueueWords));
  m.sq_size = sq_size;
  m.cq = reinterpret_cast<nvme::Cqe*>(region.data() + sizeof(shm::QueueWords) + sq_size * sizeof(nvme::Sqe));
  m.cq_size = cq_size;
  shm::EngineQueuePair eng(m, 1);
  bool faulted = false;
  size_t i = 2;
  while (i < size) {
    const uint8_t op = data[i++];
    switch (op % 5) {
      case 0: {  // the application writes a doorbell word (any value)
        uint32_t v = 0;
        const size_t n = std::min<size_t>(4, size - i);
        std::memcpy(&v, data + i, n);
        i += n;
        (op & 8 ? m.words->cq_head : m.words->sq_tail) = v;
        break;
      }
      case 1: {  // the application scribbles over the rings
        const size_t n = std::min<size_t>(size - i, 32);
        const size_t at = (size_t(op) * 131) % (region.size() - sizeof(shm::QueueWords));
        std::memcpy(region.data() + sizeof(shm::QueueWords) + at, data + i,
                    std::min(n, region.size() - sizeof(shm::QueueWords) - at));
        i += n;
        break;
      }
      case 2: {
        nvme::Sqe s;
        if (eng.fetch(s) && eng.sq_head() >= sq_size) __builtin_trap();
        break;
      }
      case 3:
        if (eng.cq_space() > 0) eng.post(nvme::Cqe{});
        break;
      case 4:
        eng.want_sq_notice();
        eng.want_cq_notice();
        break;
    }
    if (faulted && eng.fault() == shm::EngineQueuePair::Fault::None) __builtin_trap();  // faults stick
    faulted = eng.fault() != shm::EngineQueuePair::Fault::None;
  }
  return 0;
}
