#pragma once
/** Binds a checkpoint's tensors to a model's parameters by name, as mlx-lm's strict
 * `load_weights` does: every parameter must be present with its exact shape, and every tensor
 * must be used. Problems are collected and reported together, listing the names. */
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mlxrt/io/model_config.h"
#include "mlxrt/io/tensor_slice.h"
#include "mlxrt/io/weights.h"
#include "mlxrt/model/parallel.h"

namespace mlxrt::kernels::cpu {
class CpuKernels;
}

namespace mlxrt::model {

namespace mx = mlx::core;

namespace nn {
class Adapter;
class AdapterRows;
class ExpertStreaming;
struct LoraDelta;
}

/** A mixed-adapter model's binding (nn/adapter_rows.h): the adapter of each slot (null for a slot
 * that runs the base layers) and the row assignment its layers read. */
struct AdapterSlots {
  std::vector<std::shared_ptr<nn::Adapter>> adapters;
  std::shared_ptr<nn::AdapterRows> rows;
};

/** A bound module that mlx.nn.quantize could quantize (the classes with `to_quantized`: Linear,
 * Embedding, SwitchLinear), noted as the family builds it so that `convert` can quantize or
 * dequantize exactly the modules mlx-lm would. */
struct QuantizableModule {
  enum class Kind { linear, embedding, switch_linear };
  std::string path;
  Kind kind = Kind::linear;
  std::optional<io::QuantSpec> spec;  // the checkpoint's packing, when it holds the module quantized
  std::shared_ptr<const nn::LoraDelta> lora;  // the adapter's delta on it, when bound with one
};

class WeightBinder {
 public:
  WeightBinder(io::WeightMap weights, const io::ModelConfig& config)
      : weights_(std::move(weights)), config_(config) {}

  /** Takes parameter `name`, which must have `shape`. Records a problem and returns a
   * placeholder when it is missing or mis-shaped (finish() then throws). */
  mx::array take(const std::string& name, const mx::Shape& shape);

  /** Takes `name` if the checkpoint holds it (optional parameters, e.g. biases). */
  std::optional<mx::array> take_if_present(const std::string& name, const mx::Shape& shape);

  bool has(const std::string& name) const { return weights_.count(name) > 0; }
  const io::WeightMap& remaining() const { return weights_; }
  /** Drops a tensor mlx-lm's `sanitize` removes (e.g. a tied lm_head.weight). */
  void discard(const std::string& name) { weights_.erase(name); }
  /** Renames a tensor, as a `sanitize` that rewrites key prefixes does (no-op when absent). */
  void rename(const std::string& from, const std::string& to) {
    auto node = weights_.extract(from);
    if (!node.empty()) {
      node.key() = to;
      weights_.insert(std::move(node));
    }
  }
  /** Drops every tensor whose name contains `part` (e.g. precomputed "rotary_emb.inv_freq"). */
  void discard_containing(std::string_view part) {
    std::erase_if(weights_, [&](const auto& entry) { return entry.first.find(part) != std::string::npos; });
  }
  /** Replaces a tensor's value (a sanitize's rewrite of a checkpoint layout, e.g. moveaxis). */
  void replace(const std::string& name, mx::array value);
  /** The names of the tensors not yet taken. */
  std::vector<std::string> names() const;

  /** mlx-lm's MoE sanitize for a checkpoint that stores experts one by one: for each (from, to)
   * projection name and each suffix ("weight", "scales", ...) that expert 0 holds, stacks
   * `experts`.{0..num_experts-1}.`from`.`suffix` into `into`.`to`.`suffix` (lazily, as mx.stack).
   * Returns whether anything was stacked. Throws WeightsError naming the tensor when an expert
   * lacks it or stores it with another shape or dtype (e.g. experts of mixed quantization). */
  bool stack_experts(const std::string& experts, const std::string& into, int num_experts,
                     const std::vector<std::pair<std::string, std::string>>& names,
                     const std::vector<std::string>& suffixes);
  /** Renames the tensors for which `rename` gives a new name (a sanitize that moves keys, e.g.
   * mistral3's "model.language_model." -> "language_model.model."); an empty result keeps one. */
  void rename_keys(const std::function<std::string(const std::string&)>& rename) {
    io::WeightMap out;
    for (auto& [name, tensor] : weights_) {
      auto to = rename(name);
      out.insert_or_assign(to.empty() ? name : to, tensor);
    }
    weights_ = std::move(out);
  }
  /** Adds tensor `from` under a second name `to`, if the checkpoint holds it (a sanitize that
   * copies a tensor, e.g. minicpm's missing lm_head.weight from the embedding). */
  void copy_tensor(const std::string& from, const std::string& to) {
    auto it = weights_.find(from);
    if (it != weights_.end()) weights_.insert_or_assign(to, it->second);
  }
  /** Takes tensor `name` out of the checkpoint for a family's sanitize to transform (nullopt when
   * absent); put() stores what the sanitize made of it. */
  std::optional<mx::array> pop(const std::string& name);
  void put(const std::string& name, mx::array a) { weights_.insert_or_assign(name, std::move(a)); }
  /** The saved shapes of `path`.weight/.scales, when the module was saved quantized. */
  std::optional<io::SavedQuantTensors> saved_quant(const std::string& path) const;
  const io::ModelConfig& config() const { return config_; }

  /** Every tensor bound so far (to evaluate them once, as mlx-lm's non-lazy load does). */
  const std::vector<mx::array>& taken() const { return taken_; }
  /** Their names, in the order the family took them (parallel to taken()). */
  const std::vector<std::string>& taken_names() const { return taken_names_; }
  /** Arrays a layer made from its tensors at load (the L3 kernels' packed weights): a non-lazy
   * load evaluates them with the taken tensors. */
  void derive(mx::array a) { derived_.push_back(std::move(a)); }
  /** A derived array replaced by another (a layer that re-derived it after sharding its tensors),
   * so that loading evaluates the new one only; `fresh` is added when `old` was not derived. */
  void rederive(const mx::array& old, mx::array fresh) {
    for (auto& a : derived_)
      if (a.id() == old.id()) {
        a = std::move(fresh);
        return;
      }
    derived_.push_back(std::move(fresh));
  }
  /** take() returns floating tensors as float32 (LoadOptions::float32). */
  void set_float32(bool on) { float32_ = on; }
  /** Every position computed as a one-token call would compute it (LoadOptions::row_exact). */
  void set_row_exact(bool on) { row_exact_ = on; }
  bool row_exact() const { return row_exact_; }
  /** Bind the checkpoint's multi-token-prediction head too (LoadOptions::multi_token_prediction):
   * the families that have one keep its `mtp.` tensors instead of dropping them. */
  void set_multi_token_prediction(bool on) { multi_token_prediction_ = on; }
  bool multi_token_prediction() const { return multi_token_prediction_; }
  const std::vector<mx::array>& derived() const { return derived_; }

  /** Notes a module mlx.nn.quantize could quantize (Linear::load, Embedding::load, SwitchLinear::load). */
  void note_quantizable(QuantizableModule module) { quantizable_.push_back(std::move(module)); }
  const std::vector<QuantizableModule>& quantizable() const { return quantizable_; }

  /** Throws WeightsError listing missing, mis-shaped and unexpected tensors, if any; then the
   * adapter's own check (its tensors that matched no layer). */
  void finish();

  /** An adapter (--adapter-path) whose deltas Linear::load / Embedding::load attach to the layers
   * it adapts, as mlx-lm's load_adapters wraps them. */
  void set_adapter(std::shared_ptr<nn::Adapter> adapter) { adapter_ = std::move(adapter); }
  nn::Adapter* adapter() const { return adapter_.get(); }
  /** Several adapters at once, one per slot, for a mixed-adapter model (instead of set_adapter). */
  void set_adapter_slots(AdapterSlots slots) { slots_ = std::move(slots); }
  const AdapterSlots* adapter_slots() const { return slots_.rows ? &slots_ : nullptr; }

  /** Streamed experts (--expert-memory): the switch layers leave their expert tensors in the
   * weight files and register them with this context's store. Null: every expert is resident. */
  void set_expert_streaming(nn::ExpertStreaming* streaming) { streaming_ = streaming; }
  nn::ExpertStreaming* expert_streaming() const { return streaming_; }

  /** The CPU kernels the quantized layers compute with where they give MLX's bytes (null: MLX's
   * own kernels everywhere). */
  void set_cpu_kernels(std::shared_ptr<const kernels::cpu::CpuKernels> k) { cpu_kernels_ = std::move(k); }
  const std::shared_ptr<const kernels::cpu::CpuKernels>& cpu_kernels() const { return cpu_kernels_; }
  /** --fidelity l3 on a CUDA GPU: the quantized layers compute with mlxrt's CUDA kernels where
   * they apply (kernels/cuda/affine_qmv.h), MLX's elsewhere. */
  void set_gpu_l3(bool on) { gpu_l3_ = on; }
  bool gpu_l3() const { return gpu_l3_; }

  /** The distributed split this process binds (none: the whole model). */
  void set_parallel(std::optional<Parallel> parallel) { parallel_ = std::move(parallel); }
  /** The group of a tensor-parallel run (null otherwise): the layers a family shards slice their
   * tensors for this rank. */
  const mx::distributed::Group* tensor_group() const {
    return parallel_ && parallel_->mode == Parallel::Mode::tensor ? &parallel_->group : nullptr;
  }
  /** The group of a pipeline-parallel run (null otherwise). */
  const mx::distributed::Group* pipeline_group() const {
    return parallel_ && parallel_->mode == Parallel::Mode::pipeline ? &parallel_->group : nullptr;
  }
  /** A taken tensor replaced by what the model keeps of it (this rank's shard), so that loading
   * evaluates the shard and the whole tensor is not held. */
  void retake(const mx::array& taken, const mx::array& kept) {
    for (auto& a : taken_)
      if (a.id() == taken.id()) a = kept;
  }
  /** Where the checkpoint's tensors lie in their files: with it, keep_shard reads a tensor that
   * no sanitize changed straight from its file, this rank's slice only. */
  void set_locations(io::TensorLocations locations);
  /** This rank's part of `taken` (tensor `name`, as take() returned it) along `axis` for the tensor
   * group (mlx's _shard): read from the file when the tensor is the checkpoint's own, else sliced
   * from it. Replaces `taken` among the taken tensors. ConfigError naming `name` when the axis does
   * not divide. */
  mx::array keep_shard(const std::string& name, const mx::array& taken, int axis);
  /** Keys from MLX's global PRNG that mlx-lm draws while sharding (shard_linear builds each new
   * layer with random parameters before the checkpoint's slices replace them): counted so that a
   * sampler seeded before loading starts where mlx-lm's does. */
  void count_shard_draws(int n) { shard_draws_ += n; }
  int shard_draws() const { return shard_draws_; }
  /** Drops every tensor under `prefix` (a pipeline stage's layers that another rank runs: mlx-lm
   * loads them non-strictly and never uses them). */
  void discard_prefix(const std::string& prefix) {
    std::erase_if(weights_, [&](const auto& entry) { return entry.first.rfind(prefix, 0) == 0; });
  }

 private:
  std::optional<Parallel> parallel_;
  int shard_draws_ = 0;
  io::TensorLocations locations_;
  std::unordered_map<std::string, std::uintptr_t> original_ids_;  // the checkpoint's arrays, by name
  io::WeightMap weights_;
  const io::ModelConfig& config_;
  std::vector<std::string> missing_;
  std::vector<std::string> misshaped_;
  std::vector<mx::array> taken_;
  std::vector<std::string> taken_names_;
  std::vector<mx::array> derived_;
  bool float32_ = false;
  bool row_exact_ = false;
  bool multi_token_prediction_ = false;
  std::vector<QuantizableModule> quantizable_;
  std::shared_ptr<nn::Adapter> adapter_;
  AdapterSlots slots_;
  nn::ExpertStreaming* streaming_ = nullptr;
  std::shared_ptr<const kernels::cpu::CpuKernels> cpu_kernels_;
  bool gpu_l3_ = false;
};

}  // namespace mlxrt::model
