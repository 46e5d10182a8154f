// SPDX-License-Identifier: Apache-2.0
// The serving loop the control plane's sockets share (the JSON-RPC socket, the metrics
// endpoint): one thread, never a reactor, serving every client of one listening socket
// through poll(), so a client that sends half a request and stops, sends garbage or never
// reads its answers holds up no other. What the bytes mean is a Session's business (one per
// client); the loop bounds the clients, the answers a client leaves unread and, when asked,
// how long a client may make no progress. A session may wait for work it handed to another
// thread (Session::waiting): that work's end comes back through post(), on the loop's thread.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace nvtcp::control {

struct PollServerOptions {
  std::string name = "server";          // in log lines ("RPC", "metrics")
  size_t max_clients = 16;              // more are closed at once (with a log line)
  size_t max_unsent_bytes = 16u << 20;  // answers a client has not read; over this it is closed
  // A client that neither sends nor takes a byte for this long is closed (0: never).
  uint32_t idle_timeout_ms = 0;
  // Read no more from a client until it has taken the answers it has, and ask its session for
  // the next answer to requests it already sent (Session::pending) only then; its socket's
  // send buffer is bounded too (kOneAnswerSendBuffer). A client that sends requests and never
  // reads costs the few answers the kernel holds, not one per request it sent.
  bool one_answer_at_a_time = false;
  // A client must send a whole request within this many ms (0: no limit), counted from its
  // accept for its first request and from the first byte of each later one; bytes that trickle
  // in do not restart it, as they restart idle_timeout_ms. Past it the session says why
  // (Session::on_request_timeout) and the client is closed. Without it a client that sends one
  // byte per idle_timeout_ms holds its slot for ever.
  uint32_t request_timeout_ms = 0;
  // When every slot is taken, a new client closes the one whose unfinished request began first
  // (the slowest to make a request), instead of being refused; clients being answered, or idle
  // between requests, keep their slots. Without it, max_clients clients that never finish a
  // request keep every other client out.
  bool evict_unfinished = false;
  // Milliseconds on a monotonic clock (empty: CLOCK_MONOTONIC); tests step their own. The loop
  // looks at it at least once a second while it has clients.
  std::function<uint64_t()> clock;
};

class PollServer {
 public:
  // One client's conversation.
  class Session {
   public:
    virtual ~Session() = default;
    // Bytes from the client; answers are appended to out. False: nothing more is read from
    // this client, and it is closed once out has been sent.
    virtual bool on_bytes(const char* data, size_t len, std::string& out) = 0;
    // The client closed its side (or the connection broke).
    virtual void on_gone() {}
    // Whether requests already received wait for an answer: with one_answer_at_a_time, the
    // server calls on_bytes(nullptr, 0, out) for the next one once out has all been taken.
    virtual bool pending() const { return false; }
    // Whether it holds the start of a request that is not whole yet.
    virtual bool partial() const { return false; }
    // The client did not finish its request within request_timeout_ms: append what to tell it
    // (it is closed after).
    virtual void on_request_timeout(std::string& /*out*/) {}
    // Whether it waits for work it handed off (a slow request) before it goes on: nothing more
    // is read from its client meanwhile (what it sends waits in its socket), no request of it
    // is timed and it is not closed for making no progress. A client that hangs up meanwhile is
    // closed (on_gone); the work's end, posted, then finds no session.
    virtual bool waiting() const { return false; }
  };
  // SO_SNDBUF of a client's socket with one_answer_at_a_time (the kernel doubles it).
  static constexpr int kOneAnswerSendBuffer = 256 * 1024;
  // A client, for post(): never reused while the server lives.
  using ClientId = uint64_t;
  using MakeSession = std::function<std::unique_ptr<Session>(ClientId)>;
  // Runs on the loop's thread with the session of the client posted for, and its answers to
  // append to; nullptr (and a string nobody sends) when that client is gone. False: as
  // on_bytes' false.
  using Posted = std::function<bool(Session* session, std::string& out)>;

  PollServer(PollServerOptions opts, MakeSession make);
  ~PollServer();
  PollServer(const PollServer&) = delete;
  PollServer& operator=(const PollServer&) = delete;

  // Serves listen_fd (listening, non-blocking; it stays the caller's) on a new thread.
  // Returns an error or empty.
  std::string start(int listen_fd);
  // Stops the thread and closes every client (what was posted before runs first).
  void stop();
  bool running() const { return thread_.joinable(); }
  // Whether the loop still turns (false once it has stopped, or ended on an error).
  bool serving() const { return serving_.load(std::memory_order_acquire); }
  // From any thread while the server runs, never once stop() has begun (the caller waits for
  // its threads first): fn runs on the loop's thread at its next turn, or in stop() on the
  // caller's thread when the loop ended first (on an error).
  void post(ClientId client, Posted fn);
  // Clients connected now.
  size_t clients() const { return clients_now_.load(std::memory_order_relaxed); }
  uint64_t clients_refused() const { return refused_.load(std::memory_order_relaxed); }
  // Clients closed for a new one (evict_unfinished) or past request_timeout_ms.
  uint64_t clients_evicted() const { return evicted_.load(std::memory_order_relaxed); }
  uint64_t requests_timed_out() const { return timed_out_.load(std::memory_order_relaxed); }

 private:
  struct Client;
  void loop();
  int poll_timeout(const std::list<Client>& clients) const;
  // One client's turn after poll (revents: what poll saw); false: close it.
  bool serve(Client& c, short revents, uint64_t now);
  void accept_clients(std::list<Client>& clients);
  // Runs what was posted; clients whose conversation ends there are closed.
  void run_posted(std::list<Client>& clients);
  bool on_readable(Client& c);
  bool answer_due(const Client& c) const;
  bool flush(Client& c);
  void track_request(Client& c);
  uint64_t now_ms() const;

  PollServerOptions opts_;
  MakeSession make_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> serving_{false};
  std::atomic<size_t> clients_now_{0};
  ClientId next_client_ = 0;  // the loop's
  std::mutex posted_mu_;
  std::vector<std::pair<ClientId, Posted>> posted_;
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> evicted_{0};
  std::atomic<uint64_t> timed_out_{0};
};

}  // namespace nvtcp::control
