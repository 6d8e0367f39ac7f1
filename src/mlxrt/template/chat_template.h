#pragma once
/** Chat templates: a sandboxed interpreter for the Jinja subset that Hugging Face chat templates use,
 * rendering byte-for-byte what transformers' `apply_chat_template(..., tokenize=False)` renders
 * (jinja2 sandbox with trim_blocks, lstrip_blocks, loop controls, transformers' tojson,
 * raise_exception and strftime_now).
 *
 * A parsed ChatTemplate is immutable; render() may be called from many threads at once. */
#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "mlxrt/util/errors.h"

namespace mlxrt::tmpl {

/** A template failed to parse or render. The message starts with "<name>:<line>:<column>: ". */
class TemplateError : public Error {
 public:
  TemplateError(const std::string& message, std::string name, int line, int column)
      : Error(name + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message),
        name_(std::move(name)), line_(line), column_(column), detail_(message) {}
  const std::string& name() const { return name_; }
  int line() const { return line_; }
  int column() const { return column_; }
  /** The message without the location prefix. */
  const std::string& detail() const { return detail_; }

 private:
  std::string name_;
  int line_;
  int column_;
  std::string detail_;
};

/** The template source is not valid (lexing/parsing). */
class TemplateSyntaxError : public TemplateError {
 public:
  using TemplateError::TemplateError;
};

/** Rendering failed: a type error, an undefined value used further, a sandbox limit, ... */
class TemplateRenderError : public TemplateError {
 public:
  using TemplateError::TemplateError;
};

/** The template itself called raise_exception(message): the request is refused by the template
 * (a server answers 4xx with detail()). */
class TemplateRaised : public TemplateRenderError {
 public:
  using TemplateRenderError::TemplateRenderError;
};

/** Sandbox limits. Exceeding one is a TemplateRenderError, never a hang or a crash. */
struct RenderLimits {
  std::size_t max_output_bytes = 64u << 20;
  std::size_t max_loop_iterations = 1'000'000;  // all loops of one render together
  int max_call_depth = 200;                     // macro/call nesting
};

/** What apply_chat_template passes besides the messages. */
struct ChatTemplateOptions {
  bool add_generation_prompt = false;
  nlohmann::ordered_json tools;      // null, or a list of JSON schemas
  nlohmann::ordered_json documents;  // null, or a list of {title, text, ...}
  nlohmann::ordered_json extra;      // null or an object: template kwargs (enable_thinking, ...); override special tokens
};

namespace detail {
struct Program;
}

class ChatTemplate {
 public:
  /** Parses a template. Throws TemplateSyntaxError naming `name` and line:column. */
  static ChatTemplate parse(std::string source, std::string name = "chat_template");

  /** Renders as transformers' apply_chat_template(messages, tokenize=False) does: messages are
   * normalised first (keys whose value is null dropped, reasoning fields aliased as transformers
   * does), the context is {**special_tokens, messages, tools, documents, add_generation_prompt,
   * **extra}. `special_tokens` is an object such as read_special_tokens() returns (may be null). */
  std::string render(const nlohmann::ordered_json& messages, const ChatTemplateOptions& opts,
                     const nlohmann::ordered_json& special_tokens, const RenderLimits& limits = {}) const;

  /** Renders with exactly these top-level variables (an object), no normalisation. */
  std::string render_with_context(const nlohmann::ordered_json& context, const RenderLimits& limits = {}) const;

  const std::string& source() const;
  const std::string& name() const;

 private:
  explicit ChatTemplate(std::shared_ptr<const detail::Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const detail::Program> program_;
};

/** The chat templates and special tokens of a model directory, read without the tokenizer library:
 * tokenizer_config.json's `chat_template` (a string, or a list of {name, template}), overridden by
 * chat_template.jinja and additional_chat_templates/<name>.jinja when present (as transformers 5
 * loads them), and the named special tokens (bos_token, eos_token, unk_token, sep_token, pad_token,
 * cls_token, mask_token; AddedToken objects reduced to their content; nulls left out). */
struct ModelChatTemplates {
  std::map<std::string, std::string> templates;  // a single template is named "default"
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();
  std::filesystem::path source;                  // the file the default template came from
};

/** Reads the model directory's templates. ConfigError for malformed files; a directory without any
 * template gives an empty `templates`. */
ModelChatTemplates read_model_chat_templates(const std::filesystem::path& model_dir);

/** The special-token context values of tokenizer_config.json (and special_tokens_map.json). */
nlohmann::ordered_json read_special_tokens(const std::filesystem::path& model_dir);

/** Picks the template as transformers' get_chat_template does: `name` when given and present,
 * else "tool_use" when tools are given and it exists, else "default". UsageError when a given name
 * is not there; nullopt when the model has no template at all. */
std::optional<std::string> select_chat_template(const ModelChatTemplates& templates,
                                                const std::optional<std::string>& name,
                                                bool have_tools = false);

/** read_model_chat_templates + select_chat_template + parse (the parse error names the file). */
std::optional<ChatTemplate> load_chat_template(const std::filesystem::path& model_dir,
                                               std::optional<std::string> name = {},
                                               bool have_tools = false);

}  // namespace mlxrt::tmpl
