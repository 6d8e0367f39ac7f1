#pragma once
/** Loading a model: directory -> config -> resolved profile -> weights bound to the family graph. */
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mlxrt/io/model_config.h"
#include "mlxrt/io/weights.h"
#include "mlxrt/model/causal_lm.h"
#include "mlxrt/model/nn/lora.h"
#include "mlxrt/model/nn/weight_binder.h"
#include "mlxrt/model/parallel.h"
#include "mlxrt/model/profile.h"

namespace mlxrt::model {

struct LoadOptions {
  std::vector<ModelProfile> artifact_profiles;  // e.g. from --profile-file
  bool lazy = false;                            // leave weights unread until first use
  std::filesystem::path adapter_path;           // an mlx_lm.lora adapter directory (empty: none)
  /** This process's part of a distributed run (sharded_load); none: the whole model. */
  std::optional<Parallel> parallel;
  /** Streamed experts: read the next MoE block's likely experts ahead (nn::ExpertStore). */
  bool expert_prefetch = false;
  /** Our CPU kernels where they give MLX's bytes (kernels/cpu/matmul.h), as the
   * environment asks (MLXRT_CPU_KERNELS, MLXRT_CPU_THREADS); false: MLX's kernels only. */
  bool cpu_kernels = true;
  /** l1 (the default): bit-exact against mlx-lm. l3: mlxrt's own measured kernels where it has
   * them (the x86-64 CPU's quantized matmuls, kernels/cpu/l3_matmul.h; on a CUDA GPU the affine
   * 4- and 8-bit matrix-vector products of decoding, kernels/cuda/affine_qmv.h), L1 everywhere else; the
   * resolved profile then declares {l3, no oracle, measured}. UnsupportedError where no L3 kernel
   * runs (another device or CPU). l2 is not a load option (it is an artifact's contract). */
  FidelityTier fidelity = FidelityTier::l1;
  /** Every floating tensor of the checkpoint read as float32 (quantized weights stay as they are;
   * their scales and biases become float32), so MLX computes the whole model in float32: the
   * reference `mlxrt fidelity --float32-reference` measures both tiers against. */
  bool float32 = false;
  /** Every position computed with the arithmetic of a one-token decoding step (--spec-exact): a
   * layer whose matmul is not row-invariant here runs one row at a time, and each query attends
   * alone over its prefix. Then any prefill chunking, and a speculative step's verification, give
   * the bytes of decoding one token at a time (what mlx-lm computes with prefill_step_size 1).
   * CPU or CUDA, L1, one process, no adapter, and the families tests/generate/test_spec_exact.py
   * and test_mtp.py check. */
  bool row_exact = false;
  /** Bind the checkpoint's native multi-token-prediction head too (--mtp: qwen3_5, qwen3_5_moe,
   * qwen3_next; CausalLM::multi_token_predictor). WeightsError naming what is missing when the
   * checkpoint has no complete head; UnsupportedError for a family without one. */
  bool multi_token_prediction = false;
};

/** The CPU kernels a model loaded with `options` computes with (null: MLX's own). */
std::shared_ptr<const kernels::cpu::CpuKernels> cpu_kernels_for(const LoadOptions& options);
/** Whether a model loaded with `options` computes its few-row affine quantized products with
 * mlxrt's CUDA kernel (kernels/cuda/affine_qmv.h): --fidelity l3 on a CUDA GPU. */
bool gpu_l3_for(const LoadOptions& options);

struct LoadedModel {
  io::ModelConfig config;
  ResolvedProfile profile;
  std::unique_ptr<CausalLM> model;
  /** The PRNG keys mlx-lm's shard() draws (shard_linear builds each sharded layer anew); 0 unless
   * tensor parallel. */
  int shard_draws = 0;
};

/** Resolves the config and profile only (no weights are read). */
std::pair<io::ModelConfig, ResolvedProfile> resolve_model(const std::filesystem::path& path,
                                                          const LoadOptions& options = {});

LoadedModel load_model(const std::filesystem::path& path, const LoadOptions& options = {});

/** A checkpoint bound to its family's graph as load_model binds it (lazily, strictly), with what
 * the binding saw (with an adapter when given: each adapted module's delta, or a full
 * fine-tune's tensors in place of the base ones): every tensor the family took, named, in the order it took them (after the
 * family's sanitize), and the modules mlx.nn.quantize could quantize. What `convert` rewrites. */
struct BoundCheckpoint {
  io::ModelConfig config;
  std::vector<std::pair<std::string, mx::array>> tensors;
  std::vector<QuantizableModule> modules;
};
BoundCheckpoint bind_checkpoint(const std::filesystem::path& path, const std::filesystem::path& adapter_path = {});

/** A model and, beside it, the same model with each named adapter applied: every model is bound
 * to the same base tensors (each read once; tensors a family's sanitize rewrites, such as stacked
 * experts, are made per model). */
struct AdaptedModels {
  LoadedModel base;  // with options.adapter_path's adapter when given
  std::vector<std::pair<std::string, std::unique_ptr<CausalLM>>> adapted;  // in the order given
  /** The model of mixed-adapter batches (nn/adapter_rows.h): slot 0 is `base` (its adapter, if
   * any), slot i the i-th of `adapted`; `rows` says which slot each row of its next forward call
   * runs. Null, with `mixed_unavailable` saying why, when some adapter is a full fine-tune (each
   * has its own base tensors). */
  std::unique_ptr<CausalLM> mixed;
  std::shared_ptr<nn::AdapterRows> rows;
  std::string mixed_unavailable;
};

/** Adapter names of --adapters, checked: non-empty, without '@' or '/', not "default_model", each
 * once. UsageError naming --adapters and the name. */
void check_adapter_names(const std::vector<std::pair<std::string, std::filesystem::path>>& adapters);

/** load_model plus one model per (name, adapter directory). Every adapter's config and file header
 * are checked before any weight is read; an adapter made for another base model (tensors of other
 * shapes, or for modules the model lacks) is a WeightsError naming the adapter. */
AdaptedModels load_model_with_adapters(const std::filesystem::path& path, const LoadOptions& options,
                                       const std::vector<std::pair<std::string, std::filesystem::path>>& adapters);

/** The adapter of options.adapter_path (null when none), its config and file header checked;
 * read before any weight of the model is. */
std::shared_ptr<nn::Adapter> load_adapter(const LoadOptions& options);

/** Readies `adapter` for binding the model of `config` from `weights`: the model's layer count
 * (the adapted layers are the last num_layers), and a full fine-tune's tensors in place of the
 * base ones (WeightsError naming the tensor when the base has no such tensor or another shape). */
void prepare_adapter(nn::Adapter& adapter, const io::ModelConfig& config, io::WeightMap& weights);

}  // namespace mlxrt::model
