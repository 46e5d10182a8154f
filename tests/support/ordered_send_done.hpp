// SPDX-License-Identifier: Apache-2.0
// A reactor::SendDone that records its id in *order when the stream calls it, so a test sees
// which sends completed and in what order (a stream must complete them in the order given).
#pragma once
#include <vector>

#include "reactor/byte_stream.hpp"

namespace nvtcp::test {

struct OrderedSendDone : reactor::SendDone {
  std::vector<int>* order = nullptr;
  int id = 0;
  OrderedSendDone() {
    fn = [](reactor::SendDone* d) {
      auto* self = static_cast<OrderedSendDone*>(d);
      self->order->push_back(self->id);
    };
  }
};

}  // namespace nvtcp::test
