// `mlxrt template --model DIR --messages FILE.json [--tools FILE.json] [--add-generation-prompt]
//  [--template-args JSON] [--chat-template NAME_OR_FILE]`: prints the prompt the model's chat
// template renders, exactly as transformers' apply_chat_template(tokenize=False) does.
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "mlxrt/cli/verbs.h"
#include "mlxrt/io/hf_cache.h"
#include "mlxrt/template/chat_template.h"
#include "mlxrt/util/errors.h"
#include "mlxrt/util/json_file.h"

namespace mlxrt::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

/** Parses JSON text; UsageError names the flag/file and the line:column of the error. */
ordered_json parse_json_text(const std::string& text, const std::string& what) {
  try {
    return ordered_json::parse(text);
  } catch (const ordered_json::out_of_range& e) {  // a number that overflows
    throw UsageError(what + ": invalid JSON: " + e.what());
  } catch (const ordered_json::parse_error& e) {
    std::size_t byte = e.byte == 0 ? 0 : e.byte - 1;
    int line = 1, column = 1;
    for (std::size_t i = 0; i < byte && i < text.size(); ++i) {
      if (text[i] == '\n') ++line, column = 1;
      else ++column;
    }
    std::string msg = e.what();
    if (auto p = msg.find("syntax error"); p != std::string::npos) msg = msg.substr(p);
    throw UsageError(what + ":" + std::to_string(line) + ":" + std::to_string(column) + ": invalid JSON: " + msg);
  }
}

ordered_json read_json_flag_file(const std::string& path, const std::string& flag) {
  if (!fs::exists(path)) throw UsageError(flag + ": no such file: " + path);
  return parse_json_text(read_text_file(path), flag + " " + path);
}

struct TemplateArgs {
  std::string model;
  std::string messages;
  std::string tools;
  std::string template_args;
  std::string chat_template;
  bool add_generation_prompt = false;
};

void run_template(const TemplateArgs& a) {
  ordered_json messages = read_json_flag_file(a.messages, "--messages");
  tmpl::ChatTemplateOptions opts;
  opts.add_generation_prompt = a.add_generation_prompt;
  if (messages.is_object()) {  // an OpenAI-style request body
    if (!messages.contains("messages"))
      throw UsageError("--messages " + a.messages + ": expected a list of messages or an object with 'messages'");
    if (messages.contains("tools")) opts.tools = messages["tools"];
    messages = ordered_json(messages["messages"]);
  }
  if (!messages.is_array()) throw UsageError("--messages " + a.messages + ": expected a JSON list of messages");
  if (!a.tools.empty()) {
    opts.tools = read_json_flag_file(a.tools, "--tools");
    if (!opts.tools.is_array() && !opts.tools.is_null())
      throw UsageError("--tools " + a.tools + ": expected a JSON list of tool schemas");
  }
  if (!a.template_args.empty()) {
    opts.extra = parse_json_text(a.template_args, "--template-args");
    if (!opts.extra.is_object()) throw UsageError("--template-args: expected a JSON object, e.g. '{\"enable_thinking\": false}'");
  }
  const fs::path model_dir = io::resolve_path_or_hf_repo(a.model);
  if (!fs::is_directory(model_dir)) throw UsageError("--model: not a directory: " + a.model);
  tmpl::ModelChatTemplates templates = tmpl::read_model_chat_templates(model_dir);
  bool have_tools = !opts.tools.is_null();
  std::optional<tmpl::ChatTemplate> chat;
  if (!a.chat_template.empty() && !templates.templates.count(a.chat_template)) {
    if (!fs::is_regular_file(a.chat_template))
      throw UsageError("--chat-template: '" + a.chat_template + "' is neither a template of the model nor a file");
    chat = tmpl::ChatTemplate::parse(read_text_file(a.chat_template), a.chat_template);
  } else {
    std::optional<std::string> name;
    if (!a.chat_template.empty()) name = a.chat_template;
    auto source = tmpl::select_chat_template(templates, name, have_tools);
    if (!source)
      throw UsageError("--model " + a.model + ": no chat template (tokenizer_config.json has no 'chat_template' and " +
                       "there is no chat_template.jinja); pass --chat-template FILE");
    std::string label = templates.source.empty() ? a.model : templates.source.string();
    chat = tmpl::ChatTemplate::parse(*source, label);
  }
  std::string out = chat->render(messages, opts, templates.special_tokens);
  std::cout.write(out.data(), static_cast<std::streamsize>(out.size()));
  std::cout.flush();
}

}  // namespace

void register_template(CLI::App& app) {
  auto* cmd = app.add_subcommand("template", "Render a model's chat template for a list of messages");
  auto a = std::make_shared<TemplateArgs>();
  cmd->add_option("--model,-m", a->model, "Model directory (tokenizer_config.json / chat_template.jinja), or a Hugging Face repo id in the local cache")->required();
  cmd->add_option("--messages", a->messages, "JSON file: a list of messages (or an object with 'messages')")->required();
  cmd->add_option("--tools", a->tools, "JSON file: a list of tool schemas");
  cmd->add_flag("--add-generation-prompt", a->add_generation_prompt, "End with the assistant turn's header");
  cmd->add_option("--template-args", a->template_args, "JSON object of extra template variables, e.g. {\"enable_thinking\": false}");
  cmd->add_option("--chat-template", a->chat_template, "A named template of the model, or a template file");
  cmd->callback([a] { run_template(*a); });
}

}  // namespace mlxrt::cli
