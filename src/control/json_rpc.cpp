// SPDX-License-Identifier: Apache-2.0
#include "control/json_rpc.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace nvtcp::control {
namespace {

// Deeper nesting than any method takes; a bound keeps a hostile text from costing the parser
// (and the destructor of what it builds) a stack per level.
constexpr uint32_t kMaxDepth = 64;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace

JsonTextSplitter::Next JsonTextSplitter::next(std::string& text, std::string& why) {
  while (pos_ < buf_.size()) {
    const char c = buf_[pos_];
    if (!in_text_) {
      if (is_space(c)) {
        start_ = ++pos_;
        continue;
      }
      if (c != '{' && c != '[') {
        why = "a request must be a JSON object (or an array of them)";
        return Next::Error;
      }
      in_text_ = true;
      depth_ = 1;
      ++pos_;
      continue;
    }
    if (in_string_) {
      if (escaped_) escaped_ = false;
      else if (c == '\\') escaped_ = true;
      else if (c == '"') in_string_ = false;
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      if (++depth_ > kMaxDepth) {
        why = fmt::format("a request nested deeper than {} levels", kMaxDepth);
        return Next::Error;
      }
    } else if (c == '}' || c == ']') {
      if (--depth_ == 0) {
        ++pos_;
        text.assign(buf_, start_, pos_ - start_);
        in_text_ = false;
        start_ = pos_;
        if (start_ == buf_.size()) {
          buf_.clear();
          start_ = pos_ = 0;
        }
        return Next::Text;
      }
    }
    ++pos_;
    if (pos_ - start_ > max_text_) {
      why = fmt::format("a request over {} bytes", max_text_);
      return Next::Error;
    }
  }
  // Keep only the text being scanned, so a client sending many requests does not grow the
  // buffer by what it already had answered.
  if (start_ > 0) {
    buf_.erase(0, start_);
    pos_ -= start_;
    start_ = 0;
  }
  return Next::NeedMore;
}

namespace {
const Json& empty_object() {
  static const Json e = Json::object();
  return e;
}
}  // namespace

Params::Params(const Json& params) : params_(params.is_null() ? empty_object() : params) {
  if (params_.is_array() && params_.empty()) return;
  if (!params_.is_object()) throw RpcError(kInvalidParams, "parameters must be given by name (a JSON object)");
}

const Json* Params::take(const char* name) {
  read_.emplace_back(name);
  if (!params_.is_object()) return nullptr;
  auto it = params_.find(name);
  return it == params_.end() || it->is_null() ? nullptr : &*it;
}

std::optional<std::string> Params::opt_str(const char* name) {
  const Json* v = take(name);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw RpcError(kInvalidParams, fmt::format("\"{}\" must be a string", name));
  return v->get<std::string>();
}

std::string Params::str(const char* name) {
  auto v = opt_str(name);
  if (!v) throw RpcError(kInvalidParams, fmt::format("\"{}\" is required", name));
  return *v;
}

std::optional<uint64_t> Params::opt_u64(const char* name) {
  const Json* v = take(name);
  if (!v) return std::nullopt;
  if (!v->is_number_unsigned())
    throw RpcError(kInvalidParams, fmt::format("\"{}\" must be a non-negative integer", name));
  return v->get<uint64_t>();
}

uint64_t Params::u64(const char* name) {
  auto v = opt_u64(name);
  if (!v) throw RpcError(kInvalidParams, fmt::format("\"{}\" is required", name));
  return *v;
}

std::optional<bool> Params::opt_bool(const char* name) {
  const Json* v = take(name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) throw RpcError(kInvalidParams, fmt::format("\"{}\" must be true or false", name));
  return v->get<bool>();
}

const Json* Params::opt_json(const char* name) { return take(name); }

void Params::done() {
  if (!params_.is_object()) return;
  for (auto it = params_.begin(); it != params_.end(); ++it)
    if (std::find(read_.begin(), read_.end(), it.key()) == read_.end())
      throw RpcError(kInvalidParams, fmt::format("unknown parameter \"{}\"", it.key()));
}

Json rpc_error(const Json& id, int code, const std::string& message) {
  return Json{{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
}

std::vector<std::string> Dispatcher::names() const {
  std::vector<std::string> out;
  for (const auto& [name, h] : methods_) out.push_back(name);
  for (const auto& [name, h] : slow_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

std::string Dispatcher::parse_error(const std::string& why) {
  return dump(rpc_error(nullptr, kParseError, fmt::format("Parse error: {}", why)));
}

namespace {

// The answer to request id: what f returns as its result, or what it throws as an error.
template <class F>
Json answer_of(const Json& id, F&& f) {
  try {
    return Json{{"jsonrpc", "2.0"}, {"id", id}, {"result", f()}};
  } catch (const RpcError& e) {
    return rpc_error(id, e.code, e.what());
  } catch (const Json::exception& e) {
    // A parameter of a type the method did not expect, caught where it was read.
    return rpc_error(id, kInvalidParams, fmt::format("Invalid parameters: {}", e.what()));
  } catch (const std::exception& e) {
    return rpc_error(id, kInternalError, e.what());
  }
}

}  // namespace

SlowCommit Answering::run_blocking() {
  try {
    SlowCommit commit = work_();
    if (!commit) throw RpcError(kInternalError, fmt::format("{}: its blocking part gave no commit", method_));
    return commit;
  } catch (...) {
    return [e = std::current_exception()]() -> Json { std::rethrow_exception(e); };
  }
}

Json Dispatcher::call(const Json& req, Answering& a) {
  if (!req.is_object()) return rpc_error(nullptr, kInvalidRequest, "Invalid request: not an object");
  const auto id_it = req.find("id");
  const bool notification = id_it == req.end();
  Json id = notification ? Json(nullptr) : *id_it;
  if (!id.is_null() && !id.is_string() && !id.is_number_integer())
    return rpc_error(nullptr, kInvalidRequest, "Invalid request: \"id\" must be a string, an integer or null");
  // SPDK's server takes a request without "jsonrpc" too; one naming another version is refused.
  auto ver = req.find("jsonrpc");
  if (ver != req.end() && *ver != "2.0")
    return rpc_error(id, kInvalidRequest, "Invalid request: \"jsonrpc\" must be \"2.0\"");
  auto m = req.find("method");
  if (m == req.end() || !m->is_string())
    return rpc_error(id, kInvalidRequest, "Invalid request: \"method\" must be a string");
  for (auto it = req.begin(); it != req.end(); ++it)
    if (it.key() != "jsonrpc" && it.key() != "method" && it.key() != "params" && it.key() != "id")
      return rpc_error(id, kInvalidRequest, fmt::format("Invalid request: unknown member \"{}\"", it.key()));
  static const Json kNoParams;
  auto p = req.find("params");
  const Json& params = p == req.end() ? kNoParams : *p;
  if (!params.is_null() && !params.is_object() && !params.is_array())
    return rpc_error(id, kInvalidRequest, "Invalid request: \"params\" must be an object or an array");
  const std::string& name = m->get_ref<const std::string&>();
  Json answer;
  if (auto h = methods_.find(name); h != methods_.end()) {
    answer = answer_of(id, [&] { return h->second(params); });
  } else if (auto s = slow_.find(name); s != slow_.end()) {
    // Its checks now; if they pass, the answer waits for its blocking part and its commit.
    answer = answer_of(id, [&] {
      a.work_ = s->second(params);
      if (!a.work_) throw RpcError(kInternalError, fmt::format("{} gave no blocking part", name));
      return Json();
    });
    if (a.work_) {
      a.id_ = id;
      a.notification_ = notification;
      a.method_ = name;
      return Json();
    }
  } else {
    answer = rpc_error(id, kMethodNotFound, "Method not found");
  }
  return notification ? Json(nullptr) : answer;
}

void Dispatcher::advance(Answering& a) {
  const size_t n = a.batch_ ? a.text_.size() : 1;
  while (a.next_ < n) {
    const Json& req = a.batch_ ? a.text_[a.next_] : a.text_;
    ++a.next_;
    Json answer = call(req, a);
    if (a.work_) return;  // a slow method: the rest waits for its commit
    if (!answer.is_null()) a.answers_.push_back(std::move(answer));
  }
  if (!a.answers_.empty()) a.answer_ = dump(a.batch_ ? a.answers_ : a.answers_[0]);
  a.text_ = Json();
  a.answers_ = Json::array();
}

Answering Dispatcher::start(std::string_view text) {
  Answering a;
  Json req = Json::parse(text.begin(), text.end(), nullptr, false);
  if (req.is_discarded()) {
    a.answer_ = parse_error("not valid JSON");
  } else if (req.is_array() && req.empty()) {
    a.answer_ = dump(rpc_error(nullptr, kInvalidRequest, "Invalid request: an empty batch"));
  } else {
    a.batch_ = req.is_array();
    a.text_ = std::move(req);
    advance(a);
  }
  return a;
}

void Dispatcher::resume(Answering& a, const SlowCommit& commit) {
  a.work_ = nullptr;
  Json answer = answer_of(a.id_, commit);
  if (!a.notification_) a.answers_.push_back(std::move(answer));
  advance(a);
}

std::string Dispatcher::handle(std::string_view text) {
  Answering a = start(text);
  while (!a.done()) resume(a, a.run_blocking());
  return a.take_answer();
}

}  // namespace nvtcp::control
