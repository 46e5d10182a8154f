// SPDX-License-Identifier: Apache-2.0
// Micro-benchmarks (Google Benchmark): CRC32C per byte, and the PDU receive state machine
// and PDU header building per PDU, so changes to the hot parsing code show up as numbers.
//   build/nvtcp_micro_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "nvtcp/sqe.hpp"
#include "transport/pdu_receiver.hpp"
#include "wire/digest.hpp"
#include "wire/pdu.hpp"

using namespace nvtcp::wire;
using nvtcp::transport::PduHandler;
using nvtcp::transport::PduReceiver;
using nvtcp::transport::Side;

static void BM_Crc32c(benchmark::State& state) {
  std::vector<uint8_t> buf(size_t(state.range(0)), 0x5A);
  for (auto _ : state) benchmark::DoNotOptimize(crc32c(buf.data(), buf.size()));
  state.SetBytesProcessed(int64_t(state.iterations()) * state.range(0));
}
BENCHMARK(BM_Crc32c)->Arg(24)->Arg(72)->Arg(4096)->Arg(131072);

namespace {
struct Sink : PduHandler {
  std::vector<uint8_t> dst = std::vector<uint8_t>(1 << 20);
  uint64_t pdus = 0;
  bool on_pdu_header(const uint8_t*, uint32_t, uint8_t*& d) override {
    d = dst.data();
    return true;
  }
  void on_pdu_complete(const uint8_t*, bool) override { ++pdus; }
  void on_pdu_error(Fes, uint32_t, const std::string&) override {}
};

// n C2HData PDUs of `size` bytes each, as a target with these digests would send them.
std::vector<uint8_t> c2h_stream(int n, uint32_t size, bool digests) {
  std::vector<uint8_t> out;
  std::vector<uint8_t> data(size, 0xA5);
  for (int i = 0; i < n; ++i) {
    C2HDataPdu h{};
    h.ch.type = uint8_t(PduType::C2HData);
    h.ch.flags = kFlagDataLast | kFlagDataSuccess | (digests ? kFlagHdgst | kFlagDdgst : 0);
    h.ch.hlen = sizeof(h);
    h.ch.pdo = uint8_t(data_offset(sizeof(h), digests, 0));
    h.ch.plen = h.ch.pdo + size + (digests ? 4 : 0);
    h.cccid = uint16_t(i);
    h.datal = size;
    const auto* p = reinterpret_cast<const uint8_t*>(&h);
    out.insert(out.end(), p, p + sizeof(h));
    if (digests) {
      uint32_t c = crc32c(&h, sizeof(h));
      out.insert(out.end(), reinterpret_cast<uint8_t*>(&c), reinterpret_cast<uint8_t*>(&c) + 4);
    }
    out.insert(out.end(), data.begin(), data.end());
    if (digests) {
      uint32_t c = crc32c(data.data(), data.size());
      out.insert(out.end(), reinterpret_cast<uint8_t*>(&c), reinterpret_cast<uint8_t*>(&c) + 4);
    }
  }
  return out;
}
}  // namespace

// Parsing 4 KiB read responses fed in 64 KiB receive-sized chunks.
static void BM_ParseC2HData(benchmark::State& state) {
  bool digests = state.range(1) != 0;
  auto stream = c2h_stream(64, uint32_t(state.range(0)), digests);
  Sink sink;
  PduReceiver rx(Side::Host, &sink);
  rx.set_digests(digests, digests);
  for (auto _ : state) {
    for (size_t off = 0; off < stream.size(); off += 65536)
      rx.feed(stream.data() + off, std::min<size_t>(65536, stream.size() - off));
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * 64);
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(stream.size()));
}
BENCHMARK(BM_ParseC2HData)->Args({4096, 0})->Args({4096, 1})->Args({131072, 0});

// Building one CapsuleCmd header for a read, with and without a header digest.
static void BM_BuildCapsuleCmd(benchmark::State& state) {
  bool hdgst = state.range(0) != 0;
  alignas(8) uint8_t buf[sizeof(CapsuleCmdHeader) + 4];
  uint16_t cid = 0;
  for (auto _ : state) {
    auto* pdu = reinterpret_cast<CapsuleCmdHeader*>(buf);
    Sqe sqe{};
    sqe.opc = 0x02;
    sqe.cid = cid++;
    sqe.flags = kSqeFlagsPsdtSgl;
    sqe.nsid = 1;
    sqe.cdw10 = cid;
    sqe.sgl.length = 4096;
    sqe.sgl.type = kSglTransportDataBlock;
    std::memcpy(pdu->sqe, &sqe, sizeof(sqe));
    pdu->ch = {uint8_t(PduType::CapsuleCmd), uint8_t(hdgst ? kFlagHdgst : 0), sizeof(CapsuleCmdHeader), 0,
               uint32_t(sizeof(CapsuleCmdHeader) + (hdgst ? 4 : 0))};
    if (hdgst) {
      uint32_t c = crc32c(buf, sizeof(CapsuleCmdHeader));
      std::memcpy(buf + sizeof(CapsuleCmdHeader), &c, 4);
    }
    benchmark::DoNotOptimize(buf);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(int64_t(state.iterations()));
}
BENCHMARK(BM_BuildCapsuleCmd)->Arg(0)->Arg(1);

BENCHMARK_MAIN();
