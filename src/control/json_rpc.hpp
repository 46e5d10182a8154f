// SPDX-License-Identifier: Apache-2.0
// JSON-RPC 2.0 as SPDK's rpc.py speaks it over a stream socket: requests are JSON texts sent
// back to back (with or without whitespace between them), answered in order, each answer one
// JSON text. This file is the transport-free part: cutting a byte stream into texts, checking a
// request, finding its method and shaping the answer. Methods throw RpcError; a parameter of
// the wrong type or name ends as Invalid Params, never as a crash.
//
// A slow method (one that can wait on the network or a file: a Ceph cluster's connect, an open
// on a network file system) is split in three, so that its wait holds no other client up: its
// checks run on the server's thread and give its blocking part, which a worker thread runs and
// which gives its commit, which runs on the server's thread again and gives the result. What
// each part may touch is method_table.hpp's rule (SlowTargetMethod).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace nvtcp::control {

using Json = nlohmann::json;

// The codes JSON-RPC 2.0 reserves (section 5.1), and the one SPDK answers with when a method
// knows its parameters but cannot do what they ask (a name that does not exist, a duplicate).
enum RpcCode : int {
  kParseError = -32700,
  kInvalidRequest = -32600,
  kMethodNotFound = -32601,
  kInvalidParams = -32602,
  kInternalError = -32603,
  // SPDK's codes for a name that does not exist and one that does already (-ENODEV, -EEXIST).
  kNoSuchDevice = -19,
  kExists = -17,
  kBusy = -16,  // -EBUSY: the thing named is in the middle of another change, or the server stops
};

struct RpcError : std::runtime_error {
  int code;
  RpcError(int c, const std::string& message) : std::runtime_error(message), code(c) {}
};

// Cuts a byte stream into top-level JSON texts without parsing them: it follows nesting,
// strings and escapes only. A text must be an object or an array (what a JSON-RPC request or
// batch is); anything else at the top level, or a text longer than max_text, is an error after
// which the stream cannot be trusted (the server answers Parse Error and closes it).
class JsonTextSplitter {
 public:
  explicit JsonTextSplitter(size_t max_text) : max_text_(max_text) {}
  enum class Next { NeedMore, Text, Error };
  void feed(const char* data, size_t n) { buf_.append(data, n); }
  // The next whole text (into text), NeedMore, or Error (why says what was wrong).
  Next next(std::string& text, std::string& why);
  // Bytes received and not yet part of a whole text (a request cut short when the peer left).
  size_t pending() const { return buf_.size() - start_; }

 private:
  size_t max_text_;
  std::string buf_;
  size_t start_ = 0;   // where the text being scanned starts (or whitespace before it)
  size_t pos_ = 0;     // scanned up to here
  uint32_t depth_ = 0;
  bool in_text_ = false, in_string_ = false, escaped_ = false;
};

// A method's parameters, read by name with their types checked: a wrong type, a missing
// required name or a name the method does not know throws Invalid Params naming it (as SPDK's
// decoders refuse unknown names).
class Params {
 public:
  // params: the request's "params" (absent: null). A method without parameters accepts null,
  // {} and [].
  explicit Params(const Json& params);
  std::string str(const char* name);
  std::optional<std::string> opt_str(const char* name);
  uint64_t u64(const char* name);
  std::optional<uint64_t> opt_u64(const char* name);
  std::optional<bool> opt_bool(const char* name);
  // An object or array member as it is (nullptr when absent).
  const Json* opt_json(const char* name);
  // Every name given must have been read by now.
  void done();

 private:
  const Json* take(const char* name);
  const Json& params_;
  std::vector<std::string> read_;
};

// A slow method's parts (see the top of this file). Each may throw RpcError as a method does.
using SlowCommit = std::function<Json()>;                         // server's thread: the result
using SlowWork = std::function<SlowCommit()>;                     // a worker thread: the commit
using SlowHandler = std::function<SlowWork(const Json& params)>;  // server's thread: checks

class Dispatcher;

// One JSON text (a request or a batch) on its way to its answer. Its requests run in order; at
// a slow method it stops until that method's blocking part has run (run_blocking, on any one
// thread) and Dispatcher::resume has been given the commit. A batch is answered in order too:
// the requests after a slow one run once it is committed.
class Answering {
 public:
  bool done() const { return !work_; }
  // The answer to send once done (empty: notifications only).
  std::string take_answer() { return std::move(answer_); }
  // The slow method it waits on (for log lines).
  const std::string& method() const { return method_; }
  // Runs the blocking part of the slow method it waits on; what it throws becomes a commit that
  // throws it again, so it answers as any method's error.
  SlowCommit run_blocking();

 private:
  friend class Dispatcher;
  Json text_;  // the request or the batch, until answered
  bool batch_ = false;
  size_t next_ = 0;  // the next request to call (of a batch; 0 or 1 otherwise)
  Json answers_ = Json::array();
  Json id_;  // of the slow request it waits on
  bool notification_ = false;
  std::string method_;
  SlowWork work_;  // set while it waits on a slow method
  std::string answer_;
};

// Methods by name, and the one entry point from bytes to answer.
class Dispatcher {
 public:
  using Handler = std::function<Json(const Json& params)>;
  void add(const std::string& name, Handler h) {
    slow_.erase(name);
    methods_[name] = std::move(h);
  }
  // A slow method: a server runs its blocking part off its thread (RpcServer).
  void add_slow(const std::string& name, SlowHandler h) {
    methods_.erase(name);
    slow_[name] = std::move(h);
  }
  void remove(const std::string& name) {
    methods_.erase(name);
    slow_.erase(name);
  }
  std::vector<std::string> names() const;
  bool has(const std::string& name) const { return methods_.count(name) != 0 || slow_.count(name) != 0; }
  // One JSON text (a request or a batch) to the text to send back; empty when nothing is to be
  // sent (notifications only). A text that is not JSON answers Parse Error. Slow methods run
  // whole, here, on the caller's thread.
  std::string handle(std::string_view text);
  // The same in steps: runs the text's requests up to its first slow method (or to its end).
  Answering start(std::string_view text);
  // The blocking part of the slow method a waits on has run and gave commit: commits (on the
  // caller's thread: the one start was called on), then runs on as start does.
  void resume(Answering& a, const SlowCommit& commit);
  // Answers to send for a stream that cannot go on (see JsonTextSplitter::Next::Error).
  static std::string parse_error(const std::string& why);

 private:
  // One request's answer (null for a notification), or, for a slow method, null with a.work_
  // set: its blocking part.
  Json call(const Json& request, Answering& a);
  void advance(Answering& a);  // runs requests until a slow one, or answers
  std::map<std::string, Handler> methods_;
  std::map<std::string, SlowHandler> slow_;
};

Json rpc_error(const Json& id, int code, const std::string& message);

}  // namespace nvtcp::control
