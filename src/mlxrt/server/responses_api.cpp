// The OpenAI Responses API over the chat completions path: request translation, the response
// store, the response object and its event stream.
#include "mlxrt/server/responses_api.h"

#include <httplib.h>

#include <ctime>

#include "mlxrt/server/api_fields.h"
#include "mlxrt/server/http_error.h"
#include "mlxrt/server/python_json.h"

namespace mlxrt::server {

namespace {

using json = nlohmann::ordered_json;
using api_fields::at;
using api_fields::bad;
using api_fields::find;

const std::string& string_field(const json& obj, const char* key, const std::string& where) {
  const json* v = find(obj, key);
  if (!v || !v->is_string()) bad(where + "." + key, "must be a string");
  return v->get_ref<const std::string&>();
}

std::string new_id(const char* prefix) {
  std::string u = uuid4();
  std::erase(u, '-');
  return prefix + u;
}

/** Message content: a string or parts of the types `allowed` (text kinds) -> chat text parts. */
json content_parts(const json& content, const std::string& where, std::initializer_list<const char*> allowed) {
  if (content.is_string()) return content;
  if (!content.is_array()) bad(where, "must be a string or a list of content parts");
  json parts = json::array();
  for (size_t j = 0; j < content.size(); ++j) {
    std::string w = at(where, j);
    const json& part = content[j];
    if (!part.is_object()) bad(w, "must be a content part object");
    const std::string& type = string_field(part, "type", w);
    bool ok = false;
    for (const char* a : allowed) ok = ok || type == a;
    if (!ok) {
      std::string list;
      for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
      bad(w + ".type", "'" + type + "' content is not supported by this server (supported here: " + list + ")");
    }
    const char* key = type == "refusal" ? "refusal" : "text";
    parts.push_back(json{{"type", "text"}, {"text", string_field(part, key, w)}});
  }
  return parts;
}

/** Input items -> chat messages. Assistant text, reasoning and function calls that follow one
 * another make one assistant message, as a chat completions client would send them. */
class InputTranslator {
 public:
  void item(const json& item, const std::string& w) {
    if (!item.is_object()) bad(w, "must be an input item object");
    std::string type = "message";
    if (const json* t = find(item, "type")) {
      if (!t->is_string()) bad(w + ".type", "must be a string");
      type = t->get<std::string>();
    }
    if (type == "message") {
      message(item, w);
    } else if (type == "function_call") {
      const std::string& args = string_field(item, "arguments", w);
      json parsed;
      try {
        parsed = json::parse(args);
      } catch (const json::exception&) {
        bad(w + ".arguments", "is not valid JSON");
      }
      json& a = assistant(false);
      if (!a.contains("tool_calls")) a["tool_calls"] = json::array();
      a["tool_calls"].push_back(json{{"id", string_field(item, "call_id", w)},
                                     {"type", "function"},
                                     {"function", {{"name", string_field(item, "name", w)}, {"arguments", args}}}});
    } else if (type == "function_call_output") {
      flush();
      const json* output = find(item, "output");
      if (!output) bad(w + ".output", "Field required");
      out_.push_back(json{{"role", "tool"},
                          {"tool_call_id", string_field(item, "call_id", w)},
                          {"content", content_parts(*output, w + ".output", {"input_text", "output_text"})}});
    } else if (type == "reasoning") {
      std::string text;
      for (const char* key : {"content", "summary"}) {
        const json* parts = find(item, key);
        if (!parts) continue;
        if (!parts->is_array()) bad(w + "." + key, "must be a list");
        for (size_t j = 0; j < parts->size(); ++j) text += string_field((*parts)[j], "text", at(w + "." + key, j));
        if (!text.empty()) break;  // the full text when given, else the summary
      }
      json& a = assistant(true);
      a["reasoning_content"] = a.value("reasoning_content", std::string()) + text;
    } else {
      bad(w + ".type", "'" + type + "' input items are not supported by this server (supported here: message, "
                       "function_call, function_call_output, reasoning)");
    }
  }

  json finish() {
    flush();
    return std::move(out_);
  }

 private:
  void message(const json& item, const std::string& w) {
    const std::string& role = string_field(item, "role", w);
    const json* content = find(item, "content");
    if (!content) bad(w + ".content", "Field required");
    if (role == "assistant") {
      json parts = content_parts(*content, w + ".content", {"output_text", "input_text", "refusal"});
      json& a = assistant(true);
      a["content"] = std::move(parts);
      return;
    }
    if (role != "user" && role != "system" && role != "developer")
      bad(w + ".role", "must be one of user, system, developer, assistant, got '" + role + "'");
    flush();
    // Chat templates know "system"; "developer" is the Responses API's name for it.
    out_.push_back(json{{"role", role == "developer" ? "system" : role},
                        {"content", content_parts(*content, w + ".content", {"input_text"})}});
  }

  /** The assistant message being built; a new one when `fresh_text` and the current one already
   * has content or calls (so text after calls starts a new turn). */
  json& assistant(bool fresh_text) {
    if (pending_ && fresh_text && (pending_->contains("content") || pending_->contains("tool_calls"))) flush();
    if (!pending_) pending_ = json{{"role", "assistant"}};
    return *pending_;
  }

  void flush() {
    if (!pending_) return;
    if (!pending_->contains("content")) (*pending_)["content"] = "";
    // Key order as a chat client writes it: role, content, then the rest.
    json m{{"role", "assistant"}, {"content", (*pending_)["content"]}};
    for (auto it = pending_->begin(); it != pending_->end(); ++it)
      if (it.key() != "role" && it.key() != "content") m[it.key()] = it.value();
    out_.push_back(std::move(m));
    pending_.reset();
  }

  json out_ = json::array();
  std::optional<json> pending_;
};

json chat_tools(const json& body) {
  const json* tools = find(body, "tools");
  if (!tools) return json();
  if (!tools->is_array()) bad("tools", "must be a list of tools");
  json out = json::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    std::string w = at("tools", i);
    const json& t = (*tools)[i];
    if (!t.is_object()) bad(w, "must be a tool object");
    const std::string& type = string_field(t, "type", w);
    if (type != "function") bad(w + ".type", "only function tools are supported by this server, got '" + type + "'");
    json fn{{"name", string_field(t, "name", w)}};
    if (const json* d = find(t, "description")) {
      if (!d->is_string()) bad(w + ".description", "must be a string");
      fn["description"] = *d;
    }
    const json* params = find(t, "parameters");
    if (params && !params->is_object()) bad(w + ".parameters", "must be a JSON schema object");
    fn["parameters"] = params ? *params : json{{"type", "object"}, {"properties", json::object()}};
    out.push_back(json{{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

/** tool_choice: "auto" and "required" give the model every tool, a named function only that one,
 * "none" no tools. "required" and a named function are enforced (the chat request's tool_choice). */
json apply_tool_choice(const json& body, json tools) {
  const json* choice = find(body, "tool_choice");
  if (!choice) return tools;
  if (choice->is_string()) {
    if (*choice == "auto" || *choice == "required") return tools;
    if (*choice == "none") return json();
    bad("tool_choice", "must be auto, none, required or {\"type\": \"function\", \"name\": ...}");
  }
  if (!choice->is_object() || find(*choice, "type") == nullptr || (*choice)["type"] != "function")
    bad("tool_choice", "must be auto, none, required or {\"type\": \"function\", \"name\": ...}");
  const std::string& name = string_field(*choice, "name", "tool_choice");
  if (tools.is_array())
    for (const auto& tool : tools)
      if (tool["function"]["name"] == name) return json::array({tool});
  bad("tool_choice.name", "names no tool in tools: '" + name + "'");
}

json template_kwargs(const json& body) {
  json kwargs = json::object();
  if (const json* k = find(body, "chat_template_kwargs")) {
    if (!k->is_object()) bad("chat_template_kwargs", "must be an object");
    kwargs = *k;
  }
  if (const json* reasoning = find(body, "reasoning")) {
    if (!reasoning->is_object()) bad("reasoning", "must be an object");
    if (const json* effort = find(*reasoning, "effort")) {
      if (!effort->is_string()) bad("reasoning.effort", "must be a string");
      if (*effort == "none") kwargs["enable_thinking"] = false;
    }
  }
  return kwargs;
}

/** text.format: null, or the format object (text, json_object, json_schema with its fields beside
 * "type"), which the chat request takes as its response_format. */
const json* text_format(const json& body) {
  const json* text = find(body, "text");
  if (!text) return nullptr;
  if (!text->is_object()) bad("text", "must be an object");
  const json* format = find(*text, "format");
  if (!format) return nullptr;
  if (!format->is_object()) bad("text.format", "must be an object");
  const json* type = find(*format, "type");
  if (!type || (*type != "text" && *type != "json_object" && *type != "json_schema"))
    bad("text.format.type", "must be 'text', 'json_object' or 'json_schema', got " + (type ? python_dumps(*type) : "none"));
  return format;
}

json usage_json(const TurnResult& r) {
  return json{{"input_tokens", r.prompt_tokens},
              {"input_tokens_details", {{"cached_tokens", r.cached_tokens}}},
              {"output_tokens", r.output_tokens},
              {"output_tokens_details", {{"reasoning_tokens", r.reasoning_tokens}}},
              {"total_tokens", r.prompt_tokens + r.output_tokens}};
}

/** What the response object repeats of the request. */
struct Echo {
  std::string model;
  json instructions, max_output_tokens, previous_response_id, tools, tool_choice, reasoning;
  double temperature = 0, top_p = 1;
  bool store = true;
};

class ResponsesRenderer final : public TurnRenderer {
 public:
  ResponsesRenderer(Echo echo, std::shared_ptr<ResponseStore> store, json conversation)
      : echo_(std::move(echo)),
        store_(std::move(store)),
        conversation_(std::move(conversation)),
        id_(new_id("resp_")),
        created_(static_cast<int64_t>(std::time(nullptr))) {}

  json error_body(int status, const std::string& message, const std::string& param) const override {
    return mlxrt::server::error_body(status, message, param);
  }

  json whole(const TurnResult& r) override {
    if (!r.reasoning.empty()) items_.push_back(reasoning_item(new_id("rs_"), r.reasoning, "completed"));
    if (!r.text.empty() || r.tool_calls.empty()) items_.push_back(message_item(new_id("msg_"), r.text, status_of(r)));
    for (const auto& call : r.tool_calls) items_.push_back(call_item(new_id("fc_"), call, "completed"));
    remember(r);
    return response(r, status_of(r));
  }

  std::string stream_begin(const TurnResult&) override {
    json r = response(std::nullopt, "in_progress");
    std::string out = event("response.created", {{"response", r}});  // (sequence numbers: in this order)
    return out + event("response.in_progress", {{"response", r}});
  }

  std::string stream_delta(const TurnDelta& d) override {
    std::string out;
    if (!d.reasoning.empty()) {
      if (open_ != "reasoning") out += open("reasoning");
      open_text_ += d.reasoning;
      out += event("response.reasoning_text.delta", {{"item_id", open_id_},
                                                     {"output_index", items_.size()},
                                                     {"content_index", 0},
                                                     {"delta", d.reasoning}});
    }
    if (!d.text.empty()) {
      if (open_ != "message") out += open("message");
      open_text_ += d.text;
      out += event("response.output_text.delta", {{"item_id", open_id_},
                                                  {"output_index", items_.size()},
                                                  {"content_index", 0},
                                                  {"delta", d.text},
                                                  {"logprobs", json::array()}});
    }
    for (const auto& call : d.tool_calls) {
      out += close("completed");
      json item = call_item(new_id("fc_"), call, "in_progress");
      item["arguments"] = "";
      out += event("response.output_item.added", {{"output_index", items_.size()}, {"item", item}});
      out += event("response.function_call_arguments.delta",
                   {{"item_id", item["id"]}, {"output_index", items_.size()}, {"delta", call.arguments}});
      out += event("response.function_call_arguments.done", {{"item_id", item["id"]},
                                                             {"output_index", items_.size()},
                                                             {"name", call.name},
                                                             {"arguments", call.arguments}});
      item = call_item(item["id"].get<std::string>(), call, "completed");
      out += event("response.output_item.done", {{"output_index", items_.size()}, {"item", item}});
      items_.push_back(std::move(item));
    }
    return out;
  }

  std::string stream_end(const TurnDelta& last, const TurnResult& r) override {
    std::string out = stream_delta(last);
    const char* status = status_of(r);
    if (r.text.empty() && r.tool_calls.empty()) out += open("message");  // an empty answer, as whole() gives
    out += close(status);
    remember(r);
    json resp = response(r, status);
    return out + event(std::string(status) == "completed" ? "response.completed" : "response.incomplete",
                       {{"response", std::move(resp)}});
  }

  std::string stream_error(int status, const std::string& message) override {
    json body = mlxrt::server::error_body(status, message);
    return event("error", {{"code", body["error"]["type"]}, {"message", message}, {"param", nullptr}});
  }

  std::string stream_keepalive(int processed, int total) override {
    return ": keepalive " + std::to_string(processed) + "/" + std::to_string(total) + "\n\n";
  }

 private:
  static const char* status_of(const TurnResult& r) { return r.end == TurnEnd::max_tokens ? "incomplete" : "completed"; }

  static json reasoning_item(const std::string& id, const std::string& text, const char* status) {
    json content = json::array();
    if (!text.empty() || std::string(status) == "completed")
      content.push_back(json{{"type", "reasoning_text"}, {"text", text}});
    return json{{"id", id}, {"type", "reasoning"}, {"summary", json::array()}, {"content", content}, {"status", status}};
  }
  static json output_text(const std::string& text) {
    return json{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}};
  }
  static json message_item(const std::string& id, const std::string& text, const char* status) {
    return json{{"id", id},
                {"type", "message"},
                {"status", status},
                {"role", "assistant"},
                {"content", json::array({output_text(text)})}};
  }
  static json call_item(const std::string& id, const TurnToolCall& call, const char* status) {
    return json{{"id", id},          {"type", "function_call"},    {"status", status},
                {"arguments", call.arguments}, {"call_id", call.id}, {"name", call.name}};
  }

  std::string event(const std::string& type, json fields) {
    json data{{"type", type}, {"sequence_number", sequence_++}};
    for (auto it = fields.begin(); it != fields.end(); ++it) data[it.key()] = it.value();
    return "event: " + type + "\ndata: " + python_dumps(data) + "\n\n";
  }

  /** Opens a reasoning or message item (closing the open one). */
  std::string open(const std::string& kind) {
    std::string out = close("completed");
    open_ = kind;
    open_id_ = new_id(kind == "message" ? "msg_" : "rs_");
    open_text_.clear();
    json item = kind == "message" ? json{{"id", open_id_}, {"type", "message"}, {"status", "in_progress"},
                                         {"role", "assistant"}, {"content", json::array()}}
                                  : reasoning_item(open_id_, "", "in_progress");
    json part = kind == "message" ? output_text("") : json{{"type", "reasoning_text"}, {"text", ""}};
    out += event("response.output_item.added", {{"output_index", items_.size()}, {"item", item}});
    out += event("response.content_part.added",
                 {{"item_id", open_id_}, {"output_index", items_.size()}, {"content_index", 0}, {"part", part}});
    return out;
  }

  std::string close(const char* status) {
    if (open_.empty()) return "";
    std::string out;
    json where{{"item_id", open_id_}, {"output_index", items_.size()}, {"content_index", 0}};
    json part, item;
    if (open_ == "message") {
      json done = where;
      done["text"] = open_text_;
      done["logprobs"] = json::array();
      out += event("response.output_text.done", done);
      part = output_text(open_text_);
      item = message_item(open_id_, open_text_, status);
    } else {
      json done = where;
      done["text"] = open_text_;
      out += event("response.reasoning_text.done", done);
      part = json{{"type", "reasoning_text"}, {"text", open_text_}};
      item = reasoning_item(open_id_, open_text_, "completed");
    }
    json part_done = where;
    part_done["part"] = part;
    out += event("response.content_part.done", part_done);
    out += event("response.output_item.done", {{"output_index", items_.size()}, {"item", item}});
    items_.push_back(std::move(item));
    open_.clear();
    return out;
  }

  json response(const std::optional<TurnResult>& r, const char* status) const {
    json o = json::object();
    o["id"] = id_;
    o["object"] = "response";
    o["created_at"] = created_;
    o["status"] = status;
    o["background"] = false;
    o["error"] = nullptr;
    o["incomplete_details"] = r && r->end == TurnEnd::max_tokens ? json{{"reason", "max_output_tokens"}} : json(nullptr);
    o["instructions"] = echo_.instructions;
    o["max_output_tokens"] = echo_.max_output_tokens;
    o["model"] = echo_.model;
    o["output"] = r ? items_ : json::array();
    o["parallel_tool_calls"] = true;
    o["previous_response_id"] = echo_.previous_response_id;
    o["reasoning"] = echo_.reasoning;
    o["store"] = echo_.store;
    o["temperature"] = echo_.temperature;
    o["text"] = json{{"format", {{"type", "text"}}}};
    o["tool_choice"] = echo_.tool_choice;
    o["tools"] = echo_.tools;
    o["top_p"] = echo_.top_p;
    o["truncation"] = "disabled";
    o["usage"] = r ? usage_json(*r) : json(nullptr);
    o["user"] = nullptr;
    o["metadata"] = json::object();
    return o;
  }

  /** Stores the conversation with this turn's answer, as a chat client would send it back. */
  void remember(const TurnResult& r) {
    if (!echo_.store) return;
    json m{{"role", "assistant"}, {"content", r.text}};
    if (!r.reasoning.empty()) m["reasoning_content"] = r.reasoning;
    if (!r.tool_calls.empty()) {
      json calls = json::array();
      for (const auto& c : r.tool_calls)
        calls.push_back(json{{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
      m["tool_calls"] = std::move(calls);
    }
    json messages = conversation_;
    messages.push_back(std::move(m));
    store_->put(id_, std::move(messages));
  }

  Echo echo_;
  std::shared_ptr<ResponseStore> store_;
  json conversation_;
  std::string id_;
  int64_t created_;
  json items_ = json::array();
  std::string open_, open_id_, open_text_;  // the reasoning or message item being streamed
  int64_t sequence_ = 0;
};

Echo make_echo(const json& body, const CompletionRequest& r) {
  Echo e;
  e.model = r.model;
  auto copy = [&](const char* key, json fallback) {
    const json* v = find(body, key);
    return v ? *v : fallback;
  };
  e.instructions = copy("instructions", nullptr);
  e.max_output_tokens = copy("max_output_tokens", nullptr);
  e.previous_response_id = copy("previous_response_id", nullptr);
  e.tools = copy("tools", json::array());
  e.tool_choice = copy("tool_choice", "auto");
  e.reasoning = copy("reasoning", json{{"effort", nullptr}, {"summary", nullptr}});
  e.temperature = r.temperature;
  e.top_p = r.top_p;
  const json* store = find(body, "store");
  e.store = store ? store->get<bool>() : true;
  return e;
}

}  // namespace

void ResponseStore::put(const std::string& id, json messages) {
  std::lock_guard lock(mutex_);
  if (capacity_ == 0) return;
  while (order_.size() >= capacity_) {
    conversations_.erase(order_.front());
    order_.pop_front();
  }
  order_.push_back(id);
  conversations_[id] = std::move(messages);
}

std::optional<json> ResponseStore::get(const std::string& id) const {
  std::lock_guard lock(mutex_);
  auto it = conversations_.find(id);
  if (it == conversations_.end()) return std::nullopt;
  return it->second;
}

ResponsesTranslation responses_to_chat(const json& body, const ResponseStore& store) {
  ResponsesTranslation t;
  json& chat = t.chat;
  chat = json::object();
  if (const json* model = find(body, "model")) {
    if (!model->is_string()) bad("model", "must be a string");
    chat["model"] = *model;
  }
  if (const json* b = find(body, "background"); b && *b != false)
    bad("background", "background responses are not supported by this server");
  if (const json* s = find(body, "store"); s && !s->is_boolean()) bad("store", "must be a boolean");
  const json* format = text_format(body);

  json messages = json::array();
  if (const json* prev = find(body, "previous_response_id")) {
    if (!prev->is_string()) bad("previous_response_id", "must be a string");
    auto stored = store.get(prev->get<std::string>());
    if (!stored)
      bad("previous_response_id", "Previous response with id '" + prev->get<std::string>() +
                                      "' not found (this server keeps its recent responses in memory)");
    messages = std::move(*stored);
  }
  const json* input = find(body, "input");
  if (!input) bad("input", "Field required");
  if (input->is_string()) {
    messages.push_back(json{{"role", "user"}, {"content", *input}});
  } else if (input->is_array()) {
    InputTranslator items;
    for (size_t i = 0; i < input->size(); ++i) items.item((*input)[i], at("input", i));
    for (auto& m : items.finish()) messages.push_back(std::move(m));
  } else {
    bad("input", "must be a string or a list of input items");
  }
  if (messages.empty()) bad("input", "must not be empty");
  t.conversation = messages;
  if (const json* instructions = find(body, "instructions")) {
    if (!instructions->is_string()) bad("instructions", "must be a string");
    messages.insert(messages.begin(), json{{"role", "system"}, {"content", *instructions}});
  }
  chat["messages"] = std::move(messages);

  json tools = apply_tool_choice(body, chat_tools(body));
  if (const json* c = find(body, "tool_choice"); c && (*c == "required" || c->is_object()) && tools.is_array() &&
      !tools.empty())
    chat["tool_choice"] = "required";
  if (tools.is_array() && !tools.empty()) chat["tools"] = std::move(tools);
  if (const json* n = find(body, "max_output_tokens")) {
    if (!n->is_number_integer() || n->get<int64_t>() < 1) bad("max_output_tokens", "must be a positive integer");
    chat["max_tokens"] = *n;
  }
  for (const char* key : {"stream", "temperature", "top_p", "top_k", "min_p", "seed"})
    if (const json* v = find(body, key)) chat[key] = *v;
  if (format) chat["response_format"] = *format;
  if (json kwargs = template_kwargs(body); !kwargs.empty()) chat["chat_template_kwargs"] = std::move(kwargs);
  return t;
}

void ResponsesApi::handle(const ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (req.body.size() > ctx.options.max_body_bytes) {
    res.set_header("Connection", "close");
    res.status = 413;
    res.set_content(
        python_dumps(error_body(413, "request body is larger than " + std::to_string(ctx.options.max_body_bytes) + " bytes")),
        "application/json");
    return;
  }
  json body;
  ResponsesTranslation t;
  CompletionRequest request;
  try {
    body = parse_request_body(req.body);
    t = responses_to_chat(body, *store_);
    request = parse_completion_body(t.chat, Endpoint::chat, ctx.options);
  } catch (const HttpError& e) {
    ctx.log.debug(std::string("rejected request: ") + e.what());
    res.status = e.status();
    res.set_content(python_dumps(error_body(e.status(), e.what(), e.param())), "application/json");
    return;
  }
  auto renderer = std::make_shared<ResponsesRenderer>(make_echo(body, request), store_, std::move(t.conversation));
  serve_turn(ctx, req, res, std::move(request), renderer);
}

}  // namespace mlxrt::server
