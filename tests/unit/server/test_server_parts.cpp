// Unit tests of the server's pure parts: Python-compatible JSON text, the text state machine,
// token stop sequences, request parsing and the LRU prompt cache.
#include <gtest/gtest.h>

#include <mlx/ops.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/server/http_error.h"
#include "mlxrt/server/prompt_cache.h"
#include "mlxrt/server/python_json.h"
#include "mlxrt/server/request.h"
#include "mlxrt/server/request_guards.h"
#include "mlxrt/server/stop_sequences.h"
#include "mlxrt/server/text_state_machine.h"
#include "mlxrt/server/tool_calls.h"

namespace mlxrt::server {
namespace {

using json = nlohmann::ordered_json;

TEST(PythonJson, FloatsAsRepr) {
  EXPECT_EQ(python_float_repr(1.0), "1.0");
  EXPECT_EQ(python_float_repr(-9.75), "-9.75");
  EXPECT_EQ(python_float_repr(1e-05), "1e-05");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(123456789012345.0), "123456789012345.0");
  EXPECT_EQ(python_float_repr(static_cast<double>(-12.984646f)), "-12.98464584350586");
  EXPECT_EQ(python_float_repr(0.1), "0.1");
}

TEST(PythonJson, SeparatorsAndEscapes) {
  json v = json::object();
  v["a"] = json::array({1, 2.5, nullptr, true});
  v["t"] = "caf\xC3\xA9 \xF0\x9F\x98\x80\n\"\x7F";
  EXPECT_EQ(python_dumps(v), R"({"a": [1, 2.5, null, true], "t": "caf\u00e9 \ud83d\ude00\n\"\u007f"})");
  EXPECT_EQ(python_dumps(v, {.ensure_ascii = false}), "{\"a\": [1, 2.5, null, true], \"t\": \"caf\xC3\xA9 \xF0\x9F\x98\x80\\n\\\"\x7F\"}");
}

std::string joined(const std::vector<TextStateMachine::Segment>& segs, const std::string& state) {
  std::string out;
  for (const auto& [name, text] : segs)
    if (name == state) out += text;
  return out;
}

TEST(TextStateMachine, ReasoningToolAndStopWords) {
  MarkerSet markers{std::make_pair(std::string("<think>"), std::string("</think>")),
                    std::make_pair(std::string("<tool_call>"), std::string("</tool_call>"))};
  auto sm = make_text_state_machine(markers, {"STOP"});
  auto st = sm.make_state("normal");
  std::string normal, reasoning, tool;
  for (std::string piece : {"Hi <th", "ink>deep", " thought</think>ok ST", "OP done <tool_", "call>{\"a\":1}</tool_call>!"}) {
    auto segs = sm.split(st, piece);
    normal += joined(segs, "normal");
    reasoning += joined(segs, "reasoning");
    tool += joined(segs, "tool");
  }
  EXPECT_EQ(normal, "Hi ok  done !");
  EXPECT_EQ(reasoning, "deep thought");
  EXPECT_EQ(tool, "{\"a\":1}");
}

TEST(TextStateMachine, HoldsBackPartialMatchUntilFlushOrDiscard) {
  auto sm = make_text_state_machine({}, {"END"});
  auto st = sm.make_state();
  EXPECT_EQ(joined(sm.split(st, "abc EN"), "normal"), "abc ");
  auto flushed = sm.flush(st);
  EXPECT_EQ(flushed.second, "EN");
  EXPECT_EQ(joined(sm.split(st, "x EN"), "normal"), "x ");
  EXPECT_EQ(sm.discard(st), std::optional<std::string>("normal"));
  EXPECT_EQ(joined(sm.split(st, "D"), "normal"), "D");
}

TEST(StopSequences, MatchesAcrossOverlaps) {
  auto seqs = std::make_shared<const StopSequences>(std::vector<std::vector<int32_t>>{{2}, {5, 6, 7}, {6, 8}});
  auto m = StopSequences::matcher(seqs);
  EXPECT_FALSE(m.advance(5));
  EXPECT_FALSE(m.advance(6));
  EXPECT_TRUE(m.advance(8));  // 6 8 completes through the failure link of 5 6
  auto m2 = StopSequences::matcher(seqs);
  EXPECT_FALSE(m2.advance(5));
  EXPECT_FALSE(m2.advance(5));
  EXPECT_FALSE(m2.advance(6));
  EXPECT_TRUE(m2.advance(7));
  EXPECT_TRUE(m2.advance(2));
}

TEST(Request, DefaultsAndAliases) {
  ServerOptions o;
  o.max_tokens = 77;
  auto r = parse_completion_request(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
      {"type": "text", "text": "b"}]}], "max_completion_tokens": 5, "max_tokens": 9, "stop": "x",
      "logit_bias": {"12": -1.5, "3": 2}})", Endpoint::chat, o);
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(r.messages[0]["content"], "ab");
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  ASSERT_EQ(r.logit_bias.size(), 2u);
  EXPECT_EQ(r.logit_bias[0].first, 12);
  EXPECT_EQ(r.logit_bias[1].second, 2.0);
  auto d = parse_completion_request(R"({"prompt": "p"})", Endpoint::text, o);
  EXPECT_EQ(d.max_tokens, 77);
  EXPECT_EQ(d.temperature, 0.0);
  EXPECT_EQ(d.top_p, 1.0);
  EXPECT_EQ(d.top_logprobs, -1);
}

TEST(Request, WrongTypesAreRejectedNamingTheField) {
  ServerOptions o;
  for (const char* body : {R"({"prompt": "p", "max_tokens": true})", R"({"prompt": "p", "temperature": "1"})",
                           R"({"prompt": "p", "stream": 0})", R"({"prompt": 3})", R"({"prompt": "p", "seed": 1.5})"}) {
    try {
      parse_completion_request(body, Endpoint::text, o);
      ADD_FAILURE() << "accepted " << body;
    } catch (const HttpError& e) {
      EXPECT_EQ(e.status(), 400) << body;
      EXPECT_FALSE(e.param().empty()) << body;
    }
  }
}

TEST(ToolCalls, InferAndFormat) {
  auto none = [](const std::string&) { return false; };
  EXPECT_EQ(infer_tool_parser_type("{{ '<tool_call>' }}{{ tool_call.name }}", json::object(), none), "json_tools");
  EXPECT_EQ(infer_tool_parser_type("<tool_call>\n<function=x>", json::object(), none), "qwen3_coder");
  EXPECT_EQ(infer_tool_parser_type("plain", json::object(), none), std::nullopt);
  auto parser = make_tool_parser("json_tools");
  ASSERT_TRUE(parser);
  ToolCallFormatter fmt(&*parser, nullptr, true);
  auto calls = fmt({"\n{\"name\": \"f\", \"arguments\": {\"x\": \"\xC3\xA9\"}}\n", "{cut off"});
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["function"]["name"], "f");
  EXPECT_EQ(calls[0]["function"]["arguments"], "{\"x\": \"\xC3\xA9\"}");
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["id"].get<std::string>().size(), 36u);
}

cache::CacheList filled_cache(int n) {
  cache::CacheList list;
  auto c = std::make_unique<cache::KVCache>();
  auto kv = mlx::core::zeros({1, 1, n, 4});
  c->update_and_fetch(kv, kv);
  list.push_back(std::move(c));
  return list;
}

TEST(PromptCache, LongestPrefixIsCopiedAndTrimmed) {
  PromptCache pc(2, std::nullopt);
  pc.insert({1, 2, 3, 4, 5}, filled_cache(5));
  pc.insert({9, 9}, filled_cache(2));
  auto hit = pc.fetch({1, 2, 3, 7});
  EXPECT_EQ(hit.reused, 3u);
  ASSERT_FALSE(hit.cache.empty());
  EXPECT_EQ(hit.cache.front()->offset(), 3);
  // The entry stays whole (mlx-lm deep-copies it): the same prompt finds all of it again.
  EXPECT_EQ(pc.size(), 2u);
  auto whole = pc.fetch({1, 2, 3, 4, 5, 6});
  EXPECT_EQ(whole.reused, 5u);
  EXPECT_EQ(whole.cache.front()->offset(), 5);
  // An identical prompt leaves its last token to compute.
  pc.insert({1, 2, 3, 7}, filled_cache(4));
  auto again = pc.fetch({1, 2, 3, 7});
  EXPECT_EQ(again.reused, 3u);
  EXPECT_EQ(again.cache.front()->offset(), 3);
  EXPECT_EQ(pc.fetch({4, 4}).reused, 0u);
}

TEST(PromptCache, ACopyExtendedByARequestLeavesTheEntryAlone) {
  // Chat A, then B sharing A's first 3 tokens, then A again: the third finds A's entry whole
  // (as mlx_lm.server reports it), not only the 3 tokens B's entry shares.
  PromptCache pc(10, std::nullopt);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  pc.insert(a, filled_cache(12));
  auto b = pc.fetch({1, 2, 3, 20, 21});
  EXPECT_EQ(b.reused, 3u);
  auto kv = mlx::core::ones({1, 1, 2, 4});
  b.cache.front()->update_and_fetch(kv, kv);  // the request writes past the shared prefix
  pc.insert({1, 2, 3, 20, 21}, std::move(b.cache));
  auto third = pc.fetch(a);
  EXPECT_EQ(third.reused, 11u);
  EXPECT_EQ(third.cache.front()->offset(), 11);
  auto keys = std::get<cache::PlainKV>(third.cache.front()->update_and_fetch(kv, kv)).keys;
  // Position 3 still holds A's zeros, not B's ones.
  EXPECT_EQ(mlx::core::sum(mlx::core::slice(keys, {0, 0, 3, 0}, {1, 1, 4, 4})).item<float>(), 0.0f);
}

TEST(PromptCache, EvictsOldestBeyondCountAndBytes) {
  PromptCache pc(2, std::nullopt);
  pc.insert({1}, filled_cache(1));
  pc.insert({2}, filled_cache(1));
  pc.insert({3}, filled_cache(1));
  EXPECT_EQ(pc.size(), 2u);
  EXPECT_EQ(pc.fetch({1, 0}).reused, 0u);
  PromptCache tiny(10, size_t{1});
  tiny.insert({1, 2}, filled_cache(2));
  EXPECT_EQ(tiny.size(), 0u);
  EXPECT_EQ(tiny.nbytes(), 0u);
}

TEST(PromptCache, EntriesAreKeyedByAdapter) {
  // One adapter's KV is never reused for another (nor for the plain model), and storing the same
  // tokens under another adapter keeps both entries.
  PromptCache pc(10, std::nullopt);
  pc.insert({1, 2, 3, 4}, filled_cache(4), "alpha");
  EXPECT_EQ(pc.fetch({1, 2, 3, 4, 5}, "beta").reused, 0u);
  EXPECT_EQ(pc.fetch({1, 2, 3, 4, 5}).reused, 0u);
  EXPECT_EQ(pc.fetch({1, 2, 3, 4, 5}, "alpha").reused, 4u);
  pc.insert({1, 2, 3, 4}, filled_cache(4), "beta");
  EXPECT_EQ(pc.size(), 2u);
  EXPECT_EQ(pc.fetch({1, 2, 3, 4, 5}, "beta").reused, 4u);
  EXPECT_EQ(pc.fetch({1, 2, 3, 4, 5}, "alpha").reused, 4u);
}

TEST(RequestGuards, LoopbackServerAnswersOnlyLoopbackHosts) {
  for (const char* bound : {"127.0.0.1", "localhost", "::1", "[::1]"}) {
    EXPECT_TRUE(host_allowed(bound, "127.0.0.1:8080")) << bound;
    EXPECT_TRUE(host_allowed(bound, "localhost:8080")) << bound;
    EXPECT_TRUE(host_allowed(bound, "LOCALHOST")) << bound;
    EXPECT_TRUE(host_allowed(bound, "[::1]:8080")) << bound;
    EXPECT_TRUE(host_allowed(bound, "")) << bound;  // HTTP/1.0 sends none
    EXPECT_FALSE(host_allowed(bound, "evil.example:8080")) << bound;
    EXPECT_FALSE(host_allowed(bound, "127.0.0.1.evil.example")) << bound;
    EXPECT_FALSE(host_allowed(bound, "localhost.evil.example")) << bound;
  }
  // Bound to every interface or a named one, any Host reaches it (its users chose that).
  EXPECT_TRUE(host_allowed("0.0.0.0", "evil.example"));
  EXPECT_TRUE(host_allowed("my-box.lan", "my-box.lan:8080"));
}

TEST(RequestGuards, OnlyJsonBodies) {
  EXPECT_TRUE(json_content_type("application/json"));
  EXPECT_TRUE(json_content_type("Application/JSON; charset=utf-8"));
  EXPECT_TRUE(json_content_type("application/vnd.api+json"));
  EXPECT_TRUE(json_content_type(""));
  EXPECT_FALSE(json_content_type("text/plain"));
  EXPECT_FALSE(json_content_type("text/plain;charset=UTF-8"));
  EXPECT_FALSE(json_content_type("application/x-www-form-urlencoded"));
  EXPECT_FALSE(json_content_type("multipart/form-data; boundary=x"));
}

}  // namespace
}  // namespace mlxrt::server

namespace mlxrt::server {

// Found while writing fuzz_request (libFuzzer's short inputs cannot reach it): a body nested a
// million levels deep (well under the 16 MB body limit) crashed the server through the stack (each
// copy of a JSON value recurses per level). It is a 400 now, as is a tool call's argument text
// nested that deep; 990 levels still parse.
TEST(Request, DeeplyNestedBodiesAreRefusedWithA400) {
  ServerOptions o;
  auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  const std::string deep = nested(1000000);
  for (const std::string& body :
       {R"({"prompt": "p", "x": )" + deep + "}",
        R"({"messages": [{"role": "user", "content": "c", "extra": )" + deep + "}]}",
        R"({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": ")" +
            nested(1000000) + R"("}}]}]})"}) {
    try {
      parse_completion_request(body, body.find("prompt") != std::string::npos ? Endpoint::text : Endpoint::chat, o);
      ADD_FAILURE() << "accepted a body nested a million levels deep";
    } catch (const HttpError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_NE(std::string(e.what()).find("nests deeper than 1000 levels"), std::string::npos) << e.what();
    }
  }
  auto ok = parse_completion_request(R"({"prompt": "p", "x": )" + nested(990) + "}", Endpoint::text, o);
  EXPECT_EQ(ok.prompt, "p");
}

}  // namespace mlxrt::server
