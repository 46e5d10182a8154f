// SPDX-License-Identifier: Apache-2.0
// One shape for every error inside src/host. Callers branch on kind (and err_no or status), never
// on message, which is for people only. The public API (include/nvtcp/host.hpp) keeps its shapes
// — std::string& err, nullptr, -errno — and the conversion happens where a call leaves src/host.
#pragma once
#include <cerrno>
#include <string>
#include <utility>

#include "nvtcp/status.hpp"

namespace nvtcp::host::detail {

struct HostError {
  enum class Kind : uint8_t {
    None,             // success
    System,           // a system call failed: err_no
    Address,          // the transport address does not resolve or is unusable
    Timeout,          // no answer in time: a connect, a command, the controller getting ready
    Transport,        // the connection broke: lost, closed, terminated, or a fatal transport error
    Status,           // the controller answered with an error status: status
    Controller,       // the controller misbehaved (CSTS.CFS, answers we cannot use)
    WrongController,  // another controller answered at this address: reconnecting is pointless
    Namespace,        // the namespace is not active, or has a format this host cannot use
    Busy,             // every command slot of the queue is taken: retry after completions (EBUSY)
    Invalid,          // the command cannot be carried as given: too long, or a buffer it may not use
  };
  Kind kind = Kind::None;
  int err_no = 0;                          // Kind::System; Kind::Transport when the socket said why
  nvme::Status status = nvme::sc::Success;  // Kind::Status
  std::string message;

  bool ok() const { return kind == Kind::None; }

  static HostError make(Kind k, std::string msg) {
    HostError e;
    e.kind = k;
    e.message = std::move(msg);
    return e;
  }
  static HostError system(int err_no, std::string msg) {
    HostError e = make(Kind::System, std::move(msg));
    e.err_no = err_no;
    return e;
  }
  static HostError from_status(nvme::Status s, std::string msg) {
    HostError e = make(Kind::Status, std::move(msg));
    e.status = s;
    return e;
  }
  // A command the data path refuses (submit): no message, so that a full queue, which is frequent,
  // allocates nothing; it leaves src/host as -errno (to_errno()).
  static HostError refused(Kind k, int err_no) {
    HostError e;
    e.kind = k;
    e.err_no = err_no;
    return e;
  }
  // The public -errno shape (QueuePair's int returns): 0 when ok, -EIO for an error without an errno.
  int to_errno() const { return ok() ? 0 : -(err_no ? err_no : EIO); }
  // The same error with context in front of its message ("Identify Controller: ...").
  HostError context(const std::string& what) const {
    HostError e = *this;
    e.message = what + ": " + message;
    return e;
  }
};

}  // namespace nvtcp::host::detail
