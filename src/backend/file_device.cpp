// SPDX-License-Identifier: Apache-2.0
// A namespace backed by a regular file or a block device, driven through the calling
// reactor's io_uring so a slow disk never blocks the loop.
//
// Durability: the page cache (buffered files), the file system's own metadata (extents a
// write allocated in a sparse file) and the disk's cache all sit between a completed
// write and stable storage, O_DIRECT or not. So the namespace reports a volatile write
// cache: Flush is an fdatasync, a FUA write goes out with RWF_DSYNC (data and the metadata
// needed to read it back are on stable storage when it completes), and with the cache
// turned off (feature 06h) every write does, and Write Zeroes and Deallocate are followed
// by an fdatasync. A file on tmpfs or ramfs has no storage behind it: nothing outlives the
// machine, so there is no cache to report and nothing to sync.
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "backend/block_device.hpp"
#include "util/log.hpp"

namespace nvtcp::backend {

namespace {
const char* op_name(BlockIo::Op op) {
  switch (op) {
    case BlockIo::Op::Read: return "read";
    case BlockIo::Op::Write: return "write";
    case BlockIo::Op::Flush: return "flush";
    case BlockIo::Op::WriteZeroes: return "write zeroes";
    case BlockIo::Op::Deallocate: return "deallocate";
    case BlockIo::Op::CompareAndWrite: return "compare and write";
  }
  return "?";
}

class FileDevice final : public BlockDevice {
 public:
  // follows_backing: no size was configured, so the namespace is the whole file (or block
  // device) and follows it when it is resized.
  FileDevice(int fd, std::string path, uint64_t size, uint32_t bs, Persistence p, bool follows_backing)
      : fd_(fd), path_(std::move(path)), size_(size), bs_(bs), persistence_(p), follows_backing_(follows_backing) {}
  ~FileDevice() override { close(fd_); }
  uint64_t size_bytes() const override { return size_.load(std::memory_order_relaxed); }
  uint64_t revalidate_size() override {
    if (!follows_backing_) return size_bytes();
    struct stat st{};
    uint64_t have = 0;
    if (fstat(fd_, &st) != 0) return size_bytes();
    if (S_ISBLK(st.st_mode)) {
      if (ioctl(fd_, BLKGETSIZE64, &have) != 0) return size_bytes();
    } else {
      have = uint64_t(st.st_size);
    }
    have -= have % bs_;
    if (have != 0) size_.store(have, std::memory_order_relaxed);  // an emptied file keeps its namespace
    return size_bytes();
  }
  uint32_t block_size() const override { return bs_; }
  const char* kind() const override { return "file"; }
  Persistence persistence() const override { return persistence_; }
  bool volatile_write_cache() const override { return persistence_ == Persistence::Media; }
  bool write_cache_enabled() const override {
    return volatile_write_cache() && cache_enabled_.load(std::memory_order_relaxed);
  }
  void set_write_cache_enabled(bool on) override { cache_enabled_.store(on, std::memory_order_relaxed); }
  void set_sync_observer(SyncObserver* o) override { observer_.store(o, std::memory_order_release); }

  void submit(BlockIo* io, reactor::Reactor& r) override {
    if (io->op == BlockIo::Op::CompareAndWrite) {  // not atomic_compare_and_write(): never sent here
      io->done(io, nvme::sc::InternalError);
      return;
    }
    io->device = this;
    io->reactor = &r;
    io->progress = 0;
    // A write through the cache needs no sync at all where nothing can be synced.
    io->write_through = volatile_write_cache() && io->op != BlockIo::Op::Read &&
                        (io->fua || !cache_enabled_.load(std::memory_order_relaxed));
    io->syncing = io->op == BlockIo::Op::Flush && volatile_write_cache();
    if (io->op == BlockIo::Op::Flush && !io->syncing) {
      io->done(io, nvme::sc::Success);  // nothing to flush on tmpfs
      return;
    }
    io->completion.owner = io;
    io->completion.fn = [](reactor::Completion* c, int res, uint32_t) {
      auto* bio = static_cast<reactor::OwnedCompletion<BlockIo>*>(c)->owner;
      static_cast<FileDevice*>(bio->device)->finish(bio, res);
    };
    issue(io);
  }

 private:
  void issue(BlockIo* io) {
    io_uring_sqe* sqe = io->reactor->get_sqe();
    uint64_t off = io->offset + io->progress;
    uint64_t len = io->length - io->progress;
    if (io->syncing) {
      io_uring_prep_fsync(sqe, fd_, IORING_FSYNC_DATASYNC);
      io->reactor->prep(sqe, &io->completion);
      return;
    }
    switch (io->op) {
      case BlockIo::Op::Read:
        io_uring_prep_read(sqe, fd_, io->buffer + io->progress, unsigned(len), off);
        break;
      case BlockIo::Op::Write:
        io_uring_prep_write(sqe, fd_, io->buffer + io->progress, unsigned(len), off);
        // Each piece of a write that must be durable is written through: O_DSYNC
        // semantics for this one write, as pwritev2(RWF_DSYNC) gives them.
        if (io->write_through) sqe->rw_flags = RWF_DSYNC;
        break;
      case BlockIo::Op::Flush: break;            // always syncing (see submit)
      case BlockIo::Op::CompareAndWrite: break;  // refused in submit
      case BlockIo::Op::WriteZeroes:
        io_uring_prep_fallocate(sqe, fd_, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, off, len);
        break;
      case BlockIo::Op::Deallocate:
        io_uring_prep_fallocate(sqe, fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len);
        break;
    }
    io->reactor->prep(sqe, &io->completion);
  }

  void finish(BlockIo* io, int res) {
    if (res < 0) {
      log::warn("file namespace {}: {} of {} bytes at {}{} failed: {}", path_, op_name(io->op), io->length,
                io->offset, io->syncing ? " (sync)" : "", strerror(-res));
      io->read_data = nullptr;
      io->done(io, io->op == BlockIo::Op::Read ? nvme::sc::UnrecoveredReadError : nvme::sc::WriteFault);
      return;
    }
    if (io->syncing) {
      synced(io);
      return;
    }
    if (io->op == BlockIo::Op::Read || io->op == BlockIo::Op::Write) {
      io->progress += uint64_t(res);
      if (res == 0 && io->op == BlockIo::Op::Read) {
        // Past the end of a short file: the rest reads as zeros.
        std::memset(io->buffer + io->progress, 0, io->length - io->progress);
        io->progress = io->length;
      }
      if (res == 0 && io->op == BlockIo::Op::Write) {
        io->done(io, nvme::sc::WriteFault);
        return;
      }
      if (io->progress < io->length) {
        issue(io);  // a short transfer: continue where it stopped
        return;
      }
    }
    if (io->write_through) {
      if (io->op == BlockIo::Op::Write) {
        synced(io);  // every piece went out with RWF_DSYNC
        return;
      }
      io->syncing = true;  // fallocate has no DSYNC flag: sync the file after it
      issue(io);
      return;
    }
    io->read_data = io->op == BlockIo::Op::Read ? io->buffer : nullptr;
    io->done(io, nvme::sc::Success);
  }

  void synced(BlockIo* io) {
    if (SyncObserver* o = observer_.load(std::memory_order_acquire)) o->on_sync_complete(*io);
    io->read_data = nullptr;
    io->done(io, nvme::sc::Success);
  }

  int fd_;
  std::string path_;
  std::atomic<uint64_t> size_;
  uint32_t bs_;
  Persistence persistence_;
  bool follows_backing_;
  std::atomic<bool> cache_enabled_{true};
  std::atomic<SyncObserver*> observer_{nullptr};
};

// Where the file's blocks really live: a file system with no storage behind it keeps
// nothing past the machine.
Persistence persistence_of(int fd, const struct stat& st) {
  if (S_ISBLK(st.st_mode)) return Persistence::Media;
  struct statfs fs{};
  if (fstatfs(fd, &fs) == 0 && (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC)) return Persistence::Machine;
  return Persistence::Media;
}
}  // namespace

const char* persistence_name(Persistence p) {
  switch (p) {
    case Persistence::None: return "nothing is stored";
    case Persistence::Process: return "kept in the target's memory: lost when the target exits";
    case Persistence::Machine: return "kept in memory (tmpfs/ramfs): survives the target, lost at reboot or power loss";
    case Persistence::Media: return "on storage: durable after Flush or FUA";
  }
  return "?";
}

std::unique_ptr<BlockDevice> make_file(const std::string& path, uint64_t size, uint32_t block_size,
                                       std::string& err) {
  struct stat before{};
  const bool created = stat(path.c_str(), &before) != 0;
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EINVAL) fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);  // tmpfs
  if (fd < 0) {
    err = fmt::format("cannot open '{}': {}", path, strerror(errno));
    return nullptr;
  }
  struct stat st{};
  fstat(fd, &st);
  const bool follows_backing = size == 0;
  uint64_t have = 0;
  bool resized = false;
  if (S_ISBLK(st.st_mode)) {
    ioctl(fd, BLKGETSIZE64, &have);
    if (size == 0 || size > have) size = have;
  } else {
    have = uint64_t(st.st_size);
    if (size == 0) size = have;
    if (have < size && ftruncate(fd, off_t(size)) < 0) {
      err = fmt::format("cannot size '{}' to {} bytes: {}", path, size, strerror(errno));
      close(fd);
      return nullptr;
    }
    resized = have < size;
  }
  size -= size % block_size;
  if (size == 0) {
    err = fmt::format("'{}' is empty: give a size", path);
    close(fd);
    return nullptr;
  }
  // A file this call made or grew is not there after a power loss until its size and its
  // directory entry are on storage: a host's Flush syncs the file's data, not its directory.
  if ((created || resized) && fsync(fd) != 0) {
    err = fmt::format("cannot sync '{}': {}", path, strerror(errno));
    close(fd);
    return nullptr;
  }
  if (created) {
    std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/') + 1);
    int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      fsync(dfd);
      close(dfd);
    }
  }
  return std::make_unique<FileDevice>(fd, path, size, block_size, persistence_of(fd, st), follows_backing);
}

}  // namespace nvtcp::backend
