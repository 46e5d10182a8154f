// SPDX-License-Identifier: Apache-2.0
#include "engine/ublk_device.hpp"

#include <fcntl.h>
#include <linux/ublk_cmd.h>
#include <liburing.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "engine/host_queue.hpp"
#include "nvtcp/identify.hpp"
#include "reactor/reactor.hpp"
#include "util/log.hpp"

// The ioctl-encoded command opcodes (Linux 6.3+; older UAPI headers lack them). Every kernel
// that knows them accepts them; the plain numbers are a legacy a kernel may refuse.
#ifndef UBLK_U_CMD_ADD_DEV
#define UBLK_U_CMD_ADD_DEV _IOWR('u', UBLK_CMD_ADD_DEV, struct ublksrv_ctrl_cmd)
#define UBLK_U_CMD_DEL_DEV _IOWR('u', UBLK_CMD_DEL_DEV, struct ublksrv_ctrl_cmd)
#define UBLK_U_CMD_START_DEV _IOWR('u', UBLK_CMD_START_DEV, struct ublksrv_ctrl_cmd)
#define UBLK_U_CMD_STOP_DEV _IOWR('u', UBLK_CMD_STOP_DEV, struct ublksrv_ctrl_cmd)
#define UBLK_U_CMD_SET_PARAMS _IOWR('u', UBLK_CMD_SET_PARAMS, struct ublksrv_ctrl_cmd)
#define UBLK_U_IO_FETCH_REQ _IOWR('u', UBLK_IO_FETCH_REQ, struct ublksrv_io_cmd)
#define UBLK_U_IO_COMMIT_AND_FETCH_REQ _IOWR('u', UBLK_IO_COMMIT_AND_FETCH_REQ, struct ublksrv_io_cmd)
#endif

namespace nvtcp::engine {

namespace {
constexpr const char* kControlPath = "/dev/ublk-control";
constexpr uint64_t kFlagCmdIoctlEncode = 1ull << 6;  // UBLK_F_CMD_IOCTL_ENCODE: we send ioctl-encoded opcodes
constexpr uint32_t kNoDevice = 0xFFFFFFFFu;          // ADD_DEV: pick the next free ID

unsigned log2u(uint32_t v) { return 31u - unsigned(__builtin_clz(v)); }

// /dev/ublk-control's commands: io_uring commands in 128-byte SQEs, one at a time.
class ControlRing {
 public:
  ~ControlRing() {
    if (ready_) io_uring_queue_exit(&ring_);
    if (fd_ >= 0) ::close(fd_);
  }
  bool open(std::string& err) {
    fd_ = ::open(kControlPath, O_RDWR | O_CLOEXEC);
    if (fd_ < 0) {
      err = fmt::format("{}: {} (ublk needs Linux 6.0+ with the ublk_drv module loaded)", kControlPath,
                        strerror(errno));
      return false;
    }
    const int rc = io_uring_queue_init(4, &ring_, IORING_SETUP_SQE128);
    if (rc < 0) {
      err = fmt::format("io_uring with 128-byte SQEs: {}", strerror(-rc));
      return false;
    }
    ready_ = true;
    return true;
  }
  // Sends one command and waits for its answer (the kernel's result: 0 or -errno).
  int command(uint32_t op, uint32_t dev_id, const void* buf = nullptr, uint16_t len = 0, uint64_t data0 = 0) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) return -EBUSY;
    // A 128-byte SQE (IORING_SETUP_SQE128): twice the struct's size; GCC cannot know that.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
    std::memset(static_cast<void*>(sqe), 0, 2 * sizeof(io_uring_sqe));
#pragma GCC diagnostic pop
    sqe->opcode = IORING_OP_URING_CMD;
    sqe->fd = fd_;
    sqe->cmd_op = op;
    auto* c = reinterpret_cast<ublksrv_ctrl_cmd*>(sqe->cmd);
    c->dev_id = dev_id;
    c->queue_id = 0xFFFF;  // not a queue's command
    c->addr = reinterpret_cast<uint64_t>(buf);
    c->len = len;
    c->data[0] = data0;
    int rc = io_uring_submit_and_wait(&ring_, 1);
    if (rc < 0) return rc;
    io_uring_cqe* cqe = nullptr;
    rc = io_uring_wait_cqe(&ring_, &cqe);
    if (rc < 0) return rc;
    rc = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    return rc;
  }

 private:
  io_uring ring_{};
  int fd_ = -1;
  bool ready_ = false;
};
}  // namespace

struct UblkDevice::Impl {
  // One block request slot (a ublk tag): its fetch/commit command and its data buffer.
  struct Tag {
    Impl* dev = nullptr;
    uint16_t tag = 0;
    reactor::Completion cmd;   // the FETCH or COMMIT_AND_FETCH command's completion
    uint8_t* buf = nullptr;
    uint32_t bytes = 0;        // of the request being served
    nvme::DsmRange range{};
  };

  host::Controller* ctrl = nullptr;
  host::MultipathController* mp = nullptr;  // several paths: requests go through it
  uint32_t nsid = 1;
  uint32_t block_size = 512;
  uint64_t blocks = 0;
  UblkOptions opts;
  ControlRing control;
  uint32_t dev_id = kNoDevice;
  bool added = false, started = false;
  std::thread thread;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> served{0};
  reactor::Reactor* reactor = nullptr;  // the queue thread's; it goes with the thread
  std::mutex reactor_mu;                 // so that a wake never posts to a reactor going away

  // Queue thread state.
  int cdev = -1;
  const ublksrv_io_desc* iods = nullptr;
  size_t iods_bytes = 0;
  std::vector<Tag> tags;
  uint8_t* buffers = nullptr;
  size_t buffers_bytes = 0;
  uint32_t live_tags = 0;      // tags with a fetch in the kernel or a request being served
  // What requests go on: one queue pair, or a multipath one (the other stays empty).
  std::unique_ptr<host::QueuePair> one_qp;
  std::unique_ptr<host::MultipathQueuePair> multi_qp;
  std::optional<HostQueue> qp;

  void run(std::promise<std::string>& ready) {
    serve_queue(ready);
    release_queue_resources();
    std::lock_guard lk(reactor_mu);
    reactor = nullptr;
  }
  void serve_queue(std::promise<std::string>& ready);
  void submit_cmd(Tag& t, uint32_t op, int32_t result);
  void serve(Tag& t);
  void commit(Tag& t, int32_t result) { submit_cmd(t, UBLK_U_IO_COMMIT_AND_FETCH_REQ, result); }
  static void on_cmd(reactor::Completion* c, int res, uint32_t);
  static void on_nvme(void* ctx, const host::Completion& c);
  void release_queue_resources();
};

void UblkDevice::Impl::submit_cmd(Tag& t, uint32_t op, int32_t result) {
  io_uring_sqe* sqe = reactor->get_sqe();
  std::memset(sqe, 0, sizeof(*sqe));
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = cdev;
  sqe->cmd_op = op;
  auto* c = reinterpret_cast<ublksrv_io_cmd*>(sqe->cmd);  // 16 bytes: fits a 64-byte SQE
  c->q_id = 0;
  c->tag = t.tag;
  c->result = result;
  c->addr = reinterpret_cast<uint64_t>(t.buf);
  reactor->prep(sqe, &t.cmd);
}

void UblkDevice::Impl::on_cmd(reactor::Completion* c, int res, uint32_t) {
  Tag& t = *reinterpret_cast<Tag*>(reinterpret_cast<uint8_t*>(c) - offsetof(Tag, cmd));
  Impl& d = *t.dev;
  if (res == UBLK_IO_RES_OK) return d.serve(t);
  // UBLK_IO_RES_ABORT: the device is going away; anything else is a refusal of the command.
  if (res != UBLK_IO_RES_ABORT) log::warn("ublk{}: tag {}: command refused: {}", d.dev_id, t.tag, strerror(-res));
  --d.live_tags;
}

// The request the kernel handed this tag, as an NVMe command on the queue pair.
void UblkDevice::Impl::serve(Tag& t) {
  const ublksrv_io_desc iod = iods[t.tag];  // read once: the kernel owns this memory
  const uint8_t op = iod.op_flags & 0xFF;
  const uint32_t flags = iod.op_flags >> 8;
  const uint64_t offset = iod.start_sector << 9;
  const uint64_t bytes = uint64_t(iod.nr_sectors) << 9;
  ++served;
  if (offset % block_size || bytes % block_size) return commit(t, -EINVAL);
  const uint64_t lba = offset / block_size;
  const uint64_t nlb = bytes / block_size;
  t.bytes = uint32_t(bytes);
  int rc;
  switch (op) {
    case UBLK_IO_OP_READ:
      if (bytes > opts.max_io_bytes) return commit(t, -EINVAL);
      rc = qp->read(nsid, lba, uint32_t(nlb), t.buf, on_nvme, &t);
      break;
    case UBLK_IO_OP_WRITE:
      if (bytes > opts.max_io_bytes) return commit(t, -EINVAL);
      rc = qp->write(nsid, lba, uint32_t(nlb), t.buf, on_nvme, &t,
                     host::WriteFlags{.fua = (flags & (UBLK_IO_F_FUA >> 8)) != 0});
      break;
    case UBLK_IO_OP_FLUSH:
      t.bytes = 0;
      rc = qp->flush(nsid, on_nvme, &t);
      break;
    case UBLK_IO_OP_DISCARD:
      t.bytes = 0;
      if (nlb > 0xFFFFFFFFull) return commit(t, -EINVAL);
      t.range = nvme::DsmRange{};
      t.range.nlb = uint32_t(nlb);
      t.range.slba = lba;
      rc = qp->deallocate(nsid, &t.range, 1, on_nvme, &t);
      break;
    case UBLK_IO_OP_WRITE_ZEROES:
      t.bytes = 0;
      if (nlb > 65536) return commit(t, -EINVAL);
      rc = qp->write_zeroes(nsid, lba, uint32_t(nlb), on_nvme, &t);
      break;
    default:
      return commit(t, -EOPNOTSUPP);
  }
  if (rc != 0) commit(t, rc == -EINVAL ? -EINVAL : -EIO);
}

void UblkDevice::Impl::on_nvme(void* ctx, const host::Completion& c) {
  Tag& t = *static_cast<Tag*>(ctx);
  if (!c.status.ok())
    log::warn("ublk{}: tag {}: {}", t.dev->dev_id, t.tag, nvme::status_name(c.status));
  t.dev->commit(t, c.status.ok() ? int32_t(t.bytes) : -EIO);
}

void UblkDevice::Impl::serve_queue(std::promise<std::string>& ready) {
  pthread_setname_np(pthread_self(), fmt::format("nvtcp-ublk{}", dev_id).c_str());
  std::string err;
  if (mp) {
    multi_qp = mp->create_io_qpair(opts.queue_depth, err);
    if (!multi_qp) return ready.set_value("NVMe/TCP multipath queue pair: " + err);
    qp.emplace(*multi_qp);
  } else {
    one_qp = ctrl->create_io_qpair(opts.queue_depth, err);
    if (!one_qp) return ready.set_value("NVMe/TCP queue pair: " + err);
    qp.emplace(*one_qp);
  }
  {
    std::lock_guard lk(reactor_mu);
    reactor = reactor::Reactor::current();
  }
  const std::string path = fmt::format("/dev/ublkc{}", dev_id);
  for (int i = 0; i < 100 && cdev < 0; ++i) {  // devtmpfs makes the node as the device is added
    cdev = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (cdev < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (cdev < 0) return ready.set_value(fmt::format("{}: {}", path, strerror(errno)));
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  iods_bytes = (opts.queue_depth * sizeof(ublksrv_io_desc) + page - 1) / page * page;
  void* m = mmap(nullptr, iods_bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, cdev, UBLKSRV_CMD_BUF_OFFSET);
  if (m == MAP_FAILED)
    return ready.set_value(fmt::format("mapping {}'s request descriptors: {}", path, strerror(errno)));
  iods = static_cast<const ublksrv_io_desc*>(m);
  buffers_bytes = size_t(opts.queue_depth) * opts.max_io_bytes;
  m = mmap(nullptr, buffers_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return ready.set_value("no memory for the request buffers");
  buffers = static_cast<uint8_t*>(m);
  tags.resize(opts.queue_depth);
  for (uint16_t i = 0; i < opts.queue_depth; ++i) {
    Tag& t = tags[i];
    t.dev = this;
    t.tag = i;
    t.cmd.fn = on_cmd;
    t.buf = buffers + size_t(i) * opts.max_io_bytes;
    submit_cmd(t, UBLK_U_IO_FETCH_REQ, -1);
    ++live_tags;
  }
  reactor->run_once(0);  // the fetches are in the kernel before START_DEV is sent
  ready.set_value("");
  const auto give_up = std::chrono::seconds(10);
  std::chrono::steady_clock::time_point stop_seen{};
  while (live_tags > 0 || qp->outstanding() > 0) {
    qp->process_completions(100000);  // the ublk commands and the NVMe/TCP queue pair, one ring
    if (stopping.load(std::memory_order_relaxed)) {
      const auto now = std::chrono::steady_clock::now();
      if (stop_seen == std::chrono::steady_clock::time_point{}) stop_seen = now;
      else if (now - stop_seen > give_up) {
        log::warn("ublk{}: {} request slot(s) still held 10 s after the stop; leaving", dev_id, live_tags);
        break;
      }
    }
  }
}

void UblkDevice::Impl::release_queue_resources() {
  qp.reset();
  if (multi_qp && multi_qp->failovers())
    log::info("ublk{}: {} request(s) moved to another path on the way", dev_id, multi_qp->failovers());
  multi_qp.reset();
  one_qp.reset();
  if (iods) munmap(const_cast<ublksrv_io_desc*>(iods), iods_bytes);
  iods = nullptr;
  if (cdev >= 0) ::close(cdev);
  cdev = -1;
  // The buffers stay until the thread is joined: commands cancelled with the ring may still
  // name them.
}

bool UblkDevice::available(std::string& why) {
  struct stat st{};
  if (stat(kControlPath, &st) == 0) return true;
  why = fmt::format("{} is missing: ublk needs Linux 6.0+ with the ublk_drv module loaded (modprobe ublk_drv)",
                    kControlPath);
  return false;
}

std::unique_ptr<UblkDevice> UblkDevice::create(host::Controller& ctrl, host::MultipathController* mp, uint32_t nsid,
                                               const UblkOptions& o, std::string& err) {
  auto d = std::make_unique<Impl>();
  d->ctrl = &ctrl;
  d->mp = mp;
  d->nsid = nsid;
  d->opts = o;
  host::NamespaceInfo ni;
  if (!ctrl.namespace_info(nsid, ni, err)) return nullptr;
  d->block_size = ni.block_size;
  d->blocks = ni.blocks;
  d->opts.max_io_bytes = std::min(o.max_io_bytes, ctrl.max_transfer_bytes());
  d->opts.max_io_bytes -= d->opts.max_io_bytes % std::max(ni.block_size, 4096u);
  if (d->opts.queue_depth < 1 || d->opts.queue_depth > 1024 || d->opts.max_io_bytes < ni.block_size) {
    err = "ublk: queue depth 1..1024 and a transfer of at least one block";
    return nullptr;
  }
  if (!d->control.open(err)) return nullptr;

  ublksrv_ctrl_dev_info info{};
  info.nr_hw_queues = 1;
  info.queue_depth = uint16_t(d->opts.queue_depth);
  info.max_io_buf_bytes = d->opts.max_io_bytes;
  info.dev_id = kNoDevice;
  info.ublksrv_pid = getpid();
  info.flags = kFlagCmdIoctlEncode;
  int rc = d->control.command(UBLK_U_CMD_ADD_DEV, kNoDevice, &info, sizeof(info));
  if (rc < 0) {
    err = fmt::format("ublk ADD_DEV: {}", strerror(-rc));
    return nullptr;
  }
  d->dev_id = info.dev_id;
  d->added = true;
  std::unique_ptr<UblkDevice> dev(new UblkDevice(std::move(d)));
  Impl& im = *dev->impl_;

  const auto* id = reinterpret_cast<const nvme::IdentifyController*>(ctrl.identify_data());
  ublk_params p{};
  p.len = sizeof(p);
  p.types = UBLK_PARAM_TYPE_BASIC | UBLK_PARAM_TYPE_DISCARD;
  // A controller with a volatile write cache: the block layer sends flushes and FUA writes.
  if (id->vwc & 1) p.basic.attrs = UBLK_ATTR_VOLATILE_CACHE | UBLK_ATTR_FUA;
  p.basic.logical_bs_shift = uint8_t(log2u(im.block_size));
  p.basic.physical_bs_shift = uint8_t(log2u(im.block_size));
  p.basic.io_min_shift = uint8_t(log2u(im.block_size));
  p.basic.io_opt_shift = uint8_t(log2u(std::max(im.block_size, 4096u)));
  p.basic.max_sectors = im.opts.max_io_bytes >> 9;
  p.basic.dev_sectors = im.blocks * im.block_size >> 9;
  p.discard.discard_granularity = im.block_size;
  p.discard.max_discard_sectors = uint32_t(std::min<uint64_t>(0xFFFFFFFFull * im.block_size >> 9, 1u << 30));
  p.discard.max_write_zeroes_sectors = uint32_t(std::min<uint64_t>(65536ull * im.block_size >> 9, 1u << 30));
  p.discard.max_discard_segments = 1;
  rc = im.control.command(UBLK_U_CMD_SET_PARAMS, im.dev_id, &p, sizeof(p));
  if (rc < 0) {
    err = fmt::format("ublk SET_PARAMS: {}", strerror(-rc));
    return nullptr;
  }

  std::promise<std::string> ready;
  auto ready_f = ready.get_future();
  im.thread = std::thread([&im, &ready] { im.run(ready); });
  err = ready_f.get();
  if (!err.empty()) return nullptr;
  rc = im.control.command(UBLK_U_CMD_START_DEV, im.dev_id, nullptr, 0, uint64_t(getpid()));
  if (rc < 0) {
    err = fmt::format("ublk START_DEV: {}", strerror(-rc));
    return nullptr;
  }
  im.started = true;
  log::info("engine: {} is namespace {} of {} ({} blocks of {} bytes, up to {} KiB per request, queue depth {}{})",
            dev->block_path(), nsid, ctrl.trid().subnqn, im.blocks, im.block_size, im.opts.max_io_bytes >> 10,
            im.opts.queue_depth, mp ? fmt::format(", over {} paths", mp->path_count()) : std::string());
  return dev;
}

UblkDevice::UblkDevice(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

UblkDevice::~UblkDevice() {
  Impl& d = *impl_;
  if (d.started) {
    // The kernel removes the disk (serving what is in flight), then aborts the fetches.
    const int rc = d.control.command(UBLK_U_CMD_STOP_DEV, d.dev_id);
    if (rc < 0) log::warn("ublk{}: STOP_DEV: {}", d.dev_id, strerror(-rc));
  }
  d.stopping = true;
  {
    std::lock_guard lk(d.reactor_mu);
    if (d.reactor) d.reactor->post([] {});
  }
  if (d.thread.joinable()) d.thread.join();
  if (d.buffers) munmap(d.buffers, d.buffers_bytes);
  if (d.added) {
    const int rc = d.control.command(UBLK_U_CMD_DEL_DEV, d.dev_id);
    if (rc < 0) log::warn("ublk{}: DEL_DEV: {}", d.dev_id, strerror(-rc));
  }
}

int UblkDevice::dev_id() const { return int(impl_->dev_id); }
uint64_t UblkDevice::requests() const { return impl_->served.load(std::memory_order_relaxed); }

}  // namespace nvtcp::engine
