// SPDX-License-Identifier: Apache-2.0
// Re-authentication the host starts (NVMe Base Specification 2.0, 8.13.5: a host may run a new
// DH-HMAC-CHAP transaction on an authenticated queue at any time, as Linux does when its secret
// changes): one transaction carried by whatever runs the queue's Authentication commands.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "auth/dhchap_transaction.hpp"
#include "nvtcp/sqe.hpp"
#include "nvtcp/status.hpp"

namespace nvtcp::host::detail {

// An Authentication Send of len bytes, or Receive of len bytes, for DH-HMAC-CHAP.
nvme::Sqe auth_transfer_sqe(bool send, uint32_t len);

// Carries one Authentication command: send: buf holds the message; else buf (AL bytes) is
// filled. Returns the command's status; a transport failure is a status too (TransportError).
using AuthExchange = std::function<nvme::Status(bool send, std::vector<uint8_t>& buf)>;

// Runs one transaction as the host; 0, or -errno with err saying why (EACCES: the transaction
// failed; EIO: a command failed).
int run_dhchap(const auth::DhchapKeys& keys, uint16_t transaction, const AuthExchange& exchange, std::string& err);

}  // namespace nvtcp::host::detail
