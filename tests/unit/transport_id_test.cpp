// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "nvtcp/host.hpp"

namespace transport_id_test {

using nvtcp::host::TransportId;

TEST(TransportId, SpdkForm) {
  TransportId t;
  std::string err;
  ASSERT_TRUE(TransportId::parse(
      "trtype:tcp adrfam:IPv4 traddr:127.0.0.1 trsvcid:4421 subnqn:nqn.2014-08.org.nvmexpress:uuid:abc "
      "hostnqn:nqn.h ns:3 hdgst ddgst",
      t, err))
      << err;
  EXPECT_EQ(t.traddr, "127.0.0.1");
  EXPECT_EQ(t.trsvcid, 4421);
  EXPECT_EQ(t.subnqn, "nqn.2014-08.org.nvmexpress:uuid:abc");  // ':' inside a value survives
  EXPECT_EQ(t.hostnqn, "nqn.h");
  EXPECT_EQ(t.nsid, 3u);
  EXPECT_TRUE(t.hdgst);
  EXPECT_TRUE(t.ddgst);
}

TEST(TransportId, EqualsFormAndIpv6) {
  TransportId t;
  std::string err;
  ASSERT_TRUE(TransportId::parse("trtype=tcp adrfam=IPv6 traddr=::1 trsvcid=4420 subnqn=nqn.x ddgst=0", t, err)) << err;
  EXPECT_EQ(t.traddr, "::1");
  EXPECT_EQ(t.adrfam, "IPv6");
  EXPECT_FALSE(t.ddgst);
}

TEST(TransportId, Errors) {
  TransportId t;
  std::string err;
  EXPECT_FALSE(TransportId::parse("trtype:rdma traddr:1.2.3.4", t, err));
  EXPECT_NE(err.find("rdma"), std::string::npos);
  EXPECT_FALSE(TransportId::parse("traddr:1.2.3.4 trsvcid:99999", t, err));
  EXPECT_FALSE(TransportId::parse("trsvcid:4420", t, err));  // no address
  EXPECT_FALSE(TransportId::parse("traddr:1.2.3.4 bogus:1", t, err));
  EXPECT_NE(err.find("bogus"), std::string::npos);
}

}  // namespace transport_id_test
