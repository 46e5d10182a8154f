// SPDX-License-Identifier: Apache-2.0
// A namespace backed by a Ceph RBD image, through librbd's asynchronous API.
//
// The way out: librbd starts each operation on the submitting reactor (rbd_non_blocking_aio is
// off, and the Objecter's throttle that could make that wait is lifted: RadosCluster::connect).
// The way back: librbd calls a completion's callback on a thread of its own. The callback
// takes the result, releases librbd's completion and hands the BlockIo to the submitting
// reactor with Reactor::complete_from_any_thread: a push onto a lock-free list the reactor
// takes whole each turn, and one eventfd write when that list was empty (the eventfd the
// reactor already reads for post()). No lock, no thread of ours, no allocation of ours per
// I/O; librbd's own completion object is the one allocation, and it is librbd's.
// (librbd's rbd_set_image_notification + rbd_poll_io_events would also do: it queues the
// completions under a mutex of its own and writes the eventfd for each.)
//
// Durability: the image is opened with librbd's cache off (rbd_cache = false), so a write
// completes once the OSDs hold it as durably as the pool keeps anything: the namespace has
// no volatile write cache, a FUA write needs nothing more, and Flush is rbd_aio_flush (which
// then has nothing to write back).
//
// A lost cluster: rados_osd_op_timeout and rados_mon_op_timeout (30 s unless the
// configuration says otherwise) make an operation that cannot reach the cluster fail instead
// of waiting for ever; it fails with a path error, which a multipath host takes as "try
// another path" (another gateway) rather than as an error of the data. A client the cluster
// has fenced (blocklisted) fails the same way, and the device reconnects as a new client on a
// thread of its own (RbdDevice::fenced).
#include <rados/librados.h>
#include <rbd/librbd.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "backend/block_device.hpp"
#include "util/log.hpp"

namespace nvtcp::backend {

namespace {

const char* rbd_op_name(BlockIo::Op op) {
  switch (op) {
    case BlockIo::Op::Read: return "read";
    case BlockIo::Op::Write: return "write";
    case BlockIo::Op::Flush: return "flush";
    case BlockIo::Op::WriteZeroes: return "write zeroes";
    case BlockIo::Op::Deallocate: return "discard";
    case BlockIo::Op::CompareAndWrite: return "compare and write";
  }
  return "?";
}

nvme::Status rbd_status(int64_t r) {
  if (r >= 0) return nvme::sc::Success;
  switch (-r) {
    case EILSEQ: return nvme::sc::CompareFailure;
    // The cluster cannot be reached, or has fenced this client (blocklisted: ESHUTDOWN).
    case ETIMEDOUT:
    case ENOTCONN:
    case ESHUTDOWN:
    case ECONNREFUSED:
    case ECONNRESET: return nvme::sc::InternalPathError;
    default: return nvme::sc::InternalError;
  }
}

// Sets key to ours if it still has Ceph's default (the configuration file did not set it).
void default_option(rados_t r, const char* key, std::string_view ceph_default, const char* ours) {
  char value[64] = {};
  if (rados_conf_get(r, key, value, sizeof value) == 0 && std::string_view(value) != ceph_default) return;
  rados_conf_set(r, key, ours);
}

// One connection to a cluster: an image's own, or shared by the images of one registered
// cluster (shared_connection).
class RadosCluster {
 public:
  static std::shared_ptr<RadosCluster> connect(const RbdSpec& spec, std::string& err) {
    auto c = std::shared_ptr<RadosCluster>(new RadosCluster());
    const char* user = spec.user.empty() ? nullptr : spec.user.c_str();
    if (int r = rados_create(&c->rados_, user); r < 0) {
      err = fmt::format("rados_create: {}", std::strerror(-r));
      c->rados_ = nullptr;
      return nullptr;
    }
    // librados opens these files and reads them to the end on the calling thread (an RPC
    // worker's, one of a few): a FIFO, a device or a directory there would hold it for good, so
    // only regular files go through.
    for (const std::string* f : {&spec.config_file, &spec.key_file}) {
      struct stat st {};
      if (f->empty()) continue;
      if (::stat(f->c_str(), &st) != 0) {
        err = fmt::format("Ceph {} {}: {}", f == &spec.config_file ? "configuration" : "key file", *f,
                          std::strerror(errno));
        return nullptr;
      }
      if (!S_ISREG(st.st_mode)) {
        err = fmt::format("Ceph {} {}: not a regular file", f == &spec.config_file ? "configuration" : "key file", *f);
        return nullptr;
      }
    }
    if (!spec.config_file.empty()) {
      if (int r = rados_conf_read_file(c->rados_, spec.config_file.c_str()); r < 0) {
        err = fmt::format("Ceph configuration {}: {}", spec.config_file, std::strerror(-r));
        return nullptr;
      }
    }
    // librados' own log stays out of the target's output (its errors come back as return
    // values, which are logged). Then nvtcp's defaults, each only where the configuration file
    // left Ceph's own (an option set through the API outranks the file), then the options given
    // by RPC, which win.
    rados_conf_set(c->rados_, "log_to_stderr", "false");
    rados_conf_set(c->rados_, "err_to_stderr", "false");
    default_option(c->rados_, "rados_osd_op_timeout", "0", "30");
    default_option(c->rados_, "rados_mon_op_timeout", "0", "30");
    default_option(c->rados_, "client_mount_timeout", "300", "30");
    // librbd starts each operation on the calling reactor instead of posting it to its own
    // thread first: one thread hand-off (a futex wake and a context switch) less per I/O, 6-11 us
    // of the gateway's CPU per 4 KiB I/O here (bench/RESULTS.md, 08:52). What could then block the
    // reactor is the Objecter's in-flight throttle (1024 operations, 100 MiB per client), which
    // waits for operations to finish, for as long as the cluster takes: it is lifted, and the
    // target's own limits (queue depths, max_buffer_memory) bound what is in flight instead.
    default_option(c->rados_, "rbd_non_blocking_aio", "true", "false");
    default_option(c->rados_, "objecter_inflight_ops", "1024", "0");
    default_option(c->rados_, "objecter_inflight_op_bytes", "104857600", "0");
    for (const auto& [k, v] : spec.config) {
      if (int r = rados_conf_set(c->rados_, k.c_str(), v.c_str()); r < 0) {
        err = fmt::format("Ceph option {}={}: {}", k, v, std::strerror(-r));
        return nullptr;
      }
    }
    if (!spec.key_file.empty()) rados_conf_set(c->rados_, "keyring", spec.key_file.c_str());
    // The namespace reports no volatile write cache: librbd must not keep one.
    rados_conf_set(c->rados_, "rbd_cache", "false");
    if (int r = rados_connect(c->rados_); r < 0) {
      err = fmt::format("cannot connect to the Ceph cluster: {}", std::strerror(-r));
      return nullptr;
    }
    return c;
  }
  ~RadosCluster() {
    if (rados_) rados_shutdown(rados_);
  }
  rados_t handle() const { return rados_; }

 private:
  RadosCluster() = default;
  rados_t rados_ = nullptr;
};

// The connection of a registered cluster, made by its first image and kept while any image uses
// it: a rados client runs a dozen threads of its own, too many to have one per image when a
// gateway serves hundreds. Keyed by the name and the settings, so that a cluster registered
// again with others (after its images went) gets a new connection. `fenced`: the connection
// the cluster has blocklisted; the first image to ask replaces it for all (a client that is
// blocklisted stays so for an hour by default: a new client, with a new address, is the way
// back), and the images that ask after it get the new one.
std::shared_ptr<RadosCluster> shared_connection(const RbdSpec& spec, std::string& err,
                                                const RadosCluster* fenced = nullptr) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<RadosCluster>> connections;
  std::string key = fmt::format("{}\n{}\n{}\n{}", spec.cluster_name, spec.user, spec.config_file, spec.key_file);
  for (const auto& [k, v] : spec.config) key += fmt::format("\n{}={}", k, v);
  std::lock_guard lk(mu);  // control path: connecting blocks, and no image of it opens meanwhile
  if (auto c = connections[key].lock(); c && c.get() != fenced) return c;
  auto c = RadosCluster::connect(spec, err);
  if (c) connections[key] = c;
  return c;
}

// One open image: the connection it came through, its I/O context, librbd's handle and the
// watch on its header. Replaced whole when the cluster fences this client.
struct ImageHandle {
  std::shared_ptr<RadosCluster> cluster;
  rados_ioctx_t ioctx = nullptr;
  rbd_image_t image = nullptr;
  uint64_t watch = 0;
  bool watching = false;
  // Operations issued through this handle and not yet called back, and submitters between
  // taking the handle and issuing (RbdDevice::acquire). The handle is closed at zero.
  std::atomic<uint64_t> users{0};

  void close() {
    if (watching) rbd_update_unwatch(image, watch);  // waits for a callback that runs now
    watching = false;
    // rbd_close waits for the operations in flight; there are none left (users is 0).
    if (image) rbd_close(image);
    if (ioctx) rados_ioctx_destroy(ioctx);
    image = nullptr;
    ioctx = nullptr;
    cluster.reset();
  }
  ~ImageHandle() { close(); }
};

// Opens the image through a connection; its size in `size`. Control path: it waits for the cluster.
std::unique_ptr<ImageHandle> open_image(std::shared_ptr<RadosCluster> cluster, const RbdSpec& spec,
                                        uint64_t& size, std::string& err) {
  auto h = std::make_unique<ImageHandle>();
  h->cluster = std::move(cluster);
  if (int r = rados_ioctx_create(h->cluster->handle(), spec.pool.c_str(), &h->ioctx); r < 0) {
    err = fmt::format("Ceph pool {}: {}", spec.pool, std::strerror(-r));
    h->ioctx = nullptr;
    return nullptr;
  }
  const std::string name = spec.pool + "/" + spec.image;
  if (int r = rbd_open(h->ioctx, spec.image.c_str(), &h->image, nullptr); r < 0) {
    err = fmt::format("RBD image {}: {}", name, std::strerror(-r));
    h->image = nullptr;
    return nullptr;
  }
  if (int r = rbd_get_size(h->image, &size); r < 0) {
    err = fmt::format("RBD image {}: {}", name, std::strerror(-r));
    return nullptr;
  }
  return h;
}

// The image's identity on every gateway and after every restart: the cluster's fsid, the pool's
// ID and the image's ID. Not the names: two clusters may each have an rbd/disk1, and an image
// removed and made anew under its old name is other storage (a host must not keep its cache).
std::string image_identity(const ImageHandle& h, const std::string& name, std::string& err) {
  char fsid[64] = {};
  char id[128] = {};
  if (int r = rados_cluster_fsid(h.cluster->handle(), fsid, sizeof fsid - 1); r < 0) {
    err = fmt::format("RBD image {}: the cluster's fsid: {}", name, std::strerror(-r));
    return {};
  }
  if (int r = rbd_get_id(h.image, id, sizeof id - 1); r < 0) {
    err = fmt::format("RBD image {}: its ID: {}", name, std::strerror(-r));
    return {};
  }
  return fmt::format("{}\n{}\n{}", fsid, rados_ioctx_get_id(h.ioctx), id);
}

class RbdDevice final : public BlockDevice {
 public:
  RbdDevice(RbdSpec spec, std::unique_ptr<ImageHandle> h, std::string identity, uint64_t size, uint32_t bs)
      : spec_(std::move(spec)), name_(spec_.pool + "/" + spec_.image), identity_(std::move(identity)), size_(size),
        bs_(bs) {
    watch_header(*h);
    current_.store(h.get());
    handles_.push_back(std::move(h));
    size_reader_ = std::jthread([this](std::stop_token stop) { read_sizes(stop); });
  }
  ~RbdDevice() override {
    size_reader_ = {};  // stopped and joined: it reads through the handles
    recovery_ = {};     // asks a reconnection in progress to stop, and waits for it
    // The handles close as handles_ goes; the target has no operation left in flight by now.
  }
  uint64_t size_bytes() const override { return size_.load(std::memory_order_relaxed); }
  // Once a second on reactor 0 (the target's revalidation): the size the device's size reader
  // last found. Asking librbd here could stall every connection of reactor 0: after a header
  // change librbd reads the new header from the cluster before it answers, for as long as the
  // operation timeout (30 s) when the cluster cannot be reached.
  uint64_t revalidate_size() override { return size_bytes(); }
  // The image itself grows (bdev_rbd_resize): every gateway that has it open sees the new size
  // through its header watch. Never shrinks: the size to beat is the cluster's now (another
  // client may have grown it since this device last looked), and librbd is told not to shrink
  // either. Control path: both wait for the cluster.
  bool resize(uint64_t bytes) override {
    bytes -= bytes % bs_;
    ImageHandle* h = acquire();
    uint64_t now = 0;
    int r = rbd_get_size(h->image, &now);
    if (r < 0 || bytes <= now) {
      h->users.fetch_sub(1);
      log::warn("rbd {}: not resized to {} bytes: {}", name_, bytes,
                r < 0 ? std::string(std::strerror(-r)) : fmt::format("the image has {} bytes and only grows", now));
      return false;
    }
    r = rbd_resize2(h->image, bytes, false, nullptr, nullptr);
    h->users.fetch_sub(1);
    if (r < 0) {
      log::warn("rbd {}: resize to {} bytes failed: {}", name_, bytes, std::strerror(-r));
      return false;
    }
    size_.store(bytes, std::memory_order_relaxed);
    return true;
  }
  uint32_t block_size() const override { return bs_; }
  const char* kind() const override { return "rbd"; }
  std::string storage_identity() const override { return identity_; }
  Persistence persistence() const override { return Persistence::Media; }
  bool atomic_compare_and_write() const override { return true; }

  void submit(BlockIo* io, reactor::Reactor& r) override {
    io->device = this;
    io->reactor = &r;
    io->remote.fn = &RbdDevice::on_reactor;
    io->remote.io = io;
    ImageHandle* h = acquire();
    io->remote.via = h;
    rbd_completion_t c = nullptr;
    if (int rc = rbd_aio_create_completion(io, &RbdDevice::on_librbd_thread, &c); rc < 0) {
      h->users.fetch_sub(1);
      io->done(io, rbd_status(rc));
      return;
    }
    int rc = 0;
    char* buf = reinterpret_cast<char*>(io->buffer);
    rbd_image_t image = h->image;
    switch (io->op) {
      case BlockIo::Op::Read: rc = rbd_aio_read(image, io->offset, io->length, buf, c); break;
      case BlockIo::Op::Write: rc = rbd_aio_write(image, io->offset, io->length, buf, c); break;
      case BlockIo::Op::Flush: rc = rbd_aio_flush(image, c); break;
      case BlockIo::Op::WriteZeroes: rc = rbd_aio_write_zeroes(image, io->offset, io->length, c, 0, 0); break;
      case BlockIo::Op::Deallocate: rc = rbd_aio_discard(image, io->offset, io->length, c); break;
      case BlockIo::Op::CompareAndWrite:
        // One operation at the OSD that holds the object: atomic against every client of the
        // image, other gateways included. librbd answers EILSEQ on a mismatch.
        rc = int(rbd_aio_compare_and_write(image, io->offset, io->length, reinterpret_cast<const char*>(io->compare),
                                           buf, c, &io->remote.mismatch_offset, 0));
        break;
    }
    if (rc < 0) {  // not queued: librbd will not call back
      rbd_aio_release(c);
      h->users.fetch_sub(1);
      log::warn("rbd {}: an operation could not be queued: {}", name_, std::strerror(-rc));
      io->done(io, rbd_status(rc));
    }
  }

 private:
  // The handle in use, counted as used before it is returned. A handle replaced meanwhile is
  // let go and the new one taken: once the reconnection has swapped handles and seen the old
  // one's count at zero, nothing issues through the old one again. Handles are never freed
  // before the device, so a count taken on one just replaced is still a count on live memory.
  ImageHandle* acquire() {
    for (;;) {
      ImageHandle* h = current_.load();
      h->users.fetch_add(1);
      if (current_.load() == h) return h;
      h->users.fetch_sub(1);
    }
  }
  void watch_header(ImageHandle& h) {
    // librbd tells its watchers when the image's header changes (a resize made with `rbd resize`
    // anywhere): only then does revalidate_size ask librbd, whose answer may have to read the
    // new header from the cluster. Without the watch it asks every time.
    int r = rbd_update_watch(h.image, &h.watch, &RbdDevice::on_header_update, this);
    h.watching = r == 0;
    watching_.store(h.watching);
    if (r < 0)
      log::warn("rbd {}: no watch on the image's header ({}): its size is read each time it is checked", name_,
                std::strerror(-r));
  }

  // The cluster has blocklisted this client (another client's librbd broke the image's lock
  // it held, or an administrator fenced it): every operation through it fails from now on.
  // Commands fail with a path error meanwhile (the host goes to another gateway), and a thread
  // of the device's own connects a new client and reopens the image, trying again until it can.
  void fenced(const ImageHandle* via) {
    if (via != current_.load() || recovering_.exchange(true)) return;
    log::warn("rbd {}: the cluster has fenced this gateway's client (blocklisted): reconnecting as a new client",
              name_);
    recovery_ = std::jthread([this](std::stop_token stop) { reconnect(stop); });
  }
  void reconnect(std::stop_token stop) {
    ImageHandle* old = current_.load();
    std::chrono::milliseconds delay{500};
    while (!stop.stop_requested()) {
      std::string err;
      uint64_t size = 0;
      auto cluster = spec_.cluster_name.empty() ? RadosCluster::connect(spec_, err)
                                                : shared_connection(spec_, err, old->cluster.get());
      auto h = cluster ? open_image(std::move(cluster), spec_, size, err) : nullptr;
      if (h) {
        watch_header(*h);
        ImageHandle* fresh = h.get();
        {
          std::lock_guard lk(handles_mu_);
          handles_.push_back(std::move(h));
        }
        current_.store(fresh);
        // What was issued through the old client fails soon (it is fenced): wait for it, then close.
        while (old->users.load() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        old->close();
        header_changed();  // the size is read again
        log::info("rbd {}: reconnected to the cluster as a new client: serving again", name_);
        break;
      }
      log::warn("rbd {}: reconnecting after the cluster fenced this gateway failed ({}): trying again in {} ms",
                name_, err, delay.count());
      std::mutex m;
      std::unique_lock lk(m);
      std::condition_variable_any().wait_for(lk, stop, delay, [] { return false; });
      delay = std::min(delay * 2, std::chrono::milliseconds(30'000));
    }
    recovering_.store(false);
  }

  // The device's own thread: reads the image's size when its header changed (librbd's watch says
  // so: a resize made anywhere), or once a second when there is no watch.
  void read_sizes(std::stop_token stop) {
    while (!stop.stop_requested()) {
      {
        std::unique_lock lk(size_mu_);
        size_cv_.wait_for(lk, stop, std::chrono::seconds(1), [this] { return header_changed_.load(); });
      }
      if (stop.stop_requested()) break;
      if (!header_changed_.exchange(false, std::memory_order_acq_rel) && watching_.load()) continue;
      ImageHandle* h = acquire();
      uint64_t have = 0;
      int r = rbd_get_size(h->image, &have);
      h->users.fetch_sub(1);
      if (r < 0) {
        log::warn("rbd {}: cannot read the image's size: {}", name_, std::strerror(-r));
        continue;
      }
      have -= have % bs_;
      if (have != 0) size_.store(have, std::memory_order_relaxed);
    }
  }
  void header_changed() {
    {
      std::lock_guard lk(size_mu_);  // the reader is either before its check or waiting: not woken in between
      header_changed_.store(true, std::memory_order_release);
    }
    size_cv_.notify_one();
  }
  static void on_header_update(void* arg) { static_cast<RbdDevice*>(arg)->header_changed(); }
  static void on_librbd_thread(rbd_completion_t c, void* arg) {
    auto* io = static_cast<BlockIo*>(arg);
    io->remote.result = rbd_aio_get_return_value(c);
    rbd_aio_release(c);
    static_cast<ImageHandle*>(io->remote.via)->users.fetch_sub(1);
    io->reactor->complete_from_any_thread(&io->remote);
  }
  static void on_reactor(reactor::RemoteCompletion* self) {
    BlockIo* io = static_cast<BlockIo::Remote*>(self)->io;
    const int64_t res = io->remote.result;
    auto* dev = static_cast<RbdDevice*>(io->device);
    if (io->op == BlockIo::Op::CompareAndWrite && res == -EILSEQ) {
      io->done(io, nvme::sc::CompareFailure);  // the host's answer, not a fault: not logged
      return;
    }
    if (io->op == BlockIo::Op::CompareAndWrite && res == -EINVAL) {
      // librbd does a compare-and-write within one object of the image only.
      log::warn("rbd {}: compare and write of {} bytes at {} refused (EINVAL): it crosses an object boundary",
                dev->name_, io->length, io->offset);
      io->done(io, nvme::sc::InvalidField);
      return;
    }
    if (res == -ESHUTDOWN) dev->fenced(static_cast<const ImageHandle*>(io->remote.via));
    if (res < 0) {
      log::warn("rbd {}: {} of {} bytes at {} failed: {}", dev->name_, rbd_op_name(io->op), io->length, io->offset,
                std::strerror(int(-res)));
    } else if (io->op == BlockIo::Op::Read) {
      io->read_data = io->buffer;
    }
    io->done(io, rbd_status(res));
  }

  const RbdSpec spec_;
  const std::string name_;  // pool/image, for the log
  const std::string identity_;  // image_identity: fsid, pool ID, image ID
  std::atomic<uint64_t> size_;
  const uint32_t bs_;
  std::atomic<bool> header_changed_{false};
  std::atomic<bool> watching_{false};  // the current handle has a watch on the header
  std::atomic<ImageHandle*> current_{nullptr};
  std::mutex handles_mu_;
  std::vector<std::unique_ptr<ImageHandle>> handles_;  // every handle the device had, current_ among them
  std::atomic<bool> recovering_{false};
  std::mutex size_mu_;
  std::condition_variable_any size_cv_;
  std::jthread recovery_;     // stopped and joined before the rest goes
  std::jthread size_reader_;  // last: stopped and joined first
};

}  // namespace

bool rbd_available() { return true; }

std::unique_ptr<BlockDevice> make_rbd(const RbdSpec& spec, uint32_t block_size, std::string& err) {
  if (spec.pool.empty() || spec.image.empty()) {
    err = "an RBD namespace needs a pool and an image";
    return nullptr;
  }
  auto cluster = spec.cluster_name.empty() ? RadosCluster::connect(spec, err) : shared_connection(spec, err);
  if (!cluster) return nullptr;
  uint64_t size = 0;
  auto h = open_image(std::move(cluster), spec, size, err);
  if (!h) return nullptr;
  if (size < block_size) {
    err = fmt::format("RBD image {}/{} is smaller than one {}-byte block", spec.pool, spec.image, block_size);
    return nullptr;
  }
  std::string identity = image_identity(*h, spec.pool + "/" + spec.image, err);
  if (identity.empty()) return nullptr;
  size -= size % block_size;
  log::info("rbd {}/{}: {} bytes, {}-byte blocks", spec.pool, spec.image, size, block_size);
  return std::make_unique<RbdDevice>(spec, std::move(h), std::move(identity), size, block_size);
}

}  // namespace nvtcp::backend
