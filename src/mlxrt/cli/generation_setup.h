#pragma once
/** What `generate`, `chat` and `benchmark` share: sampling / penalty flags, the model + tokenizer
 * session, mlx-lm's PRNG position after model construction, chat-template prompts. */
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "mlxrt/generate/logits_processors.h"
#include "mlxrt/generate/random_state.h"
#include "mlxrt/generate/sampler.h"
#include "mlxrt/model/loader.h"
#include "mlxrt/model/nn/expert_store.h"
#include "mlxrt/template/chat_template.h"
#include "mlxrt/tokenizer/tokenizer.h"

namespace mlxrt::cli {

/** The sampler flags (mlx_lm.generate's names) and our penalty / bias flags (mlx_lm.server's
 * request fields as flags). */
struct SamplingFlags {
  generate::SamplerParams sampler{.top_p = 1.0};  // mlx_lm.generate's DEFAULT_TOP_P
  std::optional<double> repetition_penalty, presence_penalty, frequency_penalty;
  int repetition_context_size = 20, presence_context_size = 20, frequency_context_size = 20;
  std::string logit_bias;  // JSON object
};

/** Adds --temp --top-p --min-p --top-k --xtc-probability --xtc-threshold --min-tokens-to-keep
 * (when `sampler_flags`) and the penalty / --logit-bias flags (when `penalty_flags`). */
void add_sampling_flags(CLI::App* cmd, SamplingFlags& flags, bool sampler_flags, bool penalty_flags);

/** Checks every sampling / penalty flag that needs no model (UsageError naming the flag). */
void check_sampling_flags(const SamplingFlags& flags);

/** make_sampler with a bad value reported under its flag name. */
generate::Sampler make_cli_sampler(const generate::SamplerParams& params, std::shared_ptr<generate::RandomState> rng);

/** The logits processors' parameters the flags give (--logit-bias parsed, nothing checked). */
generate::LogitsProcessorParams cli_processor_params(const SamplingFlags& flags);

/** make_logits_processors from the flags, ids checked against the vocabulary. */
std::vector<generate::LogitsProcessor> make_cli_processors(const SamplingFlags& flags, std::optional<int> vocab_size);

/** How many keys mlx-lm's model construction draws from the global PRNG (every Linear and
 * Embedding initialises its weight, and a bias, at random; quantizing replaces each by a
 * QuantizedLinear / QuantizedEmbedding that draws once more). mlx_lm.generate and mlx_lm.chat
 * seed before loading, so the sampler's first key comes after these draws. Counted from the
 * checkpoint's tensors: a 2-D (or packed) `.weight` is one module, its `.scales` a quantized one,
 * its `.bias` one more draw. gemma3_text also builds an lm_head that a tied checkpoint lacks, and
 * gemma3 no vision tower; gemma4 counts only what its sanitize keeps (no towers, no key/value
 * projections in KV-shared layers). */
int model_construction_draws(const std::filesystem::path& model_dir);

/** The keys mlx-lm's sharded_load draws beyond load(): the model is built a second time (the first
 * plans the split) and shard() builds each sharded linear anew. 0 for one process. */
int sharded_load_draws(const std::filesystem::path& model_dir, const model::LoadedModel& loaded, bool distributed);

/** The keys mlx-lm's load_adapters draws (linear_to_lora_layers builds each LoRA / DoRA layer with
 * a base layer initialised at random and a random lora_a: two per adapted layer) for the adapter
 * of `adapter_path` (none: 0). Reads the adapter's config and file header only. */
int adapter_construction_draws(const std::string& adapter_path);

/** A model with its tokenizer and chat template, as mlx_lm's load() returns them. */
struct Session {
  std::filesystem::path dir;
  model::LoadedModel loaded;
  tokenizer::Tokenizer tokenizer;
  std::optional<tmpl::ChatTemplate> chat_template;
  nlohmann::ordered_json special_tokens;
  std::vector<int32_t> eos_token_ids;
  std::shared_ptr<model::nn::ExpertStore> experts;  // streamed experts (--expert-memory), else null
};

Session load_session(const std::string& model, const std::string& profile_file,
                     std::optional<double> expert_memory_gb = std::nullopt, const std::string& adapter_path = {},
                     const std::optional<model::Parallel>& parallel = std::nullopt, bool expert_prefetch = false,
                     model::FidelityTier fidelity = model::FidelityTier::l1, bool row_exact = false,
                     bool multi_token_prediction = false);

/** TokenizerWrapper.add_eos_token: an integer id, else the token's id (the unknown token's id
 * when it has none, as transformers does); UsageError naming `flag` when neither exists. */
void add_eos_token(Session& session, const std::string& token, const std::string& flag);

/** apply_chat_template(messages, tokenize=False, add_generation_prompt, continue_final_message,
 * **template_kwargs) as transformers renders it. */
std::string apply_chat_template(const Session& session, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, bool continue_final_message,
                                const nlohmann::ordered_json& template_kwargs);

/** The xtc_special_tokens mlx-lm passes: encode("\n") and the eos ids. */
std::vector<int32_t> xtc_special_tokens(const Session& session);

}  // namespace mlxrt::cli
