// Unit tests of the Anthropic Messages and OpenAI Responses request translation: each request
// becomes exactly the chat completions body of the same conversation.
#include <gtest/gtest.h>

#include "mlxrt/server/anthropic_api.h"
#include "mlxrt/server/http_error.h"
#include "mlxrt/server/responses_api.h"

namespace mlxrt::server {
namespace {

using json = nlohmann::ordered_json;

/** The field an HttpError(400) names, "" when `f` does not throw one. */
template <typename F>
std::string rejected_field(F&& f) {
  try {
    f();
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.param();
  }
  return "";
}

TEST(AnthropicToChat, ConversationWithToolsAndThinking) {
  json body = json::parse(R"({
    "model": "m", "max_tokens": 16, "stop_sequences": ["END"], "temperature": 0.5, "top_k": 3,
    "system": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}],
    "thinking": {"type": "enabled", "budget_tokens": 2048},
    "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object"}}],
    "messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Look it up.", "signature": "s"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "18C"}]},
        {"type": "text", "text": "Thanks"}]}]})");
  json expected = json::parse(R"({
    "model": "m",
    "messages": [
      {"role": "system", "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}]},
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "reasoning_content": "Look it up.", "content": [{"type": "text", "text": "Checking."}],
       "tool_calls": [{"id": "t1", "type": "function",
                       "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "t1", "content": [{"type": "text", "text": "18C"}]},
      {"role": "user", "content": [{"type": "text", "text": "Thanks"}]}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
                                                "parameters": {"type": "object"}}}],
    "max_tokens": 16, "temperature": 0.5, "top_k": 3, "stop": ["END"],
    "chat_template_kwargs": {"enable_thinking": true}})");
  EXPECT_EQ(anthropic_to_chat(body, false), expected);
}

TEST(AnthropicToChat, ToolChoiceAndCountOnly) {
  json body = json::parse(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
    "tools": [{"name": "a", "input_schema": {}}, {"name": "b", "input_schema": {}}],
    "tool_choice": {"type": "tool", "name": "b"}, "thinking": {"type": "disabled"}})");
  json chat = anthropic_to_chat(body, true);  // no max_tokens needed
  ASSERT_EQ(chat["tools"].size(), 1u);
  EXPECT_EQ(chat["tools"][0]["function"]["name"], "b");
  EXPECT_EQ(chat["chat_template_kwargs"], json({{"enable_thinking", false}}));
  EXPECT_FALSE(chat.contains("max_tokens"));
  body["tool_choice"] = {{"type", "none"}};
  EXPECT_FALSE(anthropic_to_chat(body, true).contains("tools"));
  EXPECT_EQ(rejected_field([&] { anthropic_to_chat(body, false); }), "max_tokens");
}

TEST(AnthropicToChat, RefusesWhatItCannotServe) {
  auto with = [](const char* fields) {
    json body = json::parse(R"({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]})");
    body.update(json::parse(fields));
    return [body] { anthropic_to_chat(body, false); };
  };
  EXPECT_EQ(rejected_field(with(R"({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]})")),
            "messages[0].content[0].type");
  EXPECT_EQ(rejected_field(with(R"({"messages": [{"role": "assistant", "content": [{"type": "document"}]}]})")),
            "messages[0].content[0].type");
  EXPECT_EQ(rejected_field(with(R"({"tools": [{"type": "bash_20250124", "name": "bash"}]})")), "tools[0].type");
  EXPECT_EQ(rejected_field(with(R"({"stop_sequences": ["a", 3]})")), "stop_sequences[1]");
  EXPECT_EQ(rejected_field(with(R"({"thinking": {"type": "enabled"}})")), "thinking.budget_tokens");
  EXPECT_EQ(rejected_field(with(R"({"model": 5})")), "model");
  EXPECT_EQ(rejected_field(with(R"({"messages": [{"role": "user", "content": []}]})")), "messages[0].content");
}

TEST(AnthropicErrors, Shape) {
  EXPECT_EQ(anthropic_error_body(400, "bad"),
            json::parse(R"({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}})"));
  EXPECT_EQ(anthropic_error_body(404, "x")["error"]["type"], "not_found_error");
  EXPECT_EQ(anthropic_error_body(503, "x")["error"]["type"], "overloaded_error");
  EXPECT_EQ(anthropic_error_body(500, "x")["error"]["type"], "api_error");
}

TEST(ResponsesToChat, ItemsMergeIntoChatMessages) {
  ResponseStore store(4);
  json body = json::parse(R"({
    "model": "m", "instructions": "Be brief.", "max_output_tokens": 8, "seed": 7,
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
    "input": [
      {"role": "developer", "content": "Use tools."},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Go"}]},
      {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Hmm."}]},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Calling."}]},
      {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"a\": 1}"},
      {"type": "function_call_output", "call_id": "c1", "output": "done"}]})");
  ResponsesTranslation t = responses_to_chat(body, store);
  json expected_messages = json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "system", "content": "Use tools."},
    {"role": "user", "content": [{"type": "text", "text": "Go"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "Calling."}], "reasoning_content": "Hmm.",
     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "done"}])");
  EXPECT_EQ(t.chat["messages"], expected_messages);
  EXPECT_EQ(t.conversation.size(), 4u);  // the instructions are not part of the stored conversation
  EXPECT_EQ(t.chat["max_tokens"], 8);
  EXPECT_EQ(t.chat["seed"], 7);
  EXPECT_EQ(t.chat["tools"][0], json::parse(R"({"type": "function", "function": {"name": "f",
                                                 "parameters": {"type": "object"}}})"));
}

TEST(ResponsesToChat, PreviousResponseAndStoreBound) {
  ResponseStore store(2);
  store.put("r1", json::array({{{"role", "user"}, {"content", "a"}}}));
  json body = {{"previous_response_id", "r1"}, {"input", "b"}};
  EXPECT_EQ(responses_to_chat(body, store).chat["messages"],
            json::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])"));
  store.put("r2", json::array());
  store.put("r3", json::array());  // r1 is dropped: the store holds two
  EXPECT_EQ(rejected_field([&] { responses_to_chat(body, store); }), "previous_response_id");
  EXPECT_TRUE(store.get("r3").has_value());
}

TEST(ResponsesToChat, RefusesWhatItCannotServe) {
  ResponseStore store(1);
  auto with = [&](const char* fields) {
    json body = json::parse(R"({"input": "x"})");
    body.update(json::parse(fields));
    return [body, &store] { responses_to_chat(body, store); };
  };
  EXPECT_EQ(rejected_field(with(R"({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})")),
            "input[0].content[0].type");
  EXPECT_EQ(rejected_field(with(R"({"input": [{"type": "item_reference", "id": "x"}]})")), "input[0].type");
  EXPECT_EQ(rejected_field(with(R"({"tools": [{"type": "file_search"}]})")), "tools[0].type");
  EXPECT_EQ(rejected_field(with(R"({"text": {"format": {"type": "grammar"}}})")), "text.format.type");
  EXPECT_EQ(rejected_field(with(R"({"tool_choice": "sometimes"})")), "tool_choice");
  EXPECT_EQ(rejected_field(with(R"({"max_output_tokens": 1.5})")), "max_output_tokens");
  EXPECT_EQ(rejected_field(with(R"({"previous_response_id": "nope"})")), "previous_response_id");
}

}  // namespace
}  // namespace mlxrt::server
