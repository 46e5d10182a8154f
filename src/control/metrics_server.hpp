// SPDX-License-Identifier: Apache-2.0
// The metrics endpoint (the target's --metrics-listen ADDR:PORT): HTTP/1.1 on TCP, GET /metrics
// answered with Prometheus' text exposition (Content-Type text/plain; version=0.0.4), on the
// control plane's serving loop (PollServer: one thread, never a reactor). Other paths get 404,
// other methods 405, a request that is not HTTP 400, one whose head is over the limit 431; each
// of those closes its connection. Keep-alive as HTTP/1.1 has it, pipelined requests answered in
// order; a client that makes no progress for idle_timeout_ms (sends nothing, takes nothing) is
// closed, one whose request head is not whole request_timeout_ms after it began gets 408, and
// when every slot is taken a new client takes the slot of the one whose request has been
// unfinished longest: clients that trickle bytes cannot keep the slots from scrapers.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "control/poll_server.hpp"

namespace nvtcp::control {

struct MetricsServerOptions {
  size_t max_request_bytes = 8192;      // a request's head (line and headers)
  size_t max_clients = 16;
  size_t max_unsent_bytes = 64u << 20;  // a few pages of metrics a client has not read
  uint32_t idle_timeout_ms = 10000;
  // The whole head of a request, from the connection's accept (or the request's first byte on
  // a kept-alive one): a scraper sends it at once, so this is long for it and short for a
  // client that sends a byte every few seconds to hold a slot.
  uint32_t request_timeout_ms = 5000;
  std::function<uint64_t()> clock;  // milliseconds, monotonic (empty: CLOCK_MONOTONIC); for tests
};

// What one metrics scrape answers with: the exposition, made when it is asked for.
using RenderMetrics = std::function<std::string()>;

// One client's HTTP conversation, apart from the socket (tests feed it bytes).
class MetricsHttpSession final : public PollServer::Session {
 public:
  // one_at_a_time: each on_bytes() answers at most one request and keeps the rest for the next
  // call (pending()), so that a client that sends many requests at once is rendered one answer
  // per answer it takes (the server's one_answer_at_a_time); else every complete request.
  MetricsHttpSession(const RenderMetrics& render, size_t max_request_bytes, std::atomic<uint64_t>* scrapes = nullptr,
                     bool one_at_a_time = false)
      : render_(render), max_request_bytes_(max_request_bytes), scrapes_(scrapes), one_at_a_time_(one_at_a_time) {}
  bool on_bytes(const char* data, size_t len, std::string& out) override;
  bool pending() const override;
  bool partial() const override;
  void on_request_timeout(std::string& out) override;

 private:
  // One request's head (without its blank line): its answer goes to out; false to close.
  bool answer(std::string_view head, std::string& out);
  const RenderMetrics& render_;
  size_t max_request_bytes_;
  std::atomic<uint64_t>* scrapes_;
  bool one_at_a_time_;
  std::string in_;
};

class MetricsServer {
 public:
  explicit MetricsServer(RenderMetrics render, MetricsServerOptions opts = {});
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Listens on ADDR:PORT ("127.0.0.1:9100", "[::1]:9100", "0.0.0.0:0": port 0 takes a free one)
  // and starts serving. Returns an error or empty.
  std::string start(const std::string& address);
  void stop();
  uint16_t port() const { return port_; }
  // ADDR:PORT as bound (the port really taken).
  const std::string& address() const { return address_; }
  uint64_t scrapes() const { return scrapes_.load(std::memory_order_relaxed); }
  uint64_t clients_refused() const { return server_.clients_refused(); }
  uint64_t clients_evicted() const { return server_.clients_evicted(); }
  uint64_t requests_timed_out() const { return server_.requests_timed_out(); }

 private:
  RenderMetrics render_;
  MetricsServerOptions opts_;
  PollServer server_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::string address_;
  std::atomic<uint64_t> scrapes_{0};
};

}  // namespace nvtcp::control
