// SPDX-License-Identifier: Apache-2.0
// The smallest nvtcp host program: connect to an NVMe/TCP controller, write a few blocks,
// read them back and compare. Built against an installed nvtcp, with CMake (find_package) or
// with pkg-config; see examples/README.md.
//
//   write_read 'trtype:tcp traddr:127.0.0.1 trsvcid:4420 subnqn:nqn.2026-11.io.nvtcp:demo ns:1'
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include <nvtcp/host.hpp>
#include <nvtcp/log.hpp>

namespace {
// Completion callbacks run inside process_completions(); they record the outcome here.
struct Done {
  bool finished = false;
  nvtcp::nvme::Status status;
};
void on_done(void* ctx, const nvtcp::host::Completion& cpl) {
  auto* d = static_cast<Done*>(ctx);
  d->finished = true;
  d->status = cpl.status;
}
bool wait(nvtcp::host::QueuePair& qp, Done& d, const char* what) {
  while (!d.finished) qp.process_completions(1000);
  if (d.status.ok()) return true;
  std::fprintf(stderr, "%s failed: %s\n", what, nvtcp::nvme::status_name(d.status).c_str());
  return false;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s 'trtype:tcp traddr:ADDR trsvcid:PORT subnqn:NQN [ns:NSID]'\n", argv[0]);
    return 2;
  }
  // The library's log lines, through the application's own logging.
  nvtcp::set_log_sink([](nvtcp::LogLevel, std::string_view line) {
    std::fprintf(stderr, "[nvtcp] %.*s\n", int(line.size()), line.data());
  });

  std::string err;
  nvtcp::host::TransportId trid;
  if (!nvtcp::host::TransportId::parse(argv[1], trid, err)) {
    std::fprintf(stderr, "bad transport ID: %s\n", err.c_str());
    return 2;
  }
  auto ctrl = nvtcp::host::Controller::connect(trid, nvtcp::host::ControllerOptions{}, err);
  if (!ctrl) {
    std::fprintf(stderr, "connect: %s\n", err.c_str());
    return 1;
  }
  const auto& id = ctrl->identify_controller();
  std::printf("connected: %.*s, model %.*s, controller %u\n", int(sizeof(id.sn)), id.sn, int(sizeof(id.mn)), id.mn,
              ctrl->cntlid());

  nvtcp::host::NamespaceInfo ns;
  if (!ctrl->namespace_info(trid.nsid, ns, err)) {
    std::fprintf(stderr, "namespace %u: %s\n", trid.nsid, err.c_str());
    return 1;
  }
  auto qp = ctrl->create_io_qpair(32, err);
  if (!qp) {
    std::fprintf(stderr, "queue pair: %s\n", err.c_str());
    return 1;
  }

  const uint32_t blocks = 8;
  const uint32_t len = blocks * ns.block_size;
  auto* out = static_cast<unsigned char*>(ctrl->alloc_io_buffer(len));
  auto* in = static_cast<unsigned char*>(ctrl->alloc_io_buffer(len));
  for (uint32_t i = 0; i < len; i++) out[i] = static_cast<unsigned char>(i * 7 + 1);
  std::memset(in, 0, len);

  Done w, r;
  bool ok = qp->write(trid.nsid, 0, blocks, out, on_done, &w) == 0 && wait(*qp, w, "write") &&
            qp->read(trid.nsid, 0, blocks, in, on_done, &r) == 0 && wait(*qp, r, "read");
  if (ok && std::memcmp(in, out, len) != 0) {
    std::fprintf(stderr, "read back differs from what was written\n");
    ok = false;
  }
  if (ok) std::printf("wrote and read back %u bytes at LBA 0 of namespace %u: identical\n", len, trid.nsid);
  qp.reset();
  ctrl->free_io_buffer(out);
  ctrl->free_io_buffer(in);
  return ok ? 0 : 1;
}
