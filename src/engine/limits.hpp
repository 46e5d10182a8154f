// SPDX-License-Identifier: Apache-2.0
// What the engine grants applications, so that no local application, careless or hostile,
// can take the engine (and with it every other application) down: attachments, mapped
// memory, descriptors and admin work are all bounded, each by a limit with a default that
// the CLI (`--flag`) and the JSON configuration (`key`) may change within a checked range.
//
// One table (limit_options()) names every limit once: the CLI, the JSON loader and the
// start-up range check all read it, so a limit cannot be settable in one place and not in
// another.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace nvtcp::engine {

struct EngineLimits {
  // Attachments alive at once (those still draining included), and per peer uid
  // (SO_PEERCRED): each holds a mapped region and 2 + vectors descriptors in the engine.
  // fio through the engine attaches once per job (the study runs 32 jobs), so the defaults
  // leave room for a few such runs side by side.
  uint64_t max_applications = 256;
  uint64_t max_applications_per_user = 128;
  // Bytes of one attachment's region (header, queues and data), and of all regions mapped
  // at once: the engine maps each, so they share its address space.
  uint64_t max_region_bytes = 4ull << 30;
  uint64_t max_mapped_bytes = 256ull << 30;
  // Interrupt vectors (one pipe each) granted to an attachment: one asking for more gets
  // this many (its 2 + vectors descriptors are what it holds of the engine's).
  uint64_t max_vectors = 32;
  // Connections accepted whose attach request has not come yet (each gets 5 s).
  uint64_t max_pending_attaches = 64;
  // Admin commands of one application out at the remote controller (or waiting for the
  // admin worker) at once; beyond it the admin SQ is not fetched until one completes.
  uint64_t max_admin_in_flight = 8;
  // Bytes of admin data buffers (Get Log Page, Identify, Get Features), for all
  // applications and for one; a command waits in its SQ until its buffer fits.
  uint64_t max_admin_buffer_bytes = 16ull << 20;
  uint64_t max_app_admin_buffer_bytes = 2ull << 20;
};

// One limit as the CLI and the JSON configuration show it.
struct LimitOption {
  const char* flag;  // "--max-applications"
  const char* key;   // "max_applications"
  uint64_t EngineLimits::*field;
  uint64_t min, max;
  const char* help;
};

inline const std::vector<LimitOption>& limit_options() {
  static const std::vector<LimitOption> table{
      {"--max-applications", "max_applications", &EngineLimits::max_applications, 1, 4096,
       "applications attached at once (default 256)"},
      {"--max-applications-per-user", "max_applications_per_user", &EngineLimits::max_applications_per_user, 1,
       4096, "applications attached at once per peer uid (default 128)"},
      {"--max-region-bytes", "max_region_bytes", &EngineLimits::max_region_bytes, 1ull << 20, 1ull << 40,
       "bytes of one application's shared region, queues and data (default 4 GiB)"},
      {"--max-mapped-bytes", "max_mapped_bytes", &EngineLimits::max_mapped_bytes, 1ull << 20, 1ull << 46,
       "bytes of all applications' regions mapped at once (default 256 GiB)"},
      {"--max-vectors", "max_vectors", &EngineLimits::max_vectors, 1, 32,
       "interrupt vectors (pipes) granted per application (default 32)"},
      {"--max-pending-attaches", "max_pending_attaches", &EngineLimits::max_pending_attaches, 1, 1024,
       "connections waiting to send their attach request (default 64)"},
      {"--max-admin-in-flight", "max_admin_in_flight", &EngineLimits::max_admin_in_flight, 1, 1024,
       "admin commands per application at the remote controller at once (default 8)"},
      {"--max-admin-buffer-bytes", "max_admin_buffer_bytes", &EngineLimits::max_admin_buffer_bytes, 1ull << 20,
       1ull << 32, "bytes of admin data buffers of all applications (default 16 MiB)"},
      {"--max-app-admin-buffer-bytes", "max_app_admin_buffer_bytes", &EngineLimits::max_app_admin_buffer_bytes,
       4096, 1ull << 32, "bytes of admin data buffers per application (default 2 MiB)"},
  };
  return table;
}

// Every limit within its range, and the ones that bound others consistent; else why not.
inline bool check_limits(const EngineLimits& l, std::string& err) {
  for (const LimitOption& o : limit_options()) {
    const uint64_t v = l.*o.field;
    if (v < o.min || v > o.max) {
      err = std::string(o.key) + " " + std::to_string(v) + " is out of range (" + std::to_string(o.min) + ".." +
            std::to_string(o.max) + ")";
      return false;
    }
  }
  if (l.max_applications_per_user > l.max_applications) {
    err = "max_applications_per_user is above max_applications";
    return false;
  }
  if (l.max_region_bytes > l.max_mapped_bytes) {
    err = "max_region_bytes is above max_mapped_bytes";
    return false;
  }
  if (l.max_app_admin_buffer_bytes > l.max_admin_buffer_bytes) {
    err = "max_app_admin_buffer_bytes is above max_admin_buffer_bytes";
    return false;
  }
  return true;
}

}  // namespace nvtcp::engine
