// SPDX-License-Identifier: Apache-2.0
// The host queue pair's state machines: which transitions the tables allow, that a real
// failed connect walks them, and that the per-state counts follow.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "host/queue_pair_impl.hpp"
#include "reactor/reactor.hpp"

namespace host_queue_state_test {

namespace {

// The queue pair's internals are what this file tests: all of them, by their own names.
using namespace nvtcp::host::detail;
using QS = QueueState;

TEST(HostQueueState, ConnectPathAndRecoveryAreAllowed) {
  const QS path[] = {QS::Idle, QS::TcpConnecting, QS::AwaitICResp, QS::AwaitConnect, QS::Ready,
                     QS::Disconnected, QS::TcpConnecting, QS::AwaitICResp, QS::AwaitConnect, QS::Ready,
                     QS::Failing, QS::Failed};
  for (size_t i = 1; i < std::size(path); ++i)
    EXPECT_TRUE(queue_transition_allowed(path[i - 1], path[i]))
        << queue_state_name(path[i - 1]) << " -> " << queue_state_name(path[i]);
}

TEST(HostQueueState, ImpossibleMovesAreRefused) {
  // Failed is final; Ready is reached only through a Connect response; a lost connection is
  // never Ready again without connecting; no state is written twice in a row.
  for (size_t to = 0; to < size_t(QS::kCount); ++to) EXPECT_FALSE(queue_transition_allowed(QS::Failed, QS(to)));
  for (size_t to = 0; to < size_t(QS::kCount); ++to) {
    if (QS(to) != QS::Failed) {
      EXPECT_FALSE(queue_transition_allowed(QS::Failing, QS(to)));
    }
  }
  for (size_t from = 0; from < size_t(QS::kCount); ++from) {
    EXPECT_FALSE(queue_transition_allowed(QS(from), QS(from))) << queue_state_name(QS(from));
    if (QS(from) != QS::AwaitConnect) {
      EXPECT_FALSE(queue_transition_allowed(QS(from), QS::Ready));
    }
  }
  EXPECT_FALSE(queue_transition_allowed(QS::Disconnected, QS::AwaitICResp));
  EXPECT_FALSE(queue_transition_allowed(QS::Idle, QS::Disconnected));  // nothing to recover before Ready
  EXPECT_FALSE(queue_transition_allowed(QS::Ready, QS::TcpConnecting));
  EXPECT_FALSE(queue_transition_allowed(QS::TcpConnecting, QS::Failing));  // no stream to wait for yet
}

TEST(HostQueueState, CommandSlotTable) {
  using S = HostRequest::State;
  const auto& t = HostRequest::kTransitions;
  EXPECT_TRUE(t.allows(S::Free, S::OnWire));
  EXPECT_TRUE(t.allows(S::OnWire, S::Held));
  EXPECT_TRUE(t.allows(S::Held, S::OnWire));
  EXPECT_TRUE(t.allows(S::Held, S::Free));
  EXPECT_FALSE(t.allows(S::Free, S::Free));      // completed twice
  EXPECT_FALSE(t.allows(S::OnWire, S::OnWire));  // sent twice on one connection
  EXPECT_FALSE(t.allows(S::Held, S::Held));
}

TEST(HostQueueStateDeathTest, IllegalCommandSlotTransitionAborts) {
  if (!nvtcp::kCheckTransitions) GTEST_SKIP() << "transition checks are off in this build";
  HostRequest r;
  EXPECT_DEATH(r.set_state(HostRequest::State::Free), "illegal command slot transition Free -> Free");
}

// A port with nothing listening: bound, never listened on, so a connect is refused.
uint16_t refused_port(int& fd) {
  fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return 0;
  return ntohs(a.sin_port);
}

TEST(HostQueueState, RefusedConnectEndsFailedAndCountsFollow) {
  int holder = -1;
  const uint16_t port = refused_port(holder);
  ASSERT_NE(port, 0);
  nvtcp::reactor::Reactor r(64);
  QueueParams p;
  p.trid.traddr = "127.0.0.1";
  p.trid.trsvcid = port;
  p.trid.subnqn = "nqn.2026-11.io.nvtcp:state-test";
  p.qid = 1;
  p.depth = 4;
  p.timeout_ms = 2000;
  const uint32_t idle_before = queue_pairs_in_state(QS::Idle);
  const uint32_t failed_before = queue_pairs_in_state(QS::Failed);
  {
    QueuePairImpl qp(r, p);
    EXPECT_EQ(qp.state(), QS::Idle);
    EXPECT_EQ(queue_pairs_in_state(QS::Idle), idle_before + 1);
    nvtcp::host::detail::HostError err;
    EXPECT_FALSE(qp.connect(err));
    EXPECT_EQ(err.kind, nvtcp::host::detail::HostError::Kind::System) << err.message;
    EXPECT_EQ(err.err_no, ECONNREFUSED) << err.message;
    EXPECT_NE(err.message.find("connect to"), std::string::npos) << err.message;
    // No link: a refused first connect is final, with nothing left to wait for.
    EXPECT_EQ(qp.state(), QS::Failed);
    EXPECT_TRUE(qp.failed());
    EXPECT_EQ(queue_pairs_in_state(QS::Idle), idle_before);
    EXPECT_EQ(queue_pairs_in_state(QS::Failed), failed_before + 1);
    int dummy = 0;
    const nvtcp::host::detail::HostError refused = qp.submit(nvtcp::nvme::Sqe{}, &dummy, 0, false, nullptr, nullptr);
    EXPECT_EQ(refused.kind, nvtcp::host::detail::HostError::Kind::Transport);
    EXPECT_EQ(refused.to_errno(), -ENOTCONN);
  }
  EXPECT_EQ(queue_pairs_in_state(QS::Failed), failed_before);
  ::close(holder);
}

}  // namespace

}  // namespace host_queue_state_test
