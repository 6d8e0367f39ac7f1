// `mlxrt logits`: the parity interface. Writes tensor "logits" [T, vocab] in the model's dtype,
// from one forward over all tokens or, through a prompt cache, in chunks (--incremental: one token
// at a time), with mlx-lm's cache options: --max-kv-size, --kv-bits (maybe_quantize_kv_cache after
// every model call, as generate_step does) and --prompt-cache-file (continue a saved cache).
// With --mtp, the model's multi-token-prediction head's logits instead (tools/mtp_reference.py's).
#include <fstream>
#include <optional>
#include <sstream>

#include <mlx/io.h>
#include <mlx/ops.h>
#include <mlx/transforms.h>

#include "mlxrt/cache/prompt_cache.h"
#include "mlxrt/cache/quantized_kv_cache.h"
#include "mlxrt/cli/common.h"
#include "mlxrt/cli/distributed.h"
#include "mlxrt/cli/verbs.h"
#include "mlxrt/model/make_prompt_cache.h"
#include "mlxrt/model/mtp.h"

namespace mlxrt::cli {

namespace mx = mlx::core;

namespace {

struct Args {
  std::string model, tokens, out, profile_file, prompt_cache_file, adapter_path;
  bool incremental = false;
  bool mtp = false;  // --mtp
  std::optional<int> chunk_size, max_kv_size, kv_bits;
  std::optional<double> expert_memory;
  bool expert_prefetch = false;
  int kv_group_size = cache::kDefaultKvGroupSize;
  int quantized_kv_start = cache::kDefaultQuantizedKvStart;
  DistributedArgs dist;
  model::FidelityTier fidelity = model::FidelityTier::l1;  // --fidelity

  bool uses_cache() const {
    return incremental || chunk_size || max_kv_size || kv_bits || !prompt_cache_file.empty();
  }
};

model::CacheList initial_cache(const model::CausalLM& lm, const Args& a,
                               const std::optional<model::Parallel>& parallel) {
  if (a.prompt_cache_file.empty()) return model::make_prompt_cache(lm, a.max_kv_size);
  auto [cache, metadata] = cache::load_prompt_cache(a.prompt_cache_file);
  // A saved cache holds the whole model's layers and heads: each rank continues from its part.
  if (parallel)
    cache = shard_prompt_cache(std::move(cache), *parallel, static_cast<int>(model::make_prompt_cache(lm).size()),
                               a.prompt_cache_file);
  model::check_prompt_cache(lm, cache, a.prompt_cache_file);
  return std::move(cache);
}

mx::array compute_logits(model::CausalLM& lm, const std::vector<int32_t>& ids, const Args& a,
                         const std::optional<model::Parallel>& parallel) {
  const int total = static_cast<int>(ids.size());
  model::check_token_ids(lm, ids);
  mx::array tokens(ids.data(), {1, total}, mx::int32);
  if (!a.uses_cache()) return mx::squeeze(lm(tokens, nullptr), 0);
  const int chunk = a.incremental ? 1 : a.chunk_size.value_or(total);
  auto cache = initial_cache(lm, a, parallel);
  std::vector<mx::array> rows;
  for (int t = 0; t < total; t += chunk) {
    const int end = std::min(total, t + chunk);
    auto logits = mx::squeeze(lm(mx::slice(tokens, {0, t}, {1, end}), &cache), 0);  // [end - t, vocab]
    cache::maybe_quantize_kv_cache(cache, a.kv_bits, a.kv_group_size, a.quantized_kv_start);
    mx::eval(logits);
    rows.push_back(logits);
  }
  return mx::concatenate(rows, 0);
}

/** The MTP head's logits [T - 1, vocab] for entries j = 0..T-2 (token j + 1 with the main model's
 * hidden state at j), from fresh caches: the main model over tokens 0..T-2, the head over all
 * entries in one call. */
mx::array compute_mtp_logits(model::CausalLM& lm, const std::vector<int32_t>& ids) {
  const int total = static_cast<int>(ids.size());
  if (total < 2) throw UsageError("--tokens: --mtp needs at least two tokens (entry j pairs token j + 1 with position j)");
  auto* mtp = lm.multi_token_predictor();
  mx::array tokens(ids.data(), {1, total}, mx::int32);
  auto cache = model::make_prompt_cache(lm);
  auto hidden = mtp->forward_with_hidden(mx::slice(tokens, {0, 0}, {1, total - 1}), &cache).first;
  auto mtp_cache = mtp->make_mtp_cache();
  return mx::squeeze(mtp->predict(mx::slice(tokens, {0, 1}, {1, total}), hidden, &mtp_cache).second, 0);
}

void run(const Args& a) {
  if (a.mtp && a.uses_cache())
    throw UsageError("--mtp: the MTP head's logits come from one call over fresh caches (no cache options)");
  auto ids = parse_token_list(a.tokens, "--tokens");
  if (a.chunk_size && *a.chunk_size < 1) throw UsageError("--chunk-size must be at least 1");
  if (a.max_kv_size && *a.max_kv_size < 1) throw UsageError("--max-kv-size must be at least 1");
  cache::validate_kv_quantization(a.kv_bits, a.kv_group_size, a.quantized_kv_start);
  // Every rank computes the logits on its shard; rank 0 writes them.
  const auto dist_run = join_run(a.dist);
  QuietUnlessPrimary quiet(dist_run.primary());
  std::shared_ptr<model::nn::ExpertStore> experts;
  auto loaded = load_cli_model(a.model, a.profile_file, a.expert_memory, experts, a.adapter_path, dist_run.parallel,
                               a.expert_prefetch, a.fidelity, false, a.mtp);
  for (auto id : ids)
    if (id >= loaded.model->vocab_size())
      throw UsageError("--tokens: id " + std::to_string(id) + " is outside the vocabulary (size " +
                       std::to_string(loaded.model->vocab_size()) + ")");
  auto logits = a.mtp ? compute_mtp_logits(*loaded.model, ids) : compute_logits(*loaded.model, ids, a, dist_run.parallel);
  mx::eval(logits);
  if (dist_run.primary()) write_safetensors_output(a.out, {{"logits", logits}}, "--out");
  print_expert_stats(experts);
}

}  // namespace

void register_logits(CLI::App& app) {
  auto* cmd = app.add_subcommand("logits", "Write the model's logits for a token sequence (parity interface)");
  auto a = std::make_shared<Args>();
  cmd->add_option("--model,-m", a->model, "Model directory, HF cache snapshot, or Hugging Face repo id (org/name[@revision]) in the local cache")->required();
  cmd->add_option("--tokens", a->tokens, "Comma-separated token ids")->required();
  cmd->add_option("--out", a->out, "Output .safetensors file (tensor 'logits' [T, vocab])")->required();
  cmd->add_flag("--incremental", a->incremental, "One token at a time through the KV cache");
  cmd->add_flag("--mtp", a->mtp,
                "The multi-token-prediction head's logits [T - 1, vocab] instead: entry j drafts token j + 2 from "
                "token j + 1 and the main model's hidden state at j");
  cmd->add_option("--chunk-size", a->chunk_size, "Tokens per model call through the KV cache");
  cmd->add_option("--max-kv-size", a->max_kv_size, "Rotating KV cache of this many positions (as mlx-lm)");
  cmd->add_option("--expert-memory", a->expert_memory, kExpertMemoryHelp);
  cmd->add_flag("--expert-prefetch", a->expert_prefetch, kExpertPrefetchHelp);
  cmd->add_option("--kv-bits", a->kv_bits, "Quantize the KV cache to this many bits");
  cmd->add_option("--kv-group-size", a->kv_group_size, "Group size of the KV cache quantization")
      ->capture_default_str();
  cmd->add_option("--quantized-kv-start", a->quantized_kv_start, "Quantize once the cache holds this many positions")
      ->capture_default_str();
  cmd->add_option("--prompt-cache-file", a->prompt_cache_file, "Start from this saved prompt cache");
  cmd->add_option("--profile-file", a->profile_file, "JSON file with extra exact-artifact profiles");
  add_fidelity_flag(cmd, a->fidelity);
  cmd->add_option("--adapter-path", a->adapter_path, kAdapterPathHelp);
  add_distributed_flags(cmd, a->dist);
  cmd->callback([a] { run(*a); });
}

}  // namespace mlxrt::cli
