#pragma once
/** The Anthropic Messages API: POST /v1/messages (whole or streamed) and
 * /v1/messages/count_tokens. A request is translated into the chat completions request of the same
 * conversation (system prompt first, tool_use blocks as the assistant's tool_calls, tool_result
 * blocks as tool messages, thinking blocks as reasoning_content), so the prompt is the chat
 * template's rendering of it; the answer is written as Anthropic's message object or its event
 * stream, errors as {"type": "error", "error": {"type", "message"}}. */
#include <nlohmann/json.hpp>

#include "mlxrt/server/chat_turn.h"

namespace mlxrt::server {

/** An Anthropic request body -> the equivalent chat completions body. HttpError(400) naming the
 * field for anything malformed or unsupported (image and document blocks, server tools).
 * `count_only`: the body of count_tokens (no max_tokens). */
nlohmann::ordered_json anthropic_to_chat(const nlohmann::ordered_json& body, bool count_only);

/** {"type": "error", "error": {"type": <Anthropic's name for the status>, "message"}} */
nlohmann::ordered_json anthropic_error_body(int status, const std::string& message);

void handle_anthropic_messages(const ApiContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_anthropic_count_tokens(const ApiContext& ctx, const httplib::Request& req, httplib::Response& res);

}  // namespace mlxrt::server
