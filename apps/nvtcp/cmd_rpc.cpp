// SPDX-License-Identifier: Apache-2.0
// `nvtcp rpc METHOD [--name value ... | JSON]`: one JSON-RPC call to a running target's control
// socket, its result printed as JSON (exit 0) or its error on stderr (exit 1). Parameters are
// named as the method names them (dashes read as underscores); a value is a string unless it
// is true, false, an integer or JSON text ({...}, [...]), and a dotted name builds a nested
// object: --listen-address.traddr 127.0.0.1 is {"listen_address": {"traddr": "127.0.0.1"}}.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "commands.hpp"
#include "control/json_rpc.hpp"

namespace nvtcp::app {
namespace {

using control::Json;

Json value_of(const std::string& text) {
  if (text == "true") return true;
  if (text == "false") return false;
  if (!text.empty() && (text[0] == '{' || text[0] == '[')) {
    Json j = Json::parse(text, nullptr, false);
    if (!j.is_discarded()) return j;
  }
  if (!text.empty() && text.size() < 20 && text.find_first_not_of("0123456789") == std::string::npos)
    return std::stoull(text);
  return text;
}

// The words after METHOD into params; false (with why) if they are neither one JSON object
// nor --name [value] pairs.
bool build_params(const std::vector<std::string>& words, Json& params, std::string& why) {
  params = Json::object();
  if (words.size() == 1 && !words[0].empty() && words[0][0] == '{') {
    params = Json::parse(words[0], nullptr, false);
    if (params.is_discarded() || !params.is_object()) {
      why = "the parameters are not a JSON object";
      return false;
    }
    return true;
  }
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w.rfind("--", 0) != 0 || w.size() == 2) {
      why = fmt::format("'{}': parameters are --name value pairs or one JSON object", w);
      return false;
    }
    std::string name = w.substr(2);
    Json value = true;  // a flag
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = value_of(name.substr(eq + 1));
      name.resize(eq);
    } else if (i + 1 < words.size() && words[i + 1].rfind("--", 0) != 0) {
      value = value_of(words[++i]);
    }
    for (char& c : name)
      if (c == '-') c = '_';
    Json* at = &params;
    size_t start = 0;
    for (size_t dot; (dot = name.find('.', start)) != std::string::npos; start = dot + 1) {
      Json& next = (*at)[name.substr(start, dot - start)];
      if (next.is_null()) next = Json::object();
      if (!next.is_object()) {
        why = fmt::format("--{}: '{}' is not an object", w.substr(2), name.substr(0, dot));
        return false;
      }
      at = &next;
    }
    (*at)[name.substr(start)] = std::move(value);
  }
  return true;
}

int call(const std::string& path, const std::string& method, const Json& params, double timeout_s) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof(sa.sun_path)) {
    fmt::print(stderr, "nvtcp rpc: socket path too long: {}\n", path);
    return 1;
  }
  std::memcpy(sa.sun_path, path.data(), path.size());
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    fmt::print(stderr, "nvtcp rpc: cannot connect to {}: {} (is a target running with --rpc-socket {}?)\n", path,
               std::strerror(errno), path);
    if (fd >= 0) ::close(fd);
    return 1;
  }
  Json req{{"jsonrpc", "2.0"}, {"method", method}, {"id", 1}};
  if (!params.empty()) req["params"] = params;
  const std::string out = req.dump() + "\n";
  for (size_t off = 0; off < out.size();) {
    ssize_t n = ::send(fd, out.data() + off, out.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      fmt::print(stderr, "nvtcp rpc: send: {}\n", std::strerror(errno));
      ::close(fd);
      return 1;
    }
    off += size_t(n);
  }
  control::JsonTextSplitter split(64u << 20);
  std::string text, why;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    auto next = split.next(text, why);
    if (next == control::JsonTextSplitter::Next::Text) break;
    if (next == control::JsonTextSplitter::Next::Error) {
      fmt::print(stderr, "nvtcp rpc: the answer is not JSON: {}\n", why);
      ::close(fd);
      return 1;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) == 0) {
      fmt::print(stderr, "nvtcp rpc: no answer within {} s\n", timeout_s);
      ::close(fd);
      return 1;
    }
    char buf[65536];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      fmt::print(stderr, "nvtcp rpc: the target closed the connection before answering\n");
      ::close(fd);
      return 1;
    }
    split.feed(buf, size_t(n));
  }
  ::close(fd);
  Json answer = Json::parse(text, nullptr, false);
  if (answer.is_discarded() || !answer.is_object()) {
    fmt::print(stderr, "nvtcp rpc: the answer is not a JSON-RPC response\n");
    return 1;
  }
  if (auto e = answer.find("error"); e != answer.end()) {
    fmt::print(stderr, "nvtcp rpc: {}: error {}: {}\n", method, e->value("code", 0), e->value("message", std::string()));
    return 1;
  }
  fmt::print("{}\n", answer.value("result", Json()).dump(2));
  return 0;
}

}  // namespace

void add_rpc_command(CLI::App& app, int& rc) {
  auto* c = app.add_subcommand("rpc", "call a method of a running target's JSON-RPC control socket (SPDK's method names)");
  auto socket = std::make_shared<std::string>("/run/nvtcp/target.sock");
  auto timeout = std::make_shared<double>(60.0);
  c->add_option("--socket,-s", *socket, "the target's --rpc-socket (default /run/nvtcp/target.sock)");
  c->add_option("--timeout,-t", *timeout, "seconds to wait for the answer (default 60)");
  c->footer(
      "Usage: nvtcp rpc [-s SOCKET] METHOD [--name value ... | '{JSON}']\n"
      "Examples:\n"
      "  nvtcp rpc rpc_get_methods\n"
      "  nvtcp rpc nvmf_get_subsystems\n"
      "  nvtcp rpc nvmf_subsystem_add_host --nqn nqn.2026-11.io.nvtcp:default --host nqn.2014-08.org.nvmexpress:uuid:...");
  c->fallthrough(false);
  c->prefix_command();  // METHOD and everything after it are the call's, not nvtcp's
  c->callback([c, socket, timeout, &rc] {
    std::vector<std::string> words = c->remaining();
    if (words.empty()) {
      fmt::print(stderr, "nvtcp rpc: which method? (nvtcp rpc rpc_get_methods lists them)\n");
      rc = 2;
      return;
    }
    const std::string method = words.front();
    words.erase(words.begin());
    Json params;
    std::string why;
    if (!build_params(words, params, why)) {
      fmt::print(stderr, "nvtcp rpc: {}\n", why);
      rc = 2;
      return;
    }
    rc = call(*socket, method, params, *timeout);
  });
}

}  // namespace nvtcp::app
