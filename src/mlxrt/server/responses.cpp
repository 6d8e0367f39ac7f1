// Port of APIHandler.generate_response / completion_usage_response (mlx_lm/server.py @ 0.32.2).
#include "mlxrt/server/responses.h"

#include <ctime>

#include <sys/utsname.h>

#include <mlx/version.h>

#include "mlxrt/server/tool_calls.h"

namespace mlxrt::server {

namespace {

using json = nlohmann::ordered_json;

json usage_json(const Usage& u) {
  json usage = json::object();
  usage["prompt_tokens"] = u.prompt_tokens;
  usage["completion_tokens"] = u.completion_tokens;
  usage["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  if (u.cached_tokens) usage["prompt_tokens_details"] = json{{"cached_tokens", *u.cached_tokens}};
  return usage;
}

json top_entry(const TopToken& t) { return json{{"id", t.id}, {"token", t.token}, {"logprob", static_cast<double>(t.logprob)}}; }

json logprobs_json(const ChoiceContent& c) {
  json content = json::array();
  if (!c.top_tokens.empty()) {
    // mlx-lm shows the first of the top entries, with the whole list beside it.
    for (const auto& tops : c.top_tokens) {
      if (tops.empty()) {
        content.push_back(json::object());
        continue;
      }
      json entry = top_entry(tops.front());
      entry["top_logprobs"] = json::array();
      for (const auto& t : tops) entry["top_logprobs"].push_back(top_entry(t));
      content.push_back(std::move(entry));
    }
  } else {
    for (size_t i = 0; i < c.token_logprobs.size() && i < c.tokens.size(); ++i)
      content.push_back(json{{"id", c.tokens[i]}, {"logprob", static_cast<double>(c.token_logprobs[i])}});
  }
  return json{{"content", std::move(content)}};
}

}  // namespace

ResponseMeta make_response_meta(Endpoint endpoint, bool stream, const std::string& model,
                                const std::string& fingerprint) {
  ResponseMeta m;
  if (endpoint == Endpoint::chat) {
    m.id = "chatcmpl-" + uuid4();
    m.object_type = stream ? "chat.completion.chunk" : "chat.completion";
  } else {
    m.id = "cmpl-" + uuid4();
    m.object_type = "text_completion";
  }
  m.model = model;
  m.created = static_cast<int64_t>(std::time(nullptr));
  m.system_fingerprint = fingerprint;
  m.stream = stream;
  return m;
}

json build_response(const ResponseMeta& meta, const ChoiceContent& c) {
  json response = json::object();
  response["id"] = meta.id;
  response["system_fingerprint"] = meta.system_fingerprint;
  response["object"] = meta.object_type;
  response["model"] = meta.model;
  response["created"] = meta.created;
  json choice = json::object();
  choice["index"] = 0;
  choice["finish_reason"] = c.finish_reason ? json(*c.finish_reason) : json(nullptr);
  if (!c.top_tokens.empty() || !c.token_logprobs.empty()) choice["logprobs"] = logprobs_json(c);

  if (meta.object_type.rfind("chat.completion", 0) == 0) {
    json message = json::object();
    message["role"] = "assistant";
    if (!meta.stream)
      message["content"] = c.text.empty() ? json(nullptr) : json(c.text);
    else if (!c.text.empty())
      message["content"] = c.text;
    if (!c.reasoning.empty()) message["reasoning"] = c.reasoning;
    if (!c.tool_calls.empty()) message["tool_calls"] = c.tool_calls;
    choice[meta.stream ? "delta" : "message"] = std::move(message);
  } else {
    choice["text"] = c.text;
  }
  response["choices"] = json::array({std::move(choice)});
  if (!meta.stream && c.usage) response["usage"] = usage_json(*c.usage);
  return response;
}

json build_usage_chunk(const ResponseMeta& meta, const Usage& usage) {
  json response = json::object();
  response["id"] = meta.id;
  response["system_fingerprint"] = meta.system_fingerprint;
  response["object"] = "chat.completion";
  response["model"] = meta.model;
  response["created"] = meta.created;
  response["choices"] = json::array();
  response["usage"] = usage_json(usage);
  return response;
}

std::string system_fingerprint() {
  utsname u{};
  std::string platform = "unknown";
  if (uname(&u) == 0) platform = std::string(u.sysname) + "-" + u.release + "-" + u.machine;
  return std::string("mlxrt-0.1.0-") + mlx::core::version() + "-" + platform;
}

}  // namespace mlxrt::server
