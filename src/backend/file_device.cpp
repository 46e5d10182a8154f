// A namespace backed by a regular file or a block device, driven through the calling
// reactor's io_uring so a slow disk never blocks the loop.
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "backend/block_device.hpp"

namespace nvtcp::backend {

namespace {
class FileDevice final : public BlockDevice {
 public:
  FileDevice(int fd, uint64_t size, uint32_t bs) : fd_(fd), size_(size), bs_(bs) {}
  ~FileDevice() override { close(fd_); }
  uint64_t size_bytes() const override { return size_; }
  uint32_t block_size() const override { return bs_; }
  const char* kind() const override { return "file"; }

  void submit(BlockIo* io, reactor::Reactor& r) override {
    io->device = this;
    io->reactor = &r;
    io->progress = 0;
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
    switch (io->op) {
      case BlockIo::Op::Read:
        io_uring_prep_read(sqe, fd_, io->buffer + io->progress, unsigned(len), off);
        break;
      case BlockIo::Op::Write:
        io_uring_prep_write(sqe, fd_, io->buffer + io->progress, unsigned(len), off);
        break;
      case BlockIo::Op::Flush: io_uring_prep_fsync(sqe, fd_, IORING_FSYNC_DATASYNC); break;
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
      io->read_data = nullptr;
      io->done(io, io->op == BlockIo::Op::Read ? wire::sc::UnrecoveredReadError : wire::sc::WriteFault);
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
        io->done(io, wire::sc::WriteFault);
        return;
      }
      if (io->progress < io->length) {
        issue(io);  // a short transfer: continue where it stopped
        return;
      }
    }
    io->read_data = io->op == BlockIo::Op::Read ? io->buffer : nullptr;
    io->done(io, wire::sc::Success);
  }

  int fd_;
  uint64_t size_;
  uint32_t bs_;
};
}  // namespace

std::unique_ptr<BlockDevice> make_file(const std::string& path, uint64_t size, uint32_t block_size,
                                       std::string& err) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EINVAL) fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);  // tmpfs
  if (fd < 0) {
    err = fmt::format("cannot open '{}': {}", path, strerror(errno));
    return nullptr;
  }
  struct stat st{};
  fstat(fd, &st);
  uint64_t have = 0;
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
  }
  size -= size % block_size;
  if (size == 0) {
    err = fmt::format("'{}' is empty: give a size", path);
    close(fd);
    return nullptr;
  }
  return std::make_unique<FileDevice>(fd, size, block_size);
}

}  // namespace nvtcp::backend
