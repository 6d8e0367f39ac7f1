// Model loading for the server, with mlx-lm's TokenizerWrapper inferences
// (mlx_lm/tokenizer_utils.py @ mlx-lm 0.32.2: _infer_thinking, _infer_tool_parser).
#include "mlxrt/server/model_session.h"

#include <algorithm>

#include "mlxrt/generate/batch_generator.h"
#include "mlxrt/generate/speculative.h"
#include "mlxrt/io/model_dir.h"
#include "mlxrt/model/expert_loading.h"
#include "mlxrt/model/parallel.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::server {

namespace {

/** The single-token reasoning markers mlx-lm recognises. */
void infer_thinking(ModelSession& s) {
  static constexpr std::pair<const char*, const char*> kPairs[] = {
      {"<think>", "</think>"}, {"<longcat_think>", "</longcat_think>"}, {"<|think:start|>", "<|think:end|>"}};
  for (auto [start, end] : kPairs) {
    auto a = s.tokenizer.token_to_id(start), b = s.tokenizer.token_to_id(end);
    if (a && b) {
      s.markers.think = std::make_pair(std::string(start), std::string(end));
      s.think_start_tokens = {*a};
      s.think_end_tokens = {*b};
      return;
    }
  }
}

void infer_tools(ModelSession& s, Logger& log) {
  std::string source;
  if (s.has_chat_template()) {
    auto it = s.templates.templates.find("default");
    source = it != s.templates.templates.end() ? it->second : s.templates.templates.begin()->second;
  }
  auto type = infer_tool_parser_type(source, s.tokenizer.config().raw,
                                     [&](const std::string& t) { return s.tokenizer.token_to_id(t).has_value(); });
  if (!type) return;
  s.tool_parser = make_tool_parser(*type);
  if (s.tool_parser)
    s.markers.tool_call = std::make_pair(s.tool_parser->start, s.tool_parser->end);
  else
    log.warning("the model's tool-call format '" + *type + "' is not supported: tool calls stay in the text");
}

/** The --draft-model directory, an error naming the flag when it is not one. */
std::filesystem::path draft_model_dir(const std::string& path) {
  try {
    return io::resolve_model_dir(path);
  } catch (const Error& e) {
    throw UsageError(std::string("--draft-model: ") + e.what());
  }
}

}  // namespace

const tmpl::ChatTemplate& ModelSession::template_for(bool have_tools) const {
  // transformers' choice: "tool_use" when tools are given and the model has it, else "default".
  auto it = have_tools ? parsed_templates.find("tool_use") : parsed_templates.end();
  if (it == parsed_templates.end()) it = parsed_templates.find("default");
  if (it == parsed_templates.end()) it = parsed_templates.begin();
  if (it == parsed_templates.end()) throw UsageError("the model has no chat template");
  return it->second;
}

model::CausalLM& ModelSession::model_for(const std::string& adapter) const {
  if (adapter.empty()) return *loaded.model;
  auto it = adapter_models.find(adapter);
  if (it == adapter_models.end()) throw UsageError("adapter '" + adapter + "' is not served here");
  return *it->second;
}

namespace {

/** The --adapters pairs, checked (model::check_adapter_names). */
std::vector<std::pair<std::string, std::filesystem::path>> adapter_list(const ServerOptions& options) {
  std::vector<std::pair<std::string, std::filesystem::path>> out(options.adapters.begin(), options.adapters.end());
  model::check_adapter_names(out);
  return out;
}

}  // namespace

ModelSession load_model_session(const ServerOptions& options, Logger& log) {
  if (options.model.empty()) throw UsageError("--model is required: the model directory to serve");
  auto dir = io::resolve_model_dir(options.model);
  // Checked before the model is loaded.
  const auto draft_dir = options.draft_model.empty() ? std::filesystem::path() : draft_model_dir(options.draft_model);
  std::shared_ptr<model::nn::ExpertStore> experts;
  model::LoadOptions load;
  load.adapter_path = options.adapter_path;
  load.expert_prefetch = options.expert_prefetch;
  load.fidelity = options.fidelity;
  if (options.parallel) load.parallel = *options.parallel;
  load.row_exact = options.row_exact;
  load.multi_token_prediction = options.mtp;
  const auto adapters = adapter_list(options);
  if (!adapters.empty() && options.expert_memory_bytes)
    throw UsageError("--adapters cannot be combined with --expert-memory");
  std::vector<std::pair<std::string, std::unique_ptr<model::CausalLM>>> adapted;
  std::unique_ptr<model::CausalLM> mixed;
  std::shared_ptr<model::nn::AdapterRows> rows;
  auto base = [&] {
    if (adapters.empty()) return model::load_model(dir, load, options.expert_memory_bytes, experts);
    auto models = model::load_model_with_adapters(dir, load, adapters);
    adapted = std::move(models.adapted);
    mixed = std::move(models.mixed);
    rows = std::move(models.rows);
    if (!mixed) log.info("requests for different adapters take turns by batch: " + models.mixed_unavailable);
    return std::move(models.base);
  }();
  ModelSession s{dir, std::move(base), tokenizer::Tokenizer::from_dir(dir), {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {},
                 {}, true, {}};
  for (auto& [name, m] : adapted) s.adapter_models.emplace(name, std::move(m));
  for (const auto& [name, adapter_dir] : adapters) s.adapter_dirs.emplace(name, adapter_dir);
  s.mixed_model = std::move(mixed);
  s.adapter_rows = std::move(rows);
  if (s.mixed_model)
    for (size_t i = 0; i < adapters.size(); ++i) s.adapter_slots.emplace(adapters[i].first, static_cast<int>(i) + 1);
  s.experts = std::move(experts);
  s.templates = tmpl::read_model_chat_templates(dir);
  if (!options.chat_template.empty()) {
    // --chat-template replaces the model's template (mlx-lm passes it as tokenizer_config's).
    s.templates.templates.clear();
    s.templates.templates["default"] = options.chat_template;
  }
  for (const auto& [name, text] : s.templates.templates)
    s.parsed_templates.emplace(name, tmpl::ChatTemplate::parse(text, name == "default" ? "chat_template" : name));
  s.eos_token_ids = s.tokenizer.eos_token_ids();
  for (int32_t id : s.loaded.config.eos_token_ids())
    if (std::find(s.eos_token_ids.begin(), s.eos_token_ids.end(), id) == s.eos_token_ids.end())
      s.eos_token_ids.push_back(id);
  infer_thinking(s);
  infer_tools(s, log);
  if (!options.draft_model.empty()) {
    // mlx-lm refuses each request; a server that could serve none of them stops here.
    generate::check_speculative_cache(*s.loaded.model);
    std::shared_ptr<model::nn::ExpertStore> none;
    model::LoadOptions draft_load;
    draft_load.fidelity = options.fidelity;
    s.draft_model = std::move(model::load_model(draft_dir, draft_load, std::nullopt, none).model);
    if (tokenizer::Tokenizer::from_dir(draft_dir).base_vocab_size() != s.tokenizer.base_vocab_size())
      log.warning("Draft model tokenizer does not match model tokenizer. Speculative decoding may not work as expected.");
  }
  // mlx_lm.server: is_batchable = draft_model is None and every cache of make_prompt_cache merges.
  s.unbatchable = s.draft_model                       ? std::optional<std::string>("a draft model is set")
                  : s.loaded.model->multi_token_predictor() ? std::optional<std::string>("the MTP head drafts (--mtp)")
                                                            : generate::batching_unsupported_reason(*s.loaded.model);
  return s;
}

}  // namespace mlxrt::server
