// One shape for every error inside src/host. Callers branch on kind (and err_no or status), never
// on message, which is for people only. The public API (include/nvtcp/host.hpp) keeps its shapes
// — std::string& err, nullptr, -errno — and the conversion happens where a call leaves src/host.
#pragma once
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
  };
  Kind kind = Kind::None;
  int err_no = 0;                          // Kind::System; Kind::Transport when the socket said why
  wire::Status status = wire::sc::Success;  // Kind::Status
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
  static HostError from_status(wire::Status s, std::string msg) {
    HostError e = make(Kind::Status, std::move(msg));
    e.status = s;
    return e;
  }
  // The same error with context in front of its message ("Identify Controller: ...").
  HostError context(const std::string& what) const {
    HostError e = *this;
    e.message = what + ": " + message;
    return e;
  }
};

}  // namespace nvtcp::host::detail
