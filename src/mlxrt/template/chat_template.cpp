#include "mlxrt/template/chat_template.h"

#include "mlxrt/template/interpreter.h"
#include "mlxrt/template/lexer.h"
#include "mlxrt/template/parser.h"

namespace mlxrt::tmpl {

using nlohmann::ordered_json;

ChatTemplate ChatTemplate::parse(std::string source, std::string name) {
  auto program = std::make_shared<detail::Program>();
  program->name = std::move(name);
  program->source = std::move(source);
  try {
    std::string normalized = detail::normalize_source(program->source);
    program->body = detail::parse_tokens(detail::tokenize(normalized));
  } catch (const detail::SyntaxFailure& f) {
    throw TemplateSyntaxError(f.message, program->name, f.line, f.column);
  }
  return ChatTemplate(std::move(program));
}

const std::string& ChatTemplate::source() const { return program_->source; }
const std::string& ChatTemplate::name() const { return program_->name; }

std::string ChatTemplate::render_with_context(const ordered_json& context, const RenderLimits& limits) const {
  if (!context.is_object() && !context.is_null()) throw UsageError("template context must be a JSON object");
  detail::Value ctx;
  try {
    ctx = detail::from_json(context.is_null() ? ordered_json::object() : context);
  } catch (const detail::OpError& e) {
    throw UsageError(std::string("template context: ") + e.what());
  }
  detail::Interpreter in(*program_, limits, std::move(ctx));
  return in.render();
}

namespace {

/** transformers drops message keys whose value is None, then copies reasoning under the names
 * templates read: {"thinking": r, **message, "reasoning_content": r}. */
ordered_json normalize_messages(const ordered_json& messages) {
  if (!messages.is_array()) throw UsageError("messages must be a JSON list of message objects");
  if (messages.empty())
    throw UsageError("Cannot apply chat template to an empty conversation. Provide at least one message.");
  ordered_json out = ordered_json::array();
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (!m.is_object()) throw UsageError("messages[" + std::to_string(i) + "] must be an object");
    ordered_json clean = ordered_json::object();
    for (auto it = m.begin(); it != m.end(); ++it)
      if (!it.value().is_null()) clean[it.key()] = it.value();
    const ordered_json* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"})
      if (clean.contains(key)) {
        reasoning = &clean[key];
        break;
      }
    if (reasoning) {
      ordered_json r = *reasoning;
      ordered_json aliased = ordered_json::object();
      aliased["thinking"] = r;
      for (auto it = clean.begin(); it != clean.end(); ++it) aliased[it.key()] = it.value();
      aliased["reasoning_content"] = r;
      clean = std::move(aliased);
    }
    out.push_back(std::move(clean));
  }
  return out;
}

}  // namespace

std::string ChatTemplate::render(const ordered_json& messages, const ChatTemplateOptions& opts,
                                 const ordered_json& special_tokens, const RenderLimits& limits) const {
  ordered_json context = ordered_json::object();
  if (special_tokens.is_object())
    for (auto it = special_tokens.begin(); it != special_tokens.end(); ++it) context[it.key()] = it.value();
  else if (!special_tokens.is_null()) throw UsageError("special tokens must be a JSON object");
  if (opts.extra.is_object())
    for (auto it = opts.extra.begin(); it != opts.extra.end(); ++it) context[it.key()] = it.value();
  else if (!opts.extra.is_null()) throw UsageError("template arguments must be a JSON object");
  context["messages"] = normalize_messages(messages);
  context["tools"] = opts.tools;
  context["documents"] = opts.documents;
  context["add_generation_prompt"] = opts.add_generation_prompt;
  return render_with_context(context, limits);
}

}  // namespace mlxrt::tmpl
