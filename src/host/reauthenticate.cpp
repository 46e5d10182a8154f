// SPDX-License-Identifier: Apache-2.0
#include "host/reauthenticate.hpp"

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "wire/auth.hpp"
#include "wire/fabrics.hpp"

namespace nvtcp::host::detail {

using namespace nvtcp::wire;

nvme::Sqe auth_transfer_sqe(bool send, uint32_t len) {
  AuthTransferCmd cmd{};
  cmd.opc = uint8_t(nvme::AdminOpcode::Fabrics);
  cmd.fctype = uint8_t(send ? FabricsType::AuthSend : FabricsType::AuthReceive);
  cmd.spsp0 = kAuthSpsp0;
  cmd.spsp1 = kAuthSpsp1;
  cmd.secp = kAuthSecp;
  cmd.length = len;
  nvme::Sqe sqe;
  std::memcpy(&sqe, &cmd, sizeof(cmd));
  return sqe;
}

int run_dhchap(const auth::DhchapKeys& keys, uint16_t transaction, const AuthExchange& exchange, std::string& err) {
  auth::DhchapHost host(keys, auth::DhchapPolicy{}, transaction);
  std::vector<uint8_t> buf;
  // Negotiate, Challenge, Reply, Success1 and (both ways) Success2: a handful of steps.
  for (int step = 0; step < 8 && !host.authenticated(); ++step) {
    std::vector<uint8_t> out = host.next_message();
    if (!out.empty()) {
      const nvme::Status st = exchange(true, out);
      if (!st.ok()) {
        err = fmt::format("Authentication Send: {}", nvme::status_name(st));
        return -EIO;
      }
    }
    if (host.failed()) break;  // a Failure2 has gone out
    if (!host.expects_receive()) continue;
    buf.assign(kAuthHostReceiveLength, 0);
    const nvme::Status st = exchange(false, buf);
    if (!st.ok()) {
      err = fmt::format("Authentication Receive: {}", nvme::status_name(st));
      return -EIO;
    }
    host.on_receive(buf);
  }
  if (host.authenticated()) return 0;
  err = host.failed() ? fmt::format("DH-HMAC-CHAP failed: {} ({})", host.failure_detail(),
                                    auth_failure_name(host.failure_reason()))
                      : "DH-HMAC-CHAP did not finish";
  return -EACCES;
}

}  // namespace nvtcp::host::detail
