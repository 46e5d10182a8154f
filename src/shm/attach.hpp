// SPDX-License-Identifier: Apache-2.0
// How an application attaches to the engine: over a UNIX socket (SOCK_SEQPACKET, one message
// each way) it asks for queue pairs, queue size, interrupt vectors and a data region; the
// engine checks who is asking (SO_PEERCRED: the engine's own user, or root), makes a memfd
// (sealed at its size) with the region laid out and its header written, and passes it back
// through SCM_RIGHTS with the write end of a pipe the application signals to wake the engine
// (the MMIO doorbell's analog) and the read end of one pipe per interrupt vector the engine
// signals to wake the application. Each side holds only its own ends. After
// that nothing per I/O goes through the socket; it stays open as the attachment's lifeline
// (the engine sees it close when the application dies, even by SIGKILL).
#pragma once
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shm/region.hpp"

namespace nvtcp::shm {

inline constexpr uint32_t kAttachMagic = 0x6e766174;  // "tavn"
inline constexpr uint32_t kMaxVectors = 32;            // interrupt vectors (signal pipes) per application
inline constexpr size_t kMaxRefusalReason = 256;       // the text that follows a refusal, NUL included

struct AttachRequest {
  uint32_t magic = kAttachMagic;
  uint32_t version = kRegionVersion;
  uint32_t queue_pairs = 0;    // admin included
  uint32_t queue_entries = 0;
  uint32_t vectors = 1;        // interrupt vectors (1..kMaxVectors)
  uint32_t rsvd = 0;
  uint64_t data_bytes = 0;
  char subnqn[224] = {};       // the remote subsystem wanted, NUL-terminated (the NVMe NQN limit is 223)
};
static_assert(sizeof(AttachRequest) == 256);

struct AttachReply {
  int32_t error = 0;  // 0, or an errno value saying why the attach was refused
  uint32_t vectors = 0;
  uint64_t total_bytes = 0;
};
static_assert(sizeof(AttachReply) == 16);

// One attached application as either side holds it: the region mapped, and the descriptors.
class Attachment {
 public:
  Attachment() = default;
  ~Attachment();
  Attachment(Attachment&& o) noexcept;
  Attachment& operator=(Attachment&& o) noexcept;
  Attachment(const Attachment&) = delete;
  Attachment& operator=(const Attachment&) = delete;

  // An attachment over memory the caller laid out (layout.write_header done), with no
  // descriptors: for tests and fuzzers that drive the engine's side without a socket. The
  // memory stays the caller's.
  static Attachment over(const RegionLayout& layout, uint8_t* region) {
    Attachment a;
    a.layout_ = layout;
    a.region_ = region;
    a.owns_region_ = false;
    return a;
  }

  const RegionLayout& layout() const { return layout_; }
  uint8_t* region() const { return region_; }
  uint8_t* data() const { return region_ + layout_.data_offset; }
  QueueMemory queue_pair(uint32_t i) const { return layout_.queue_pair(region_, i); }
  int socket() const { return sock_; }         // the lifeline
  // Application -> engine: the application's write end, the engine's read end.
  int kick_fd() const { return kick_; }
  // Engine -> application: the engine's write ends, the application's read ends.
  const std::vector<int>& vector_fds() const { return vectors_; }
  pid_t peer_pid() const { return peer_pid_; }
  int memfd_for_test() const { return memfd_; }  // the application's side only (the engine closes its own)
  const std::string& subnqn() const { return subnqn_; }
  ControllerRegisters& registers() const { return RegionLayout::registers(region_); }
  uid_t peer_uid() const { return peer_uid_; }

 private:
  friend class AttachServer;
  friend bool attach(const std::string&, const AttachRequest&, Attachment&, std::string&);
  void reset();

  RegionLayout layout_;
  uint8_t* region_ = nullptr;
  bool owns_region_ = true;
  int memfd_ = -1, sock_ = -1, kick_ = -1;
  std::vector<int> vectors_;
  pid_t peer_pid_ = 0;
  uid_t peer_uid_ = 0;
  std::string subnqn_;
};

// A signal through one of the attachment's pipes (a byte; a full pipe already holds one).
inline void signal_fd(int fd) {
  const char b = 1;
  (void)!::write(fd, &b, 1);
}
// A signal through an eventfd: its counter takes 8 bytes (a shorter write, as signal_fd's,
// fails with EINVAL and wakes nobody).
inline void signal_eventfd(int fd) {
  const uint64_t one = 1;
  (void)!::write(fd, &one, sizeof(one));
}
// Takes the pending signals of a pipe's (non-blocking) read end: at most a pipe's worth
// (64 KiB) a call, so a peer that keeps writing cannot hold the reader here; what is left
// keeps the (level-triggered) descriptor readable for the next turn.
inline void drain_fd(int fd) {
  char buf[4096];
  for (int i = 0; i < 16 && ::read(fd, buf, sizeof(buf)) == ssize_t(sizeof(buf)); ++i) {
  }
}

// A connection accepted whose attach request has not been read yet.
struct PendingAttach {
  PendingAttach() = default;
  ~PendingAttach();
  PendingAttach(const PendingAttach&) = delete;
  PendingAttach& operator=(const PendingAttach&) = delete;
  int fd = -1;  // non-blocking
  pid_t pid = 0;
  uid_t uid = 0;
};

// The engine's listening socket (mode 0600: only the engine's user connects at all).
class AttachServer {
 public:
  AttachServer() = default;
  ~AttachServer();
  AttachServer(const AttachServer&) = delete;
  AttachServer& operator=(const AttachServer&) = delete;

  bool listen(const std::string& path, std::string& err);
  // Interrupt vectors granted to an attachment at most (1..kMaxVectors): one asking for more
  // gets this many, as a PCIe function offers a number of MSI-X vectors and the host uses
  // what it gets (AttachReply::vectors says how many).
  void set_max_vectors(uint32_t n) { max_vectors_ = std::clamp<uint32_t>(n, 1, kMaxVectors); }
  int fd() const { return fd_; }
  // Takes one application's attach request from a connection ready to accept and answers it,
  // waiting up to 5 s for the request (blocking: for tools and tests).
  // check (if given) may refuse a well-formed request: it returns an errno value and says
  // why in its string. false (and err) when the request was refused or broken: that
  // connection is closed.
  using Check = std::function<int(const AttachRequest&, std::string&)>;
  bool accept_one(Attachment& out, std::string& err, const Check& check = nullptr);

  // The same in two steps that never block, for an event loop: accept a connection (its
  // credentials are read at once), then answer its request once the socket is readable.
  // accept_connection's false leaves errno as accept() set it.
  bool accept_connection(PendingAttach& out, std::string& err);
  enum class Answer { NotYet, Attached, Refused };
  // NotYet: no request has come (p stays pending). Attached: out holds the attachment.
  // Refused: err says why; the connection has been answered and closed.
  Answer answer(PendingAttach& p, Attachment& out, std::string& err, const Check& check = nullptr);

 private:
  int fd_ = -1;
  std::string path_;
  uint32_t max_vectors_ = kMaxVectors;
};

// The application's side: connects, asks, and maps what it gets (checking the header).
bool attach(const std::string& path, const AttachRequest& req, Attachment& out, std::string& err);

}  // namespace nvtcp::shm
