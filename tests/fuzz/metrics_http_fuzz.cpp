// SPDX-License-Identifier: Apache-2.0
// libFuzzer: what a client of the metrics endpoint (--metrics-listen) controls. The input is the
// byte stream a scraper sends, cut into reads of a size its first byte picks, fed to one HTTP
// session as the server's socket would. Whatever arrives, what the session wrote is a run of
// whole HTTP/1.1 responses, each with its Content-Length and that many body bytes (none for a
// HEAD's 200), one 200 per scrape counted; an error answer is the last one, as it closes; and
// nothing more is read after the session said to close.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "control/metrics_server.hpp"

using namespace nvtcp;

namespace {

constexpr std::string_view kExposition = "# HELP nvtcp_fuzz_total x\n# TYPE nvtcp_fuzz_total counter\nnvtcp_fuzz_total 1\n";

// Walks out response by response; aborts on anything that is not one. Returns the 200s seen.
uint64_t check_responses(std::string_view out, bool closed) {
  uint64_t ok = 0;
  while (!out.empty()) {
    if (out.substr(0, 9) != "HTTP/1.1 ") std::abort();
    const size_t head_end = out.find("\r\n\r\n");
    if (head_end == std::string_view::npos) std::abort();
    const std::string_view head = out.substr(0, head_end + 2);
    const int code = std::atoi(std::string(out.substr(9, 3)).c_str());
    const size_t cl = head.find("\r\nContent-Length: ");
    if (cl == std::string_view::npos) std::abort();
    const size_t length = std::strtoul(std::string(head.substr(cl + 18)).c_str(), nullptr, 10);
    out.remove_prefix(head_end + 4);
    if (code == 200) {
      ++ok;
      if (length != kExposition.size()) std::abort();
      // A GET's body is the exposition; a HEAD's answer has none (the next response, or the end).
      if (out.substr(0, kExposition.size()) == kExposition) out.remove_prefix(kExposition.size());
      else if (!out.empty() && out.substr(0, 9) != "HTTP/1.1 ") std::abort();
      continue;
    }
    if (code < 400 || code > 499 || out.size() < length) std::abort();
    out.remove_prefix(length);
    if (!out.empty() || !closed) std::abort();  // an error answer ends the conversation
  }
  return ok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t chunk = size_t(data[0] % 128) + 1;
  const control::RenderMetrics render = [] { return std::string(kExposition); };
  std::atomic<uint64_t> scrapes{0};
  control::MetricsHttpSession session(render, 1024, &scrapes);  // small, so limits are reached
  std::string out;
  bool open = true;
  for (size_t off = 1; off < size && open; off += chunk)
    open = session.on_bytes(reinterpret_cast<const char*>(data) + off, std::min(chunk, size - off), out);
  if (check_responses(out, !open) != scrapes.load()) std::abort();
  return 0;
}
