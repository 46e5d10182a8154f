// SPDX-License-Identifier: Apache-2.0
#include "wire/digest.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace digest_test {

using nvtcp::wire::Crc32c;
using nvtcp::wire::crc32c;

TEST(Crc32c, CheckValue) {
  // The standard CRC-32C check value (RFC 3720 appendix B.4 family).
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
}

TEST(Crc32c, Rfc3720Vectors) {
  std::vector<uint8_t> zeros(32, 0x00), ones(32, 0xFF), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) {
    inc[i] = static_cast<uint8_t>(i);
    dec[i] = static_cast<uint8_t>(31 - i);
  }
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(crc32c(inc.data(), inc.size()), 0x46DD794Eu);
  EXPECT_EQ(crc32c(dec.data(), dec.size()), 0x113FDB5Cu);
}

TEST(Crc32c, StreamingEqualsOneShot) {
  std::string s(10000, 'x');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(i * 7 + 3);
  Crc32c c;
  size_t off = 0;
  for (size_t step = 1; off < s.size(); step = step * 3 + 1) {
    size_t n = std::min(step, s.size() - off);
    c.update(s.data() + off, n);
    off += n;
  }
  EXPECT_EQ(c.value(), crc32c(s.data(), s.size()));
}

}  // namespace digest_test
