// The Anthropic Messages API over the chat completions path: request translation, the message
// object, the event stream and the error shape.
#include "mlxrt/server/anthropic_api.h"

#include <httplib.h>

#include "mlxrt/server/api_fields.h"
#include "mlxrt/server/http_error.h"
#include "mlxrt/server/python_json.h"

namespace mlxrt::server {

namespace {

using json = nlohmann::ordered_json;
using api_fields::at;
using api_fields::bad;
using api_fields::find;

std::string block_type(const json& block, const std::string& where) {
  if (!block.is_object()) bad(where, "must be a content block object");
  const json* type = find(block, "type");
  if (!type || !type->is_string()) bad(where + ".type", "is required and must be a string");
  return type->get<std::string>();
}

std::string text_of(const json& block, const std::string& where) {
  const json* text = find(block, "text");
  if (!text || !text->is_string()) bad(where + ".text", "must be a string");
  return text->get<std::string>();
}

[[noreturn]] void unsupported_block(const std::string& where, const std::string& type, const char* allowed) {
  bad(where + ".type", "'" + type + "' content blocks are not supported by this server (supported here: " + allowed + ")");
}

/** A string or a list of text blocks -> chat text parts (the chat path joins them). */
json text_parts(const json& content, const std::string& where, const char* allowed) {
  if (content.is_string()) return content;
  if (!content.is_array()) bad(where, "must be a string or a list of content blocks");
  json parts = json::array();
  for (size_t j = 0; j < content.size(); ++j) {
    std::string w = at(where, j);
    std::string type = block_type(content[j], w);
    if (type != "text") unsupported_block(w, type, allowed);
    parts.push_back(json{{"type", "text"}, {"text", text_of(content[j], w)}});
  }
  return parts;
}

void user_message(const json& content, const std::string& where, json& out) {
  if (content.is_string()) {
    out.push_back(json{{"role", "user"}, {"content", content}});
    return;
  }
  if (!content.is_array()) bad(where, "must be a string or a list of content blocks");
  if (content.empty()) bad(where, "must not be empty");
  json parts = json::array();
  auto flush = [&] {
    if (!parts.empty()) out.push_back(json{{"role", "user"}, {"content", std::move(parts)}});
    parts = json::array();
  };
  for (size_t j = 0; j < content.size(); ++j) {
    std::string w = at(where, j);
    std::string type = block_type(content[j], w);
    if (type == "text") {
      parts.push_back(json{{"type", "text"}, {"text", text_of(content[j], w)}});
    } else if (type == "tool_result") {
      flush();
      const json* id = find(content[j], "tool_use_id");
      if (!id || !id->is_string()) bad(w + ".tool_use_id", "must be a string");
      const json* result = find(content[j], "content");
      json text = result ? text_parts(*result, w + ".content", "text") : json("");
      if (const json* e = find(content[j], "is_error"); e && !e->is_boolean()) bad(w + ".is_error", "must be a boolean");
      out.push_back(json{{"role", "tool"}, {"tool_call_id", *id}, {"content", std::move(text)}});
    } else {
      unsupported_block(w, type, "text, tool_result");
    }
  }
  flush();
}

void assistant_message(const json& content, const std::string& where, json& out) {
  json message{{"role", "assistant"}};
  if (content.is_string()) {
    message["content"] = content;
    out.push_back(std::move(message));
    return;
  }
  if (!content.is_array()) bad(where, "must be a string or a list of content blocks");
  json parts = json::array(), calls = json::array();
  std::string reasoning;
  for (size_t j = 0; j < content.size(); ++j) {
    std::string w = at(where, j);
    std::string type = block_type(content[j], w);
    if (type == "text") {
      parts.push_back(json{{"type", "text"}, {"text", text_of(content[j], w)}});
    } else if (type == "tool_use") {
      const json* id = find(content[j], "id");
      const json* name = find(content[j], "name");
      const json* input = find(content[j], "input");
      if (!id || !id->is_string()) bad(w + ".id", "must be a string");
      if (!name || !name->is_string()) bad(w + ".name", "must be a string");
      if (!input || !input->is_object()) bad(w + ".input", "must be an object");
      calls.push_back(json{{"id", *id}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", *input}}}});
    } else if (type == "thinking") {
      const json* thinking = find(content[j], "thinking");
      if (!thinking || !thinking->is_string()) bad(w + ".thinking", "must be a string");
      reasoning += thinking->get<std::string>();
    } else if (type != "redacted_thinking") {  // opaque to any other model: left out
      unsupported_block(w, type, "text, tool_use, thinking");
    }
  }
  if (!reasoning.empty()) message["reasoning_content"] = reasoning;
  message["content"] = std::move(parts);
  if (!calls.empty()) message["tool_calls"] = std::move(calls);
  out.push_back(std::move(message));
}

json chat_messages(const json& body) {
  json out = json::array();
  if (const json* system = find(body, "system")) {
    json content = text_parts(*system, "system", "text");
    if (!content.is_string() || !content.get_ref<const std::string&>().empty())
      out.push_back(json{{"role", "system"}, {"content", std::move(content)}});
  }
  const json* messages = find(body, "messages");
  if (!messages) bad("messages", "Field required");
  if (!messages->is_array()) bad("messages", "must be a list of messages");
  if (messages->empty()) bad("messages", "must not be empty");
  for (size_t i = 0; i < messages->size(); ++i) {
    std::string w = at("messages", i);
    const json& m = (*messages)[i];
    if (!m.is_object()) bad(w, "must be an object with role and content");
    const json* role = find(m, "role");
    if (!role || !role->is_string()) bad(w + ".role", "must be 'user' or 'assistant'");
    const json* content = find(m, "content");
    if (!content) bad(w + ".content", "Field required");
    if (*role == "user")
      user_message(*content, w + ".content", out);
    else if (*role == "assistant")
      assistant_message(*content, w + ".content", out);
    else
      bad(w + ".role", "must be 'user' or 'assistant', got '" + role->get<std::string>() + "'");
  }
  return out;
}

json chat_tools(const json& body) {
  const json* tools = find(body, "tools");
  if (!tools) return json();
  if (!tools->is_array()) bad("tools", "must be a list of tools");
  json out = json::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    std::string w = at("tools", i);
    const json& t = (*tools)[i];
    if (!t.is_object()) bad(w, "must be a tool object");
    if (const json* type = find(t, "type"); type && *type != "custom")
      bad(w + ".type", "only client tools (no type, or 'custom') are supported, got " + python_dumps(*type));
    const json* name = find(t, "name");
    if (!name || !name->is_string() || name->get_ref<const std::string&>().empty())
      bad(w + ".name", "must be a non-empty string");
    const json* schema = find(t, "input_schema");
    if (!schema || !schema->is_object()) bad(w + ".input_schema", "must be a JSON schema object");
    json fn{{"name", *name}};
    if (const json* d = find(t, "description")) {
      if (!d->is_string()) bad(w + ".description", "must be a string");
      fn["description"] = *d;
    }
    fn["parameters"] = *schema;
    out.push_back(json{{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

/** tool_choice: auto (the default) and any give the model every tool, tool only the named one,
 * none no tools. any and tool are enforced (forced_tool_choice). */
json apply_tool_choice(const json& body, json tools) {
  const json* choice = find(body, "tool_choice");
  if (!choice) return tools;
  if (!choice->is_object()) bad("tool_choice", "must be an object with a type");
  const json* type = find(*choice, "type");
  if (!type || !type->is_string()) bad("tool_choice.type", "must be one of auto, any, tool, none");
  if (const json* p = find(*choice, "disable_parallel_tool_use"); p && !p->is_boolean())
    bad("tool_choice.disable_parallel_tool_use", "must be a boolean");
  const std::string t = type->get<std::string>();
  if (t == "auto" || t == "any") return tools;
  if (t == "none") return json();
  if (t != "tool") bad("tool_choice.type", "must be one of auto, any, tool, none, got '" + t + "'");
  const json* name = find(*choice, "name");
  if (!name || !name->is_string()) bad("tool_choice.name", "must be a string");
  if (tools.is_array())
    for (const auto& tool : tools)
      if (tool["function"]["name"] == *name) return json::array({tool});
  bad("tool_choice.name", "names no tool in tools: '" + name->get<std::string>() + "'");
}

std::vector<std::string> stop_sequences(const json& body) {
  std::vector<std::string> out;
  const json* stops = find(body, "stop_sequences");
  if (!stops) return out;
  if (!stops->is_array()) bad("stop_sequences", "must be a list of strings");
  for (size_t i = 0; i < stops->size(); ++i) {
    const json& s = (*stops)[i];
    if (!s.is_string() || s.get_ref<const std::string&>().empty()) bad(at("stop_sequences", i), "must be a non-empty string");
    out.push_back(s.get<std::string>());
  }
  return out;
}

json template_kwargs(const json& body) {
  json kwargs = json::object();
  if (const json* k = find(body, "chat_template_kwargs")) {
    if (!k->is_object()) bad("chat_template_kwargs", "must be an object");
    kwargs = *k;
  }
  if (const json* thinking = find(body, "thinking")) {
    if (!thinking->is_object()) bad("thinking", "must be an object with a type");
    const json* type = find(*thinking, "type");
    if (!type || !type->is_string()) bad("thinking.type", "must be one of enabled, disabled, adaptive");
    if (*type == "enabled") {
      const json* budget = find(*thinking, "budget_tokens");
      if (!budget || !budget->is_number_integer() || budget->get<int64_t>() < 1)
        bad("thinking.budget_tokens", "must be a positive integer");
      kwargs["enable_thinking"] = true;
    } else if (*type == "adaptive") {
      kwargs["enable_thinking"] = true;
    } else if (*type == "disabled") {
      kwargs["enable_thinking"] = false;
    } else {
      bad("thinking.type", "must be one of enabled, disabled, adaptive, got '" + type->get<std::string>() + "'");
    }
  }
  return kwargs;
}

std::string message_id() {
  std::string u = uuid4();
  std::erase(u, '-');
  return "msg_" + u;
}

json usage_json(const TurnResult& r) {
  return json{{"input_tokens", r.prompt_tokens - r.cached_tokens},
              {"cache_creation_input_tokens", 0},
              {"cache_read_input_tokens", r.cached_tokens},
              {"output_tokens", r.output_tokens}};
}

const char* stop_reason(TurnEnd end) {
  switch (end) {
    case TurnEnd::max_tokens: return "max_tokens";
    case TurnEnd::stop_sequence: return "stop_sequence";
    case TurnEnd::tool_use: return "tool_use";
    case TurnEnd::end_turn: break;
  }
  return "end_turn";
}

json tool_use_block(const TurnToolCall& call) {
  json input;
  try {
    input = json::parse(call.arguments);
  } catch (const json::exception&) {
    input = json::object();
  }
  if (!input.is_object()) input = json{{"arguments", input}};
  return json{{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", std::move(input)}};
}

std::string event(const std::string& type, const json& data) {
  return "event: " + type + "\ndata: " + python_dumps(data) + "\n\n";
}

class AnthropicRenderer final : public TurnRenderer {
 public:
  explicit AnthropicRenderer(std::string model) : model_(std::move(model)), id_(message_id()) {}

  json error_body(int status, const std::string& message, const std::string&) const override {
    return anthropic_error_body(status, message);
  }

  json whole(const TurnResult& r) override {
    json content = json::array();
    if (!r.reasoning.empty())
      content.push_back(json{{"type", "thinking"}, {"thinking", r.reasoning}, {"signature", ""}});
    if (!r.text.empty()) content.push_back(json{{"type", "text"}, {"text", r.text}});
    for (const auto& call : r.tool_calls) content.push_back(tool_use_block(call));
    json m = message_head();
    m["content"] = std::move(content);
    m["stop_reason"] = stop_reason(r.end);
    m["stop_sequence"] = r.stop_sequence ? json(*r.stop_sequence) : json(nullptr);
    m["usage"] = usage_json(r);
    return m;
  }

  std::string stream_begin(const TurnResult& r) override {
    json m = message_head();
    m["content"] = json::array();
    m["stop_reason"] = nullptr;
    m["stop_sequence"] = nullptr;
    m["usage"] = usage_json(r);
    return event("message_start", json{{"type", "message_start"}, {"message", std::move(m)}}) + ping();
  }

  std::string stream_delta(const TurnDelta& d) override {
    std::string out;
    if (!d.reasoning.empty()) {
      out += open("thinking", json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
      out += delta(json{{"type", "thinking_delta"}, {"thinking", d.reasoning}});
    }
    if (!d.text.empty()) {
      out += open("text", json{{"type", "text"}, {"text", ""}});
      out += delta(json{{"type", "text_delta"}, {"text", d.text}});
    }
    for (const auto& call : d.tool_calls) {
      json block = tool_use_block(call);
      std::string input = python_dumps(block["input"], DumpOptions{.ensure_ascii = false});
      block["input"] = json::object();
      out += open("tool_use", std::move(block));
      out += delta(json{{"type", "input_json_delta"}, {"partial_json", input}});
      out += close();
    }
    return out;
  }

  std::string stream_end(const TurnDelta& last, const TurnResult& r) override {
    std::string out = stream_delta(last);
    out += close();
    json usage = usage_json(r);
    out += event("message_delta",
                 json{{"type", "message_delta"},
                      {"delta", {{"stop_reason", stop_reason(r.end)},
                                 {"stop_sequence", r.stop_sequence ? json(*r.stop_sequence) : json(nullptr)}}},
                      {"usage", std::move(usage)}});
    return out + event("message_stop", json{{"type", "message_stop"}});
  }

  std::string stream_error(int status, const std::string& message) override {
    std::string out = close();
    return out + event("error", anthropic_error_body(status, message));
  }

  std::string stream_keepalive(int, int) override { return ping(); }

 private:
  json message_head() const {
    return json{{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", model_}};
  }
  static std::string ping() { return event("ping", json{{"type", "ping"}}); }

  /** Starts a block of `kind` unless one is open (tool_use blocks are never continued). */
  std::string open(const std::string& kind, json block) {
    if (open_ == kind && kind != "tool_use") return "";
    std::string out = close();
    open_ = kind;
    return out + event("content_block_start",
                       json{{"type", "content_block_start"}, {"index", index_}, {"content_block", std::move(block)}});
  }
  std::string delta(json d) {
    return event("content_block_delta", json{{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(d)}});
  }
  std::string close() {
    if (open_.empty()) return "";
    open_.clear();
    return event("content_block_stop", json{{"type", "content_block_stop"}, {"index", index_++}});
  }

  std::string model_;
  std::string id_;
  std::string open_;  // the kind of the open block, "" when none
  int index_ = 0;
};

/** The body, translated; errors in Anthropic's shape are the caller's. */
/** Structured outputs: `output_config.format` (or the beta's top-level `output_format`),
 * {"type": "json_schema", "schema": {...}}: the reply constrained to the schema, strictly (no
 * property the schema does not name), as Anthropic's structured outputs are. */
void apply_output_format(const json& body, CompletionRequest& r) {
  const json* format = nullptr;
  std::string where;
  if (const json* config = find(body, "output_config")) {
    if (!config->is_object()) bad("output_config", "must be an object");
    if (const json* f = find(*config, "format"); f && !f->is_null()) {
      format = f;
      where = "output_config.format";
    }
  }
  if (const json* f = find(body, "output_format"); f && !f->is_null()) {
    if (format) bad("output_format", "give the format once (output_config.format)");
    format = f;
    where = "output_format";
  }
  if (!format) return;
  if (!format->is_object()) bad(where, "must be an object with a type and a schema");
  const json* type = find(*format, "type");
  if (!type || !type->is_string() || *type != "json_schema") bad(where + ".type", "must be \"json_schema\"");
  json spec = *format;
  spec["strict"] = true;
  parse_response_format(spec, where, r);
}

CompletionRequest translate(const ApiContext& ctx, const std::string& text, bool count_only) {
  json body = parse_request_body(text);
  auto request = parse_completion_body(anthropic_to_chat(body, count_only), Endpoint::chat, ctx.options);
  if (!count_only) apply_output_format(body, request);
  return request;
}

bool body_too_large(const ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (req.body.size() <= ctx.options.max_body_bytes) return false;
  res.set_header("Connection", "close");
  res.status = 413;
  res.set_content(python_dumps(anthropic_error_body(
                      413, "request body is larger than " + std::to_string(ctx.options.max_body_bytes) + " bytes")),
                  "application/json");
  return true;
}

}  // namespace

json anthropic_to_chat(const json& body, bool count_only) {
  json chat = json::object();
  const json* model = find(body, "model");
  if (!model) bad("model", "Field required");
  if (!model->is_string()) bad("model", "must be a string");
  chat["model"] = *model;
  chat["messages"] = chat_messages(body);
  json tools = apply_tool_choice(body, chat_tools(body));
  if (tools.is_array() && !tools.empty()) {
    chat["tools"] = std::move(tools);
    // any / tool: the reply must be a tool_use (a call of the one named tool for tool).
    if (const json* c = find(body, "tool_choice"); c && (c->value("type", json()) == "any" || c->value("type", json()) == "tool"))
      chat["tool_choice"] = "required";
  }
  if (!count_only) {
    const json* max_tokens = find(body, "max_tokens");
    if (!max_tokens) bad("max_tokens", "Field required");
    chat["max_tokens"] = *max_tokens;
    if (const json* stream = find(body, "stream")) chat["stream"] = *stream;
    for (const char* key : {"temperature", "top_p", "top_k", "seed", "min_p"})
      if (const json* v = find(body, key)) chat[key] = *v;
  }
  if (auto stops = stop_sequences(body); !stops.empty()) chat["stop"] = stops;
  if (json kwargs = template_kwargs(body); !kwargs.empty()) chat["chat_template_kwargs"] = std::move(kwargs);
  return chat;
}

json anthropic_error_body(int status, const std::string& message) {
  const char* type = "invalid_request_error";
  switch (status) {
    case 401: type = "authentication_error"; break;
    case 403: type = "permission_error"; break;
    case 404: type = "not_found_error"; break;
    case 413: type = "request_too_large"; break;
    case 429: type = "rate_limit_error"; break;
    case 503: type = "overloaded_error"; break;
    case 504: type = "timeout_error"; break;
    default:
      if (status >= 500) type = "api_error";
  }
  return json{{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
}

void handle_anthropic_messages(const ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (body_too_large(ctx, req, res)) return;
  auto renderer = std::make_shared<AnthropicRenderer>("");
  CompletionRequest request;
  try {
    request = translate(ctx, req.body, false);
  } catch (const UsageError& e) {
    ctx.log.debug(std::string("rejected request: ") + e.what());
    auto* http = dynamic_cast<const HttpError*>(&e);
    return reply_api_error(res, *renderer, http ? http->status() : 400, e.what());
  }
  renderer = std::make_shared<AnthropicRenderer>(request.model);
  serve_turn(ctx, req, res, std::move(request), renderer);
}

void handle_anthropic_count_tokens(const ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (body_too_large(ctx, req, res)) return;
  AnthropicRenderer renderer("");
  try {
    CompletionRequest request = translate(ctx, req.body, true);
    size_t n = count_prompt_tokens(ctx, request);
    res.status = 200;
    res.set_content(python_dumps(json{{"input_tokens", n}}), "application/json");
  } catch (const UsageError& e) {
    ctx.log.debug(std::string("rejected request: ") + e.what());
    auto* http = dynamic_cast<const HttpError*>(&e);
    reply_api_error(res, renderer, http ? http->status() : 400, e.what());
  }
}

}  // namespace mlxrt::server
