// SPDX-License-Identifier: Apache-2.0
// A TCP proxy for tests that injects transport faults between a host and a target: cut a
// connection after exactly N bytes, split every byte into its own write(), hold each chunk
// for a while, stop reading one direction (the TCP window fills), cut everything, refuse
// new connections. One thread, poll() over non-blocking sockets.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace nvtcp::test {

enum class Direction { ToTarget, ToHost };  // host->target bytes, target->host bytes

class FaultProxy {
 public:
  // Listens on 127.0.0.1 (ephemeral port) and forwards each accepted connection to
  // 127.0.0.1:upstream_port. Runs on its own thread. Throws std::runtime_error on setup failure.
  explicit FaultProxy(uint16_t upstream_port);
  ~FaultProxy();  // closes everything, joins the thread
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  uint16_t port() const { return port_; }
  void set_upstream_port(uint16_t p);  // for connections accepted from now on

  // Faults. conn = index of the connection in accept order (0 = first ever accepted), or -1 =
  // every connection, present and future. A fault set for an index not yet accepted applies
  // when that connection arrives.
  void drop_after(int conn, Direction d, uint64_t bytes);  // forward `bytes` bytes in d, then close both sides
  void split_every_byte(int conn, bool on);                // forward one byte per write(), both directions
  void delay(int conn, Direction d, uint32_t us);          // hold each chunk us microseconds before forwarding
  void stall(int conn, Direction d, bool on);              // stop reading from the source side
  void cut_all();                                          // close every live connection now (returns once done)
  void refuse(bool on);                                    // accept and immediately close new connections

  size_t accepted() const;
  size_t live() const;
  uint64_t bytes(int conn, Direction d) const;  // forwarded so far (0 for an unknown index)

  // Waits until pred(*this) holds or timeout_ms passes; returns the last value of pred.
  template <class Pred>
  bool wait_until(Pred pred, int timeout_ms) const;

 private:
  static constexpr uint64_t kNoLimit = ~0ull;
  struct Faults {
    uint64_t drop_after[2] = {kNoLimit, kNoLimit};
    uint32_t delay_us[2] = {0, 0};
    bool stall[2] = {false, false};
    bool split = false;
  };
  struct Chunk {
    uint64_t ready_ns = 0;
    std::unique_ptr<uint8_t[]> data;  // not zero-filled: it is overwritten by recv()
    size_t len = 0;
    size_t off = 0;
  };
  struct Flow {             // one direction of one connection
    std::deque<Chunk> queue;
    size_t buffered = 0;    // bytes read but not yet written
    uint64_t read = 0;      // bytes read from the source so far
    bool eof = false;       // the source sent FIN
    bool shut = false;      // FIN passed on to the destination
  };
  struct Conn {
    int index = 0;
    int host_fd = -1, target_fd = -1;
    bool connecting = true;
    Faults faults;
    Flow flow[2];
    std::atomic<uint64_t>* forwarded = nullptr;  // [2], lives in stats_
  };
  void run();
  void accept_new();
  void close_conn(Conn& c);
  bool pump_read(Conn& c, int d, uint64_t now);
  bool pump_write(Conn& c, int d, uint64_t now);
  template <class Fn>
  void set_fault(int conn, Fn fn);
  void wake();

  int listen_fd_ = -1;
  int wake_fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  uint16_t upstream_port_;
  bool refuse_ = false;
  Faults defaults_;
  std::map<int, Faults> future_;       // faults for connections not accepted yet
  std::vector<std::unique_ptr<Conn>> conns_;  // live; touched by the thread, faults under mu_
  std::deque<std::atomic<uint64_t>> stats_;   // 2 per connection ever accepted
  size_t accepted_ = 0;
  size_t live_ = 0;
  uint64_t cut_requested_ = 0, cut_done_ = 0;
};

template <class Pred>
bool FaultProxy::wait_until(Pred pred, int timeout_ms) const {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    if (pred(*this)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred(*this);
}

}  // namespace nvtcp::test
