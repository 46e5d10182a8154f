// SPDX-License-Identifier: Apache-2.0
// libFuzzer: arbitrary byte streams, split into arbitrary chunks, into the PDU receive state
// machine on both sides, with every digest setting. The handler behaves like the real ones
// (bounded destinations, rejects some PDUs), so every path of the machine is reachable.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "transport/pdu_receiver.hpp"

using namespace nvtcp;

namespace {
struct Handler : transport::PduHandler {
  std::vector<uint8_t> dst = std::vector<uint8_t>(64 * 1024);
  transport::PduReceiver* rx = nullptr;
  uint32_t headers = 0;
  bool on_pdu_header(const uint8_t* hdr, uint32_t data_len, uint8_t*& d) override {
    ++headers;
    if (data_len > dst.size()) {
      rx->fail(wire::Fes::DataLimitExceeded, 0, "too long");
      return false;
    }
    if (hdr[1] & 0x80) return false;  // some PDUs rejected by the "upper layer"
    d = (hdr[2] & 1) ? nullptr : dst.data();
    return true;
  }
  void on_pdu_complete(const uint8_t* hdr, bool) override {
    if (hdr[0] == uint8_t(wire::PduType::ICReq) || hdr[0] == uint8_t(wire::PduType::ICResp))
      rx->set_digests(hdr[11] & 1, hdr[11] & 2);
  }
  void on_pdu_error(wire::Fes, uint32_t, const std::string&) override {}
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  uint8_t ctl = data[0];
  uint8_t step = uint8_t(data[1] | 1);
  data += 2;
  size -= 2;
  Handler h;
  transport::PduReceiver rx(ctl & 1 ? transport::Side::Host : transport::Side::Target, &h);
  h.rx = &rx;
  rx.set_digests(ctl & 2, ctl & 4);
  rx.set_max_plen(70000);
  size_t off = 0;
  while (off < size && !rx.failed()) {
    size_t n = std::min<size_t>(size - off, step);
    uint8_t* p;
    size_t window;
    if ((ctl & 8) && rx.in_place_window(1, p, window)) {
      // Exercise the in-place receive path too.
      size_t m = std::min(window, n);
      std::memcpy(p, data + off, m);
      rx.consumed_in_place(m);
      off += m;
      continue;
    }
    rx.feed(data + off, n);
    off += n;
  }
  return 0;
}
