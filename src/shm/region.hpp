// SPDX-License-Identifier: Apache-2.0
// The memory an application shares with the engine: one memfd, laid out as a header, the
// queue pairs (admin queue pair first) and the data region the application does its I/O
// from (the DMA-buffer analog). Both sides compute the layout from the same four numbers;
// the engine writes them into the header and the application checks them on attach.
//
// Data pointers in the application's SQEs are offsets into the data region, never
// addresses: the engine turns each into a span of the region after checking it lies
// entirely inside, and answers anything else with an NVMe status.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>

#include "nvtcp/sqe.hpp"
#include "nvtcp/status.hpp"
#include "shm/shm_queue.hpp"

namespace nvtcp::shm {

inline constexpr uint32_t kRegionMagic = 0x6e767465;  // "etvn"
inline constexpr uint32_t kRegionVersion = 2;
inline constexpr uint32_t kMaxQueuePairs = 1024;      // admin included
inline constexpr uint32_t kMaxQueueEntries = 65536;   // the NVMe limit (MQES 0FFFFh)

// The controller registers a PCIe controller has in its BAR, the ones a software queue
// interface needs. The application writes CC (then kicks the engine, the analog of the MMIO
// write); the engine writes CAP and VS at attach and CSTS as the controller changes state.
// The admin queue is queue pair 0 with the region's queue size (AQA and ASQ/ACQ are fixed).
struct alignas(64) ControllerRegisters {
  uint64_t cap;
  uint32_t vs;
  uint32_t cc;    // application
  uint32_t csts;  // engine
  uint32_t rsvd[11];
};
static_assert(sizeof(ControllerRegisters) == 64);

struct RegionHeader {
  uint32_t magic;
  uint32_t version;
  uint32_t queue_pairs;    // admin queue pair included
  uint32_t queue_entries;  // entries of every SQ and CQ
  uint64_t data_offset;    // from the start of the region
  uint64_t data_bytes;
  uint64_t total_bytes;
  uint8_t rsvd0[24];
  ControllerRegisters regs;  // at offset 64
  uint8_t rsvd1[4096 - 128];
};
static_assert(sizeof(RegionHeader) == 4096);
static_assert(offsetof(RegionHeader, regs) == 64);

struct RegionLayout {
  uint32_t queue_pairs = 0;
  uint32_t queue_entries = 0;
  uint64_t queues_offset = 0;  // queue pair i at queues_offset + i * pair_bytes
  uint64_t pair_bytes = 0;     // QueueWords, SQ ring, CQ ring; a multiple of 4 KiB
  uint64_t data_offset = 0;    // 4 KiB aligned, so O_DIRECT and page mappings work on it
  uint64_t data_bytes = 0;
  uint64_t total_bytes = 0;

  // nullopt when the numbers are out of range (or the total would not fit 64 bits).
  static std::optional<RegionLayout> compute(uint32_t queue_pairs, uint32_t queue_entries, uint64_t data_bytes) {
    if (queue_pairs < 1 || queue_pairs > kMaxQueuePairs || queue_entries < 2 || queue_entries > kMaxQueueEntries)
      return std::nullopt;
    if (data_bytes > (uint64_t(1) << 40)) return std::nullopt;  // 1 TiB: more is a mistake
    RegionLayout l;
    l.queue_pairs = queue_pairs;
    l.queue_entries = queue_entries;
    l.queues_offset = sizeof(RegionHeader);
    l.pair_bytes = page_up(sizeof(QueueWords) + uint64_t(queue_entries) * (sizeof(nvme::Sqe) + sizeof(nvme::Cqe)));
    l.data_offset = l.queues_offset + uint64_t(queue_pairs) * l.pair_bytes;
    l.data_bytes = page_up(data_bytes);
    l.total_bytes = l.data_offset + l.data_bytes;
    return l;
  }

  void write_header(void* region) const {
    auto* h = static_cast<RegionHeader*>(region);
    *h = RegionHeader{};
    h->magic = kRegionMagic;
    h->version = kRegionVersion;
    h->queue_pairs = queue_pairs;
    h->queue_entries = queue_entries;
    h->data_offset = data_offset;
    h->data_bytes = data_bytes;
    h->total_bytes = total_bytes;
  }
  // The header agrees with this layout (what an application checks on attach).
  bool matches(const void* region) const {
    const auto* h = static_cast<const RegionHeader*>(region);
    return h->magic == kRegionMagic && h->version == kRegionVersion && h->queue_pairs == queue_pairs &&
           h->queue_entries == queue_entries && h->data_offset == data_offset && h->data_bytes == data_bytes &&
           h->total_bytes == total_bytes;
  }

  static ControllerRegisters& registers(void* region) { return static_cast<RegionHeader*>(region)->regs; }

  QueueMemory queue_pair(void* region, uint32_t i) const {
    auto* p = static_cast<uint8_t*>(region) + queues_offset + uint64_t(i) * pair_bytes;
    QueueMemory m;
    m.words = reinterpret_cast<QueueWords*>(p);
    m.sq = reinterpret_cast<nvme::Sqe*>(p + sizeof(QueueWords));
    m.sq_size = queue_entries;
    m.cq = reinterpret_cast<nvme::Cqe*>(p + sizeof(QueueWords) + uint64_t(queue_entries) * sizeof(nvme::Sqe));
    m.cq_size = queue_entries;
    return m;
  }

 private:
  static constexpr uint64_t page_up(uint64_t n) { return (n + 4095) & ~uint64_t(4095); }
};

// A data pointer checked against the data region.
struct DataSpan {
  nvme::Status status;     // Success, or why the descriptor is refused
  uint8_t* data = nullptr;
  uint32_t length = 0;
};

// The SGL of an application's SQE (one Data Block descriptor, addr = offset into the data
// region) as a span of the region mapped at data_base; want = the bytes the command moves.
inline DataSpan resolve_data(const nvme::Sqe& sqe, uint8_t* data_base, uint64_t data_bytes, uint32_t want) {
  DataSpan d;
  if (want == 0) return d;
  if ((sqe.flags & nvme::kSqeFlagsPsdtMask) != nvme::kSqeFlagsPsdtSgl || (sqe.sgl.type >> 4) != 0x0) {
    d.status = nvme::sc::SglDescriptorTypeInvalid;  // Data Block (type 0h) only
    return d;
  }
  if (sqe.sgl.length != want) {
    d.status = nvme::sc::DataSglLengthInvalid;
    return d;
  }
  const uint64_t off = sqe.sgl.addr;
  if (off > data_bytes || want > data_bytes - off) {
    d.status = nvme::sc::SglOffsetInvalid;  // outside the application's own region
    return d;
  }
  d.data = data_base + off;
  d.length = want;
  return d;
}

}  // namespace nvtcp::shm
