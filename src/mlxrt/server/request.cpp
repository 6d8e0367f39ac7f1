// Request parsing: the fields mlx_lm.server's do_POST / validate_model_parameters read, with the
// same ranges, but with wrong types rejected instead of passed on (bool is not an int here).
#include "mlxrt/server/request.h"

#include <cmath>
#include <limits>

#include "mlxrt/generate/json_schema_check.h"
#include "mlxrt/server/http_error.h"

namespace mlxrt::server {

namespace {

using json = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& field, const std::string& message) {
  throw HttpError(400, field + " " + message, field);
}

// Python's json module stops near its recursion limit (1000) and mlx_lm.server then drops the
// connection; here a deeper body is a 400, refused while parsing: copying, rendering or dumping a
// JSON value recurses once per level, and a 16 MB body nested millions deep would overflow the stack.
constexpr int kMaxJsonDepth = 1000;

json parse_json_bounded(std::string_view text, const std::string& what, const std::string& param) {
  return json::parse(text.begin(), text.end(), [&](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth)
      throw HttpError(400, what + " nests deeper than " + std::to_string(kMaxJsonDepth) + " levels", param);
    return true;
  });
}

const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

bool get_bool(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) bad(name, "must be of type bool");
  return v->get<bool>();
}

int64_t as_int(const json& v, const std::string& name) {
  if (!v.is_number_integer()) bad(name, "must be of type int");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    bad(name, "is out of range");
  return v.get<int64_t>();
}

int get_int(const json& body, const char* name, int fallback, int64_t min_val,
            int64_t max_val = std::numeric_limits<int>::max()) {
  const json* v = field(body, name);
  if (!v) return fallback;
  int64_t value = as_int(*v, name);
  if (value < min_val) bad(name, "must be at least " + std::to_string(min_val));
  if (value > max_val) bad(name, "must be at most " + std::to_string(max_val));
  return static_cast<int>(value);
}

double get_number(const json& body, const char* name, double fallback,
                  std::optional<double> min_val = std::nullopt, std::optional<double> max_val = std::nullopt) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number()) bad(name, "must be of type (float, int)");
  double value = v->get<double>();
  if (!std::isfinite(value)) bad(name, "must be finite");
  auto fmt = [](double d) {
    std::string s = std::to_string(d);
    while (s.size() > 1 && s.back() == '0' && s[s.size() - 2] != '.') s.pop_back();
    return s;
  };
  if (min_val && value < *min_val) bad(name, "must be at least " + fmt(*min_val));
  if (max_val && value > *max_val) bad(name, "must be at most " + fmt(*max_val));
  return value;
}

std::optional<std::string> get_string(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad(name, "must be of type str");
  return v->get<std::string>();
}

std::vector<std::pair<int32_t, double>> parse_logit_bias(const json& v) {
  if (!v.is_object()) bad("logit_bias", "must be of type dict");
  std::vector<std::pair<int32_t, double>> out;
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& key = it.key();
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != key.size() || id < 0 || id > std::numeric_limits<int32_t>::max())
      bad("logit_bias", "must be a dict of int to float (key \"" + key + "\" is not a token id)");
    if (!it.value().is_number() || !std::isfinite(it.value().get<double>()))
      bad("logit_bias", "must be a dict of int to float (the value for " + key + " is not a finite number)");
    out.emplace_back(static_cast<int32_t>(id), it.value().get<double>());
  }
  return out;
}

std::vector<std::string> parse_stop(const json& body) {
  const json* v = field(body, "stop");
  if (!v) return {};
  if (v->is_string()) {
    auto s = v->get<std::string>();
    return s.empty() ? std::vector<std::string>{} : std::vector<std::string>{s};
  }
  if (!v->is_array()) bad("stop", "must be a string or a list of strings");
  std::vector<std::string> out;
  for (const auto& item : *v) {
    if (!item.is_string()) bad("stop", "must be a string or a list of strings");
    if (item.get_ref<const std::string&>().empty()) bad("stop", "must not contain empty strings");
    out.push_back(item.get<std::string>());
  }
  return out;
}

/** mlx_lm's process_message_content: text parts joined, null content as "", tool-call arguments
 * given as JSON text decoded (the chat templates index into them). */
json normalize_message(const json& message, size_t index) {
  const std::string where = "messages[" + std::to_string(index) + "]";
  if (!message.is_object()) bad(where, "must be an object");
  auto role = message.find("role");
  if (role == message.end() || !role->is_string()) bad(where + ".role", "must be of type str");
  json out = message;
  auto content = message.find("content");
  if (content == message.end() || content->is_null()) {
    out["content"] = "";
  } else if (content->is_array()) {
    std::string text;
    for (const auto& part : *content) {
      if (!part.is_object() || part.value("type", json()) != "text")
        bad(where + ".content", "Only 'text' content type is supported.");
      auto t = part.find("text");
      if (t == part.end() || !t->is_string()) bad(where + ".content", "text parts need a string 'text'");
      text += t->get<std::string>();
    }
    out["content"] = text;
  } else if (!content->is_string()) {
    bad(where + ".content", "must be a string, a list of text parts or null");
  }
  auto calls = out.find("tool_calls");
  if (calls != out.end() && !calls->is_null()) {
    if (!calls->is_array()) bad(where + ".tool_calls", "must be a list");
    for (auto& call : *calls) {
      if (!call.is_object()) bad(where + ".tool_calls", "must be a list of objects");
      auto fn = call.find("function");
      if (fn == call.end() || fn->is_null()) continue;
      if (!fn->is_object()) bad(where + ".tool_calls[].function", "must be an object");
      auto args = fn->find("arguments");
      if (args == fn->end() || !args->is_string() || args->get_ref<const std::string&>().empty()) continue;
      try {
        *args = parse_json_bounded(args->get_ref<const std::string&>(), where + ".tool_calls[].function.arguments",
                                   where + ".tool_calls[].function.arguments");
      } catch (const json::exception&) {
        bad(where + ".tool_calls[].function.arguments", "is not valid JSON");
      }
    }
  }
  return out;
}

/** OpenAI's tool_choice: "auto" | "none" | "required" | {"type": "function", "function": {"name": N}}. */
void parse_tool_choice(const json& choice, CompletionRequest& r) {
  const char* expected = "must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}";
  if (choice.is_string()) {
    const std::string c = choice.get<std::string>();
    if (c != "auto" && c != "none" && c != "required") bad("tool_choice", expected);
    if (c != "required") return;
    if (!r.tools.is_array()) bad("tool_choice", "is \"required\" but the request gives no tools");
    r.force_tool_call = true;
    return;
  }
  const json* fn = choice.is_object() ? field(choice, "function") : nullptr;
  const json* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
  if (!choice.is_object() || choice.value("type", json()) != "function" || !name || !name->is_string())
    bad("tool_choice", expected);
  if (r.tools.is_array())
    for (const auto& tool : r.tools)
      if (tool.is_object() && tool.contains("function") && tool["function"].is_object() &&
          tool["function"].value("name", json()) == *name) {
        r.tools = json::array({tool});
        r.force_tool_call = true;
        return;
      }
  bad("tool_choice.function.name", "names no tool in tools: '" + name->get<std::string>() + "'");
}

void parse_chat(const json& body, CompletionRequest& r) {
  auto messages = body.find("messages");
  if (messages == body.end()) throw HttpError(400, "Request did not contain messages", "messages");
  if (!messages->is_array()) bad("messages", "must be a list");
  if (messages->empty()) bad("messages", "must not be empty");
  r.messages = json::array();
  for (size_t i = 0; i < messages->size(); ++i) r.messages.push_back(normalize_message((*messages)[i], i));
  if (const json* tools = field(body, "tools")) {
    if (!tools->is_array()) bad("tools", "must be a list");
    for (const auto& t : *tools)
      if (!t.is_object()) bad("tools", "must be a list of objects");
    if (!tools->empty()) r.tools = *tools;
  }
  if (const json* choice = field(body, "tool_choice")) parse_tool_choice(*choice, r);
  if (const json* mapping = field(body, "role_mapping")) {
    if (!mapping->is_object()) bad("role_mapping", "must be of type dict");
    for (auto it = mapping->begin(); it != mapping->end(); ++it)
      if (!it.value().is_string()) bad("role_mapping", "values must be strings");
    r.role_mapping = *mapping;
  }
}

}  // namespace

void parse_response_format(const nlohmann::ordered_json& v, const std::string& where, CompletionRequest& r) {
  if (!v.is_object()) bad(where, "must be an object");
  auto type = v.find("type");
  if (type == v.end() || !type->is_string()) bad(where + ".type", "must be \"text\", \"json_object\" or \"json_schema\"");
  const std::string t = type->get<std::string>();
  if (t != "text" && t != "json_object" && t != "json_schema")
    bad(where + ".type", "must be \"text\", \"json_object\" or \"json_schema\" (got \"" + t + "\")");
  r.response_format = t;
  if (t != "json_schema") return;
  // OpenAI's chat shape nests the schema in "json_schema"; the Responses API's text.format has
  // its fields beside "type".
  const json* spec = &v;
  if (auto js = v.find("json_schema"); js != v.end()) {
    if (!js->is_object()) bad(where + ".json_schema", "must be an object");
    spec = &*js;
  }
  const std::string at = spec == &v ? where : where + ".json_schema";
  auto schema = spec->find("schema");
  if (schema == spec->end()) bad(at + ".schema", "is required for type \"json_schema\"");
  if (!schema->is_object() && !schema->is_boolean()) bad(at + ".schema", "must be a JSON schema object");
  if (auto strict = spec->find("strict"); strict != spec->end() && !strict->is_null()) {
    if (!strict->is_boolean()) bad(at + ".strict", "must be a boolean");
    r.json_schema_strict = strict->get<bool>();
  }
  r.json_schema = schema->dump();
  auto problem = generate::unsupported_schema_keyword(r.json_schema);
  if (!problem.empty()) bad(at + ".schema", "uses " + problem + ", which constrained decoding does not support");
}

namespace {

void parse_sampling(const json& body, const ServerOptions& d, CompletionRequest& r) {
  if (const json* v = field(body, "max_completion_tokens")) {
    int64_t n = as_int(*v, "max_completion_tokens");
    if (n < 1) bad("max_completion_tokens", "must be at least 1");
    if (n > std::numeric_limits<int>::max()) bad("max_completion_tokens", "is out of range");
    r.max_tokens = static_cast<int>(n);
  } else {
    r.max_tokens = get_int(body, "max_tokens", d.max_tokens, 1);
  }
  r.temperature = get_number(body, "temperature", d.temp, 0.0);
  r.top_p = get_number(body, "top_p", d.top_p, 0.0, 1.0);
  r.top_k = get_int(body, "top_k", d.top_k, 0);
  r.min_p = get_number(body, "min_p", d.min_p, 0.0, 1.0);
  r.num_draft_tokens = get_int(body, "num_draft_tokens", d.num_draft_tokens, 0);
  r.repetition_penalty = get_number(body, "repetition_penalty", 0.0, 0.0);
  r.repetition_context_size = get_int(body, "repetition_context_size", 20, 1);
  r.presence_penalty = get_number(body, "presence_penalty", 0.0);
  r.presence_context_size = get_int(body, "presence_context_size", 20, 1);
  r.frequency_penalty = get_number(body, "frequency_penalty", 0.0);
  r.frequency_context_size = get_int(body, "frequency_context_size", 20, 1);
  r.xtc_probability = get_number(body, "xtc_probability", 0.0, 0.0, 1.0);
  r.xtc_threshold = get_number(body, "xtc_threshold", 0.1, 0.0, 1.0);
  r.logprobs = get_bool(body, "logprobs", false);
  if (const json* v = field(body, "top_logprobs")) {
    int64_t n = as_int(*v, "top_logprobs");
    if (n != -1 && (n < 0 || n > 11)) bad("top_logprobs", n < 0 ? "must be at least 0" : "must be at most 11");
    r.top_logprobs = static_cast<int>(n);
  }
  if (const json* v = field(body, "seed")) r.seed = as_int(*v, "seed");
  if (const json* v = field(body, "logit_bias")) r.logit_bias = parse_logit_bias(*v);
  if (const json* v = field(body, "response_format")) parse_response_format(*v, "response_format", r);
}

}  // namespace

CompletionRequest parse_completion_request(std::string_view text, Endpoint endpoint, const ServerOptions& d) {
  return parse_completion_body(parse_request_body(text), endpoint, d);
}

nlohmann::ordered_json parse_request_body(std::string_view text) {
  json body;
  try {
    body = parse_json_bounded(text, "the request body", "");
  } catch (const json::exception& e) {
    throw HttpError(400, std::string("Invalid JSON in request body: ") + e.what());
  }
  if (!body.is_object()) throw HttpError(400, "Request should be a JSON dictionary");
  return body;
}

CompletionRequest parse_completion_body(const nlohmann::ordered_json& body, Endpoint endpoint,
                                        const ServerOptions& d) {

  CompletionRequest r;
  r.endpoint = endpoint;
  r.stream = get_bool(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "must be of type dict");
    r.include_usage = get_bool(*so, "include_usage", false);
  }
  if (auto model = get_string(body, "model")) r.model = *model;
  r.adapter = get_string(body, "adapters");
  r.draft_model = get_string(body, "draft_model");
  parse_sampling(body, d, r);
  if (const json* v = field(body, "chat_template_kwargs")) {
    if (!v->is_object()) bad("chat_template_kwargs", "must be of type dict");
    r.chat_template_kwargs = *v;
  }
  r.stop = parse_stop(body);

  if (endpoint == Endpoint::chat) {
    parse_chat(body, r);
  } else {
    auto prompt = body.find("prompt");
    if (prompt == body.end()) throw HttpError(400, "Request did not contain a prompt", "prompt");
    if (!prompt->is_string()) bad("prompt", "must be of type str");
    r.prompt = prompt->get<std::string>();
  }
  return r;
}

}  // namespace mlxrt::server
