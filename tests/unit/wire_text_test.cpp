// SPDX-License-Identifier: Apache-2.0
// What the CLI prints and the host logs of text a target sent (nvtcp/wire_text.hpp): printable ASCII as it is, every
// other byte escaped, so no escape sequence reaches the terminal and no newline forges a line.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "nvtcp/wire_text.hpp"

namespace nvtcp::wire_text_test {
namespace {

TEST(WireText, PrintableAsciiIsKept) {
  EXPECT_EQ(escape_wire_text("nvtcp model 1.0 (x) ~!@#$%^&*"), "nvtcp model 1.0 (x) ~!@#$%^&*");
  EXPECT_EQ(escape_wire_text(""), "");
}

TEST(WireText, ControlAndNonAsciiBytesAreEscaped) {
  // A colour change, an OSC window title, and an 8-bit CSI.
  EXPECT_EQ(escape_wire_text("\x1b[31mred"), "\\x1b[31mred");
  EXPECT_EQ(escape_wire_text("\x1b]0;owned\x07"), "\\x1b]0;owned\\x07");
  EXPECT_EQ(escape_wire_text("\x9b" "2J"), "\\x9b2J");
  EXPECT_EQ(escape_wire_text("4420\nsubnqn:  nqn.evil"), "4420\\x0asubnqn:  nqn.evil");
  EXPECT_EQ(escape_wire_text(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(escape_wire_text("\r\t\x7f\xff"), "\\x0d\\x09\\x7f\\xff");
}

TEST(WireText, BackslashIsEscapedSoTheOutputIsUnambiguous) {
  // A target sending the four characters \x1b must not look like one that sent ESC.
  EXPECT_EQ(escape_wire_text("\\x1b"), "\\\\x1b");
  EXPECT_NE(escape_wire_text("\\x1b"), escape_wire_text("\x1b"));
}

TEST(WireText, OutputIsPrintableAsciiWhateverTheInput) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += char(b);
  const std::string out = escape_wire_text(all);
  for (char c : out) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << int(static_cast<unsigned char>(c));
}

TEST(WireText, FixedFieldsEndAtNulAndLoseTheirPadding) {
  char mn[40];
  std::memset(mn, ' ', sizeof mn);
  std::memcpy(mn, "\x1b[2Jmodel", 9);
  EXPECT_EQ(wire_field(mn, sizeof mn), "\\x1b[2Jmodel");
  char nqn[16] = "nqn.a\nb";
  EXPECT_EQ(wire_field(nqn, sizeof nqn), "nqn.a\\x0ab");
  char full[4] = {'a', 'b', 'c', 'd'};  // no NUL: the field's length bounds it
  EXPECT_EQ(wire_field(full, sizeof full), "abcd");
}

}  // namespace
}  // namespace nvtcp::wire_text_test
