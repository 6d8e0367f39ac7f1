// Port of ResponseGenerator._tokenize and convert_chat (mlx_lm/server.py @ mlx-lm 0.32.2), the
// parts that apply to text-only models.
#include "mlxrt/server/prompt_builder.h"

#include "mlxrt/server/http_error.h"

namespace mlxrt::server {

namespace {

using json = nlohmann::ordered_json;

/** Index of the last occurrence of `seq` in `tokens`, -1 when absent (TokenizerWrapper._find). */
long rfind(const std::vector<int32_t>& tokens, const std::vector<int32_t>& seq) {
  if (seq.empty() || seq.size() > tokens.size()) return -1;
  for (long i = static_cast<long>(tokens.size() - seq.size()); i >= 0; --i)
    if (std::equal(seq.begin(), seq.end(), tokens.begin() + i)) return i;
  return -1;
}

std::string render_chat(const CompletionRequest& r, const ModelSession& s, const ServerOptions& o) {
  tmpl::ChatTemplateOptions opts;
  opts.add_generation_prompt = true;
  opts.tools = r.tools;
  json extra = o.chat_template_args.is_object() ? o.chat_template_args : json::object();
  if (r.chat_template_kwargs.is_object())
    for (auto it = r.chat_template_kwargs.begin(); it != r.chat_template_kwargs.end(); ++it) extra[it.key()] = it.value();
  // TokenizerWrapper.apply_chat_template turns thinking on whenever the model has it.
  if (!extra.contains("enable_thinking")) extra["enable_thinking"] = s.has_thinking();
  opts.extra = std::move(extra);
  try {
    return s.template_for(!r.tools.is_null()).render(r.messages, opts, s.templates.special_tokens);
  } catch (const tmpl::TemplateRaised& e) {
    throw HttpError(400, "the chat template rejected the messages: " + e.detail(), "messages");
  } catch (const tmpl::TemplateError& e) {
    throw HttpError(400, std::string("the chat template failed on these messages: ") + e.what(), "messages");
  }
}

}  // namespace

std::string convert_chat(const json& messages, const json& role_mapping) {
  json mapping = role_mapping;
  if (!mapping.is_object() || mapping.empty()) {
    mapping = {{"system_prompt",
                "A chat between a curious user and an artificial intelligence assistant. The assistant follows "
                "the given rules no matter what."},
               {"system", "ASSISTANT's RULE: "},
               {"user", "USER: "},
               {"assistant", "ASSISTANT: "},
               {"stop", "\n"}};
  }
  auto get = [&](const std::string& key) {
    auto it = mapping.find(key);
    return it != mapping.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  std::string prompt;
  for (const auto& m : messages) {
    auto content = m.find("content");
    prompt += get(m["role"].get<std::string>()) +
              (content != m.end() && content->is_string() ? content->get<std::string>() : std::string()) + get("stop");
  }
  prompt += get("assistant");
  auto end = prompt.find_last_not_of(" \t\n\r\f\v");
  return end == std::string::npos ? std::string() : prompt.substr(0, end + 1);
}

PreparedPrompt build_prompt(const CompletionRequest& r, const ModelSession& s, const ServerOptions& o) {
  PreparedPrompt out;
  if (r.endpoint == Endpoint::text) {
    out.tokens = s.tokenizer.encode(r.prompt, true);
  } else if (!s.has_chat_template()) {
    out.tokens = s.tokenizer.encode(convert_chat(r.messages, r.role_mapping), true);
  } else {
    out.tokens = s.tokenizer.encode(render_chat(r, s, o), false);
    if (s.has_thinking() && rfind(out.tokens, s.think_start_tokens) > rfind(out.tokens, s.think_end_tokens))
      out.initial_state = "reasoning";
  }
  if (out.tokens.empty()) throw HttpError(400, "the prompt is empty after tokenization", r.endpoint == Endpoint::text ? "prompt" : "messages");
  const int vocab = s.loaded.model->vocab_size();
  for (int32_t id : out.tokens)
    if (id < 0 || id >= vocab)
      throw HttpError(400, "the prompt holds token id " + std::to_string(id) + ", outside the model's vocabulary (" +
                               std::to_string(vocab) + ")");
  return out;
}

}  // namespace mlxrt::server
