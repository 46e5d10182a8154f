// SPDX-License-Identifier: Apache-2.0
// The public data-path options are the reactor's process-wide defaults under other names: the
// host library makes each thread's reactor itself, with those defaults.
#include "nvtcp/host.hpp"
#include "reactor/reactor.hpp"

namespace nvtcp::host {

void set_data_path_options(const DataPathOptions& o) {
  reactor::ReactorOptions ro = reactor::ReactorOptions::defaults();
  ro.sq_thread_cpu = o.sq_thread_cpu;
  ro.send_zc_threshold = o.zero_copy_send_threshold;
  ro.recv_multishot = o.recv_multishot;
  ro.spin_recv = o.spin_recv;
  reactor::ReactorOptions::set_defaults(ro);
}

DataPathOptions data_path_options() {
  reactor::ReactorOptions ro = reactor::ReactorOptions::defaults();
  DataPathOptions o;
  o.sq_thread_cpu = ro.sq_thread_cpu;
  o.zero_copy_send_threshold = ro.send_zc_threshold;
  o.recv_multishot = ro.recv_multishot;
  o.spin_recv = ro.spin_recv;
  return o;
}

}  // namespace nvtcp::host
