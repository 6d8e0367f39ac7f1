#pragma once
/** Everything the server loads once for its model: weights, tokenizer, chat templates, and what
 * mlx-lm's TokenizerWrapper infers from them (eos ids, reasoning markers, tool-call format). */
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlxrt/model/loader.h"
#include "mlxrt/model/nn/expert_store.h"
#include "mlxrt/server/logger.h"
#include "mlxrt/server/options.h"
#include "mlxrt/server/text_state_machine.h"
#include "mlxrt/server/tool_calls.h"
#include "mlxrt/template/chat_template.h"
#include "mlxrt/tokenizer/tokenizer.h"

namespace mlxrt::server {

struct ModelSession {
  std::filesystem::path dir;  // the resolved model directory
  model::LoadedModel loaded;
  tokenizer::Tokenizer tokenizer;
  tmpl::ModelChatTemplates templates;         // empty `templates`: no chat template
  std::map<std::string, tmpl::ChatTemplate> parsed_templates;
  std::vector<int32_t> eos_token_ids;
  MarkerSet markers;
  std::vector<int32_t> think_start_tokens, think_end_tokens;
  std::optional<ToolParser> tool_parser;
  std::shared_ptr<model::nn::ExpertStore> experts;  // streamed experts (--expert-memory), else null
  /** --draft-model: the model that drafts for speculative decoding (null: none). */
  std::unique_ptr<model::CausalLM> draft_model;
  /** --adapters: the model with each named adapter applied (sharing the base tensors), and the
   * adapters' directories. */
  std::map<std::string, std::unique_ptr<model::CausalLM>> adapter_models;
  std::map<std::string, std::filesystem::path> adapter_dirs;
  /** Why the model cannot batch (mlx_lm.server's is_batchable: a draft model, or a cache that does
   * not merge); nullopt when it can. */
  std::optional<std::string> unbatchable;
  /** The model the server was started with (--model, with its adapters and draft model), as
   * opposed to one loaded because a request named it. */
  bool startup = true;
  /** What the server's model pool and prompt cache know this model by ("" for the start-up model,
   * else its resolved directory). */
  std::string key;
  /** --adapters whose requests share batches: one model computing each batch row with its own
   * adapter (nn/adapter_rows.h), the rows' assignment, and each adapter's slot ("" is slot 0).
   * Null when the adapters cannot mix (a full fine-tune): a batch then
   * runs one adapter's model. */
  std::unique_ptr<model::CausalLM> mixed_model;
  std::shared_ptr<model::nn::AdapterRows> adapter_rows;
  std::map<std::string, int> adapter_slots;

  bool has_chat_template() const { return !templates.templates.empty(); }
  bool has_thinking() const { return markers.think.has_value(); }
  /** The template transformers would use for this request (tool_use when tools are given and the
   * model has one). Requires has_chat_template(). */
  const tmpl::ChatTemplate& template_for(bool have_tools) const;
  /** The model a request runs on: the plain one for "", else the adapter's. */
  model::CausalLM& model_for(const std::string& adapter) const;
};

/** Loads the model named by options.model, then the draft model (options.draft_model) as
 * mlx_lm.server loads it: a tokenizer whose vocabulary differs from the model's is only warned
 * about. Errors name the file or flag at fault. */
ModelSession load_model_session(const ServerOptions& options, Logger& log);

}  // namespace mlxrt::server
