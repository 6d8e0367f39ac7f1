#pragma once
/** Small helpers shared by the CLI verbs. */
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <CLI/CLI.hpp>
#include <mlx/array.h>

#include "mlxrt/model/loader.h"
#include "mlxrt/model/nn/expert_store.h"

namespace mlxrt::cli {

/** "1,2,3" -> {1, 2, 3}; UsageError naming `flag` on anything else. */
std::vector<int32_t> parse_token_list(const std::string& text, const std::string& flag);

/** LoadOptions from the common --profile-file flag (empty: none). */
model::LoadOptions load_options(const std::string& profile_file);
/** --adapters NAME=DIR ... as (name, dir) pairs; UsageError for a spec that is not NAME=DIR. */
std::vector<std::pair<std::string, std::string>> parse_adapter_specs(const std::vector<std::string>& specs);
/** LoadOptions from --profile-file and --adapter-path (empty: none). */
model::LoadOptions load_options(const std::string& profile_file, const std::string& adapter_path);
/** --expert-memory GB in bytes (unset: every expert resident). UsageError unless positive. */
std::optional<uint64_t> expert_memory_bytes(std::optional<double> expert_memory_gb);

/** load_model with the common --profile-file, --expert-memory and --fidelity flags; `experts`
 * receives the streamed-experts store (null without --expert-memory). */
model::LoadedModel load_cli_model(const std::string& model, const std::string& profile_file,
                                  std::optional<double> expert_memory_gb,
                                  std::shared_ptr<model::nn::ExpertStore>& experts,
                                  const std::string& adapter_path = {},
                                  const std::optional<model::Parallel>& parallel = std::nullopt,
                                  bool expert_prefetch = false,
                                  model::FidelityTier fidelity = model::FidelityTier::l1, bool row_exact = false,
                                  bool multi_token_prediction = false);

/** The --fidelity help text. */
inline constexpr const char* kFidelityHelp =
    "Fidelity tier: l1 computes mlx-lm's bytes; l3 runs mlxrt's own faster kernels where it has them "
    "(the CPU's quantized matmuls), measured against l1 by `mlxrt fidelity`";
/** Adds --fidelity l1|l3 (or the option `name`) to a verb that loads a model for inference; its
 * default is `tier`'s value (l1 for the inference verbs). A value other than l1 or l3 is a parse
 * error naming the option and both values. */
CLI::Option* add_fidelity_flag(CLI::App* cmd, model::FidelityTier& tier, const std::string& name = "--fidelity",
                               const std::string& help = kFidelityHelp);
/** --fidelity's spelling of a tier: "l1", "l2", "l3". */
const char* fidelity_name(model::FidelityTier tier);
/** "l1" or "l3" as the tier; UsageError naming `flag` otherwise (l2 is an artifact's contract). */
model::FidelityTier parse_fidelity(const std::string& text, const std::string& flag);

/** Option checks with errors that say what was expected ("expected a number >= 0, got '-1'"),
 * where CLI11's NonNegativeNumber / PositiveNumber print a range up to the largest double. */
CLI::Validator non_negative_number();
CLI::Validator positive_number();

/** Adds --batch-order prompts-first|mlx-lm (generate::BatchGeneratorOptions::prompts_first);
 * its default is `prompts_first`'s value. Another value is a parse error naming both. */
CLI::Option* add_batch_order_option(CLI::App* cmd, bool& prompts_first);

/** Adds --join-prefill auto|between|beside|interleaved (generate::BatchGeneratorOptions::
 * join_prefill_beside and join_prefill_interleaved: beside sets the first, interleaved both; auto,
 * kept for scripts written when it chose by device, is interleaved); its default is the flags'
 * values. Another value is a parse error naming the four. */
CLI::Option* add_join_prefill_option(CLI::App* cmd, bool& beside, bool& interleaved);

/** Adds --first-tokens early|pipelined (generate::BatchGeneratorOptions::first_tokens_early); its
 * default is `early`'s value. Another value is a parse error naming both. */
CLI::Option* add_first_tokens_option(CLI::App* cmd, bool& early);

/** The --adapter-path help text, the same on every verb that takes it. */
inline constexpr const char* kAdapterPathHelp =
    "Optional path for the trained adapter weights and config (an mlx_lm.lora adapter directory: "
    "adapter_config.json and adapters.safetensors)";

/** The --expert-memory help text, the same on every verb that takes it. */
inline constexpr const char* kExpertMemoryHelp =
    "Stream mixture-of-experts weights from disk, keeping at most this many GB of experts in memory "
    "(an LRU cache over all layers); default: every expert resident";
inline constexpr const char* kExpertPrefetchHelp =
    "With --expert-memory: while a MoE layer computes, read the experts the next layer's router picks "
    "for this layer's input ahead, on a thread of its own (more bytes read, for fewer waits on disk)";

/** With streamed experts, prints the run's expert-cache line (hit rate, bytes read, resident) on stderr. */
void print_expert_stats(const std::shared_ptr<model::nn::ExpertStore>& experts);

/** Writes a safetensors output file (--out, --logprobs-file, --losses-file) atomically and durably:
 * under a ".NAME.partial-PID" name beside it (the leftovers of killed runs removed first), synced,
 * then renamed into place. UsageError naming `flag` and the path when it cannot be written. */
void write_safetensors_output(const std::string& path, const std::unordered_map<std::string, mlx::core::array>& tensors,
                              const std::string& flag);

}  // namespace mlxrt::cli
