// SPDX-License-Identifier: Apache-2.0
// A host queue pair's two state machines: where the queue is in its connection's life
// (QueueState, changed by QueuePairImpl::set_state) and what the kernel still holds of that
// connection (SocketState, changed by QueueConnection::set_socket). Both are checked at every
// change and logged.
#pragma once
#include <cstdint>

namespace nvtcp::host::detail {

// Where a queue is in its connection's life. Idle -> TcpConnecting -> AwaitICResp -> AwaitConnect
// -> Ready. AwaitConnect covers the Connect and, when its answer asks for it (ATR), the
// DH-HMAC-CHAP transaction that follows on the same queue. A lost connection goes to Disconnected when it can be re-established (its commands
// held), and from there through the connecting states again; otherwise to Failing, while the
// stream's close finishes (a receive in flight may still write into a command's buffer, so the
// commands end only then), and Failed. Failing and Failed are final.
enum class QueueState : uint8_t {
  Idle,
  TcpConnecting,
  AwaitICResp,
  AwaitConnect,
  Ready,
  Disconnected,
  Failing,
  Failed,
  kCount
};
const char* queue_state_name(QueueState s);
bool queue_transition_allowed(QueueState from, QueueState to);
// Queue pairs (admin and I/O, of every controller in the process) now in state s: what a
// debugger or a test looks at to see how many queues are reconnecting or lost.
uint32_t queue_pairs_in_state(QueueState s);

// What the kernel still holds of the queue's connection. A separate machine from QueueState
// because an operation started in one queue state finishes in whatever state the queue is in by
// then: a connect abandoned by a timed-out reconnect attempt or by shutdown() still owns the
// socket and its SQE until its completion comes, and a stream closed on a loss delivers
// on_closed() while the queue is already Disconnected or connecting again. Nothing new may
// start on the socket until it is back to None.
enum class SocketState : uint8_t {
  None,        // no socket
  Connecting,  // the ring's connect owns the socket
  Open,        // the stream carries the connection
  Lingering,   // our TermReq is queued; open until the peer closes or the linger passes (nothing is received)
  Closing,     // the stream's close() called; on_closed() still to come
  Closed,      // on_closed() came; the stream is released at the next tick
  kCount
};
const char* socket_state_name(SocketState s);

}  // namespace nvtcp::host::detail
