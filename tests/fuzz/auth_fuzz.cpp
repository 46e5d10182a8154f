// SPDX-License-Identifier: Apache-2.0
// libFuzzer: what an unauthenticated peer controls in in-band authentication. The input's first
// byte picks the subject: the controller's DH-HMAC-CHAP machine fed Authentication Send messages
// and asked for Receives, the host's machine fed controller messages, or the key parsers (the
// text of a DHHC-1 secret, a TLS PSK). After the first byte come records: op (1 byte), length (1
// byte, times 4 for up to 1020 bytes), and that many bytes. Whatever arrives, each machine ends
// in a legal state (the transition checks abort otherwise) and never writes past a buffer.
#include <cstdint>
#include <string_view>
#include <vector>

#include "auth/dhchap_transaction.hpp"
#include "auth/keys.hpp"

using namespace nvtcp::auth;

namespace {

DhchapSecret fixed_secret(uint8_t fill) {
  DhchapSecret s;
  s.transform = 1;
  s.key = SecretBytes(32);
  for (size_t i = 0; i < 32; ++i) s.key.data()[i] = uint8_t(fill + i);
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const DhchapSecret host_secret = fixed_secret(0x11), ctrl_secret = fixed_secret(0x55);
  const uint8_t subject = data[0] % 3;
  data++, size--;
  if (subject == 2) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    DhchapSecret s;
    ConfiguredPsk p;
    std::string err;
    if (parse_dhchap_secret(text, s, err)) {
      // What parses is written back the same way.
      DhchapSecret again;
      if (!parse_dhchap_secret(format_dhchap_secret(s.transform, s.key.span()).view(), again, err) ||
          !(again.key == s.key))
        __builtin_trap();
    }
    parse_tls_psk(text, p, err);
    return 0;
  }
  // Groups: NULL first (cheap), ffdhe2048 when a peer offers only that.
  DhchapPolicy policy;
  policy.dh_groups = {0, 1};
  DhchapKeys keys{&host_secret, &ctrl_secret, "nqn.2014-08.org.nvmexpress:uuid:fuzz-host", "nqn.2026-11.io.nvtcp:fuzz"};
  DhchapController ctrl(keys, policy);
  DhchapHost host(keys, policy, 1);
  std::vector<uint8_t> out;
  for (int records = 0; size >= 2 && records < 16; ++records) {
    const uint8_t op = data[0];
    const size_t len = std::min<size_t>(size_t(data[1]) * 4 + (op >> 6), size - 2);
    const std::vector<uint8_t> msg(data + 2, data + 2 + len);
    data += 2 + len, size -= 2 + len;
    if (subject == 0) {
      if (op & 1) {
        out.assign(len, 0);
        const size_t n = ctrl.on_receive(out);
        if (n > nvtcp::wire::kAuthMaxMessage) __builtin_trap();
      } else {
        ctrl.on_send(msg);
      }
    } else {
      std::vector<uint8_t> m = host.next_message();
      if (m.size() > nvtcp::wire::kAuthMaxMessage) __builtin_trap();
      host.on_receive(msg);
    }
  }
  return 0;
}
