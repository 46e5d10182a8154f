// SPDX-License-Identifier: Apache-2.0
#include "control/metrics_server.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "reactor/tcp_stream.hpp"
#include "target/config.hpp"
#include "util/log.hpp"

namespace nvtcp::control {

namespace {

constexpr std::string_view kExpositionType = "text/plain; version=0.0.4; charset=utf-8";

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

void respond(std::string& out, int code, std::string_view reason, std::string_view type, std::string_view body,
             bool close, bool head_only, std::string_view extra = {}) {
  out += fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}{}\r\n", code, reason, type,
                     body.size(), extra, close ? "Connection: close\r\n" : "");
  if (!head_only) out += body;
}

void error(std::string& out, int code, std::string_view reason, std::string_view extra = {}) {
  respond(out, code, reason, "text/plain; charset=utf-8", fmt::format("{} {}\n", code, reason), true, false, extra);
}

}  // namespace

namespace {
// Where the first request head in `in` ends (npos: none is whole yet) and how long its blank
// line is. A head ends with an empty line; clients that send bare LFs are served too.
size_t head_end(const std::string& in, size_t& skip) {
  size_t end = in.find("\r\n\r\n");
  skip = 4;
  if (const size_t lf = in.find("\n\n"); lf != std::string::npos && (end == std::string::npos || lf < end)) {
    end = lf;
    skip = 2;
  }
  return end;
}
}  // namespace

bool MetricsHttpSession::pending() const {
  size_t skip = 0;
  return head_end(in_, skip) != std::string::npos;
}

bool MetricsHttpSession::partial() const { return !in_.empty() && !pending(); }

void MetricsHttpSession::on_request_timeout(std::string& out) { error(out, 408, "Request Timeout"); }

bool MetricsHttpSession::on_bytes(const char* data, size_t len, std::string& out) {
  if (len) in_.append(data, len);
  for (bool answered = false;; answered = true) {
    size_t skip = 0;
    const size_t end = head_end(in_, skip);
    if (end != std::string::npos && answered && one_at_a_time_) return true;  // the next one when this is taken
    if (end == std::string::npos) {
      if (in_.size() > max_request_bytes_) {
        error(out, 431, "Request Header Fields Too Large");
        return false;
      }
      return true;
    }
    if (end > max_request_bytes_) {
      error(out, 431, "Request Header Fields Too Large");
      return false;
    }
    const bool keep = answer(std::string_view(in_).substr(0, end), out);
    in_.erase(0, end + skip);
    if (!keep) return false;
  }
}

bool MetricsHttpSession::answer(std::string_view head, std::string& out) {
  const size_t eol = head.find('\n');
  const std::string_view line = trim(head.substr(0, eol));
  // METHOD SP TARGET SP HTTP/1.x
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    error(out, 400, "Bad Request");
    return false;
  }
  const std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                         version = line.substr(sp2 + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    error(out, 400, "Bad Request");
    return false;
  }
  bool close = version == "HTTP/1.0";
  bool body = false;
  std::string_view rest = eol == std::string_view::npos ? std::string_view{} : head.substr(eol + 1);
  while (!rest.empty()) {
    const size_t e = rest.find('\n');
    const std::string_view h = trim(rest.substr(0, e));
    rest = e == std::string_view::npos ? std::string_view{} : rest.substr(e + 1);
    const size_t colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      error(out, 400, "Bad Request");
      return false;
    }
    const std::string_view name = h.substr(0, colon), value = trim(h.substr(colon + 1));
    if (iequals(name, "Connection")) {
      if (iequals(value, "close")) close = true;
      else if (iequals(value, "keep-alive")) close = false;
    } else if ((iequals(name, "Content-Length") && value != "0") || iequals(name, "Transfer-Encoding")) {
      body = true;
    }
  }
  // No request here carries a body: one that says it does is not read, and the connection ends.
  if (body) {
    error(out, 400, "Bad Request");
    return false;
  }
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only) {
    error(out, 405, "Method Not Allowed", "Allow: GET, HEAD\r\n");
    return false;
  }
  const std::string_view path = target.substr(0, target.find('?'));
  if (path != "/metrics") {
    error(out, 404, "Not Found");
    return false;
  }
  if (scrapes_) scrapes_->fetch_add(1, std::memory_order_relaxed);
  respond(out, 200, "OK", kExpositionType, render_(), close, head_only);
  return !close;
}

MetricsServer::MetricsServer(RenderMetrics render, MetricsServerOptions opts)
    : render_(std::move(render)),
      opts_(opts),
      server_({.name = "metrics",
               .max_clients = opts.max_clients,
               .max_unsent_bytes = opts.max_unsent_bytes,
               .idle_timeout_ms = opts.idle_timeout_ms,
               .one_answer_at_a_time = true,
               .request_timeout_ms = opts.request_timeout_ms,
               .evict_unfinished = true,
               .clock = opts.clock},
              [this](PollServer::ClientId) {
                return std::make_unique<MetricsHttpSession>(render_, opts_.max_request_bytes, &scrapes_, true);
              }) {}

MetricsServer::~MetricsServer() { stop(); }

std::string MetricsServer::start(const std::string& address) {
  target::ListenerConfig where;
  if (!target::parse_listener(address, where)) return fmt::format("metrics address '{}' is not ADDRESS:PORT", address);
  reactor::Endpoint ep;
  std::string err;
  if (!reactor::resolve(where.address, where.port, ep, err)) return fmt::format("metrics address {}: {}", address, err);
  const int fd = reactor::listen_on(ep, 64);
  if (fd < 0) return fmt::format("cannot listen for metrics on {}: {}", address, std::strerror(-fd));
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                        : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  address_ = where.address.find(':') != std::string::npos ? fmt::format("[{}]:{}", where.address, port_)
                                                         : fmt::format("{}:{}", where.address, port_);
  if (std::string e = server_.start(fd); !e.empty()) {
    ::close(fd);
    return e;
  }
  listen_fd_ = fd;
  return {};
}

void MetricsServer::stop() {
  server_.stop();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

}  // namespace nvtcp::control
