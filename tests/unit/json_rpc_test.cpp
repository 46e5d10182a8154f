// SPDX-License-Identifier: Apache-2.0
// The JSON-RPC layer without a socket: cutting a stream into texts the way SPDK's rpc.py
// sends them (back to back, pretty-printed, split anywhere), and the answers JSON-RPC 2.0
// requires for good and bad requests; slow methods run in their three parts, in order.
#include <gtest/gtest.h>

#include <algorithm>

#include "control/json_rpc.hpp"

namespace nvtcp::control::json_rpc_test {
namespace {

std::vector<std::string> split_all(JsonTextSplitter& s, const std::string& bytes, size_t chunk) {
  std::vector<std::string> out;
  std::string text, why;
  for (size_t off = 0; off < bytes.size(); off += chunk) {
    s.feed(bytes.data() + off, std::min(chunk, bytes.size() - off));
    while (s.next(text, why) == JsonTextSplitter::Next::Text) out.push_back(text);
  }
  return out;
}

TEST(JsonTextSplitter, FindsTextsBackToBackWhateverTheReadSizes) {
  const std::string a = "{\n  \"jsonrpc\": \"2.0\",\n  \"method\": \"x\",\n  \"id\": 1\n}";
  const std::string b = R"({"s":"a } ] { [ \" \\","n":[1,{"m":2}]})";
  const std::string c = "[{\"id\":2}]";
  const std::string stream = a + b + "\n \t" + c + "\r\n";
  for (size_t chunk : {1u, 2u, 7u, 64u, 4096u}) {
    JsonTextSplitter s(1 << 20);
    auto texts = split_all(s, stream, chunk);
    ASSERT_EQ(texts.size(), 3u) << "chunk " << chunk;
    EXPECT_EQ(texts[0], a);
    EXPECT_EQ(texts[1], b);
    EXPECT_EQ(texts[2], c);
    EXPECT_EQ(s.pending(), 0u);
  }
}

TEST(JsonTextSplitter, AHalfTextWaitsAndIsCountedAsPending) {
  JsonTextSplitter s(1 << 20);
  std::string text, why;
  s.feed("{\"a\":\"}", 7);
  EXPECT_EQ(s.next(text, why), JsonTextSplitter::Next::NeedMore);
  EXPECT_EQ(s.pending(), 7u);
  s.feed("\"}", 2);
  EXPECT_EQ(s.next(text, why), JsonTextSplitter::Next::Text);
  EXPECT_EQ(text, "{\"a\":\"}\"}");
}

TEST(JsonTextSplitter, RefusesWhatIsNotARequestOrTooLongOrTooDeep) {
  std::string text, why;
  {
    JsonTextSplitter s(1 << 20);
    s.feed("hello", 5);
    EXPECT_EQ(s.next(text, why), JsonTextSplitter::Next::Error);
    EXPECT_NE(why.find("JSON object"), std::string::npos) << why;
  }
  {
    JsonTextSplitter s(100);
    std::string big = "{\"a\":\"" + std::string(200, 'x');
    s.feed(big.data(), big.size());
    EXPECT_EQ(s.next(text, why), JsonTextSplitter::Next::Error);
    EXPECT_NE(why.find("100 bytes"), std::string::npos) << why;
  }
  {
    JsonTextSplitter s(1 << 20);
    std::string deep(1000, '[');
    s.feed(deep.data(), deep.size());
    EXPECT_EQ(s.next(text, why), JsonTextSplitter::Next::Error);
    EXPECT_NE(why.find("deeper"), std::string::npos) << why;
  }
}

Dispatcher test_methods() {
  Dispatcher d;
  d.add("echo", [](const Json& params) {
    Params p(params);
    Json out{{"name", p.str("name")}};
    if (auto n = p.opt_u64("count")) out["count"] = *n;
    if (auto b = p.opt_bool("flag")) out["flag"] = *b;
    p.done();
    return out;
  });
  d.add("fails", [](const Json&) -> Json { throw RpcError(kNoSuchDevice, "No such device"); });
  return d;
}

Json answer(Dispatcher& d, const std::string& text) {
  std::string a = d.handle(text);
  return a.empty() ? Json() : Json::parse(a);
}

TEST(Dispatcher, AnswersARequestWithItsIdOfEitherType) {
  Dispatcher d = test_methods();
  Json a = answer(d, R"({"jsonrpc":"2.0","method":"echo","id":7,"params":{"name":"x","count":3}})");
  EXPECT_EQ(a["jsonrpc"], "2.0");
  EXPECT_EQ(a["id"], 7);
  EXPECT_EQ(a["result"], (Json{{"name", "x"}, {"count", 3}}));
  a = answer(d, R"({"jsonrpc":"2.0","method":"echo","id":"abc","params":{"name":"y"}})");
  EXPECT_EQ(a["id"], "abc");
  EXPECT_FALSE(a.contains("error"));
}

TEST(Dispatcher, BadRequestsGetTheirCodes) {
  Dispatcher d = test_methods();
  EXPECT_EQ(answer(d, "{\"jsonrpc\":\"2.0\",")["error"]["code"], kParseError);
  EXPECT_EQ(answer(d, R"({"jsonrpc":"1.0","method":"echo","id":1})")["error"]["code"], kInvalidRequest);
  EXPECT_EQ(answer(d, R"({"jsonrpc":"2.0","method":5,"id":1})")["error"]["code"], kInvalidRequest);
  EXPECT_EQ(answer(d, R"({"jsonrpc":"2.0","method":"echo","id":{"a":1}})")["error"]["code"], kInvalidRequest);
  EXPECT_EQ(answer(d, R"({"jsonrpc":"2.0","method":"echo","id":1,"params":"x"})")["error"]["code"], kInvalidRequest);
  EXPECT_EQ(answer(d, R"({"jsonrpc":"2.0","method":"echo","id":1,"extra":0})")["error"]["code"], kInvalidRequest);
  EXPECT_EQ(answer(d, "[]")["error"]["code"], kInvalidRequest);
  Json a = answer(d, R"({"jsonrpc":"2.0","method":"nope","id":1})");
  EXPECT_EQ(a["error"]["code"], kMethodNotFound);
  EXPECT_EQ(a["id"], 1);
}

TEST(Dispatcher, ParametersOfTheWrongTypeOrNameAreInvalidParams) {
  Dispatcher d = test_methods();
  auto code = [&](const std::string& params) {
    return answer(d, R"({"jsonrpc":"2.0","method":"echo","id":1,"params":)" + params + "}")["error"]["code"];
  };
  EXPECT_EQ(code(R"({})"), kInvalidParams);                          // name missing
  EXPECT_EQ(code(R"({"name":5})"), kInvalidParams);                  // not a string
  EXPECT_EQ(code(R"({"name":"x","count":-1})"), kInvalidParams);     // not unsigned
  EXPECT_EQ(code(R"({"name":"x","count":"3"})"), kInvalidParams);
  EXPECT_EQ(code(R"({"name":"x","flag":1})"), kInvalidParams);
  EXPECT_EQ(code(R"({"name":"x","colour":"red"})"), kInvalidParams);  // unknown name
  EXPECT_EQ(code(R"(["x"])"), kInvalidParams);                       // positional
  Json a = answer(d, R"({"jsonrpc":"2.0","method":"fails","id":1})");
  EXPECT_EQ(a["error"]["code"], kNoSuchDevice);
  EXPECT_EQ(a["error"]["message"], "No such device");
}

TEST(Dispatcher, NotificationsAreNotAnsweredAndBatchesAnswerTheRest) {
  Dispatcher d = test_methods();
  EXPECT_EQ(d.handle(R"({"jsonrpc":"2.0","method":"echo","params":{"name":"x"}})"), "");
  EXPECT_EQ(d.handle(R"({"jsonrpc":"2.0","method":"nope"})"), "");
  Json a = answer(d, R"([{"jsonrpc":"2.0","method":"echo","id":1,"params":{"name":"a"}},
                         {"jsonrpc":"2.0","method":"echo","params":{"name":"b"}},
                         {"jsonrpc":"2.0","method":"nope","id":2}, 5])");
  ASSERT_TRUE(a.is_array());
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0]["result"]["name"], "a");
  EXPECT_EQ(a[1]["error"]["code"], kMethodNotFound);
  EXPECT_EQ(a[2]["error"]["code"], kInvalidRequest);
  EXPECT_EQ(d.handle(R"([{"jsonrpc":"2.0","method":"echo","params":{"name":"b"}}])"), "");
}

// "note" records its name; "slow" records each of its parts as it runs: checks (a name "bad"
// fails them), blocking part (a name "lost" throws there), commit (a name "late" throws there).
struct SlowMethods {
  std::vector<std::string> seen;
  Dispatcher d;
  SlowMethods() {
    d.add("note", [this](const Json& params) -> Json {
      Params p(params);
      seen.push_back(p.str("name"));
      p.done();
      return Json(seen.back());
    });
    d.add_slow("slow", [this](const Json& params) -> SlowWork {
      Params p(params);
      const std::string name = p.str("name");
      p.done();
      if (name == "bad") throw RpcError(kInvalidParams, "bad name");
      seen.push_back("check " + name);
      return [this, name]() -> SlowCommit {
        seen.push_back("block " + name);
        if (name == "lost") throw RpcError(kNoSuchDevice, "the cluster is gone");
        return [this, name]() -> Json {
          seen.push_back("commit " + name);
          if (name == "late") throw RpcError(kExists, "taken meanwhile");
          return Json(name);
        };
      };
    });
  }
  static std::string call(const char* method, const char* name, int id) {
    return Json{{"jsonrpc", "2.0"}, {"method", method}, {"id", id}, {"params", {{"name", name}}}}.dump();
  }
};

TEST(Dispatcher, ASlowMethodStopsItsTextUntilItsBlockingPartRanAndItsCommitAnswers) {
  SlowMethods m;
  const std::string batch = "[" + SlowMethods::call("note", "a", 1) + "," + SlowMethods::call("slow", "x", 2) + "," +
                            SlowMethods::call("note", "b", 3) + "]";
  Answering a = m.d.start(batch);
  ASSERT_FALSE(a.done());
  EXPECT_EQ(a.method(), "slow");
  EXPECT_EQ(m.seen, (std::vector<std::string>{"a", "check x"})) << "the request after the slow one ran before it";
  const SlowCommit commit = a.run_blocking();
  EXPECT_EQ(m.seen.back(), "block x");
  m.d.resume(a, commit);
  ASSERT_TRUE(a.done());
  EXPECT_EQ(m.seen, (std::vector<std::string>{"a", "check x", "block x", "commit x", "b"}));
  const Json answers = Json::parse(a.take_answer());
  ASSERT_EQ(answers.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(answers[size_t(i)]["id"], i + 1);
  EXPECT_EQ(answers[1]["result"], "x");
  EXPECT_EQ(answers[2]["result"], "b");

  // handle() runs the same whole, on its caller's thread.
  m.seen.clear();
  EXPECT_EQ(Json::parse(m.d.handle(SlowMethods::call("slow", "y", 4)))["result"], "y");
  EXPECT_EQ(m.seen, (std::vector<std::string>{"check y", "block y", "commit y"}));
  const auto names = m.d.names();
  EXPECT_NE(std::find(names.begin(), names.end(), "slow"), names.end()) << "rpc_get_methods must list slow methods";
}

TEST(Dispatcher, ASlowMethodFailsInAnyOfItsPartsWithItsOwnError) {
  SlowMethods m;
  Answering a = m.d.start(SlowMethods::call("slow", "bad", 1));
  ASSERT_TRUE(a.done()) << "checks that fail leave nothing to run";
  EXPECT_EQ(Json::parse(a.take_answer())["error"]["code"], kInvalidParams);
  EXPECT_EQ(Json::parse(m.d.handle(SlowMethods::call("slow", "lost", 2)))["error"]["code"], kNoSuchDevice);
  EXPECT_EQ(m.seen.back(), "block lost") << "a blocking part that threw was committed";
  EXPECT_EQ(Json::parse(m.d.handle(SlowMethods::call("slow", "late", 3)))["error"]["code"], kExists);
  // A notification runs all three parts and is not answered.
  m.seen.clear();
  Answering n = m.d.start(R"({"jsonrpc":"2.0","method":"slow","params":{"name":"n"}})");
  ASSERT_FALSE(n.done());
  m.d.resume(n, n.run_blocking());
  EXPECT_TRUE(n.done());
  EXPECT_EQ(n.take_answer(), "");
  EXPECT_EQ(m.seen, (std::vector<std::string>{"check n", "block n", "commit n"}));
}

}  // namespace
}  // namespace nvtcp::control::json_rpc_test
