#pragma once
/** Mixture-of-experts layers (mlx_lm/models/switch_layers.py): one stacked weight per projection,
 * [num_experts, out, in], applied per token to the experts its router picked with gather_mm /
 * gather_qmm. With many (token, expert) pairs, the pairs are sorted by expert first so that each
 * expert's weights are read once, then put back in token order, exactly as mlx-lm does. */
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <mlx/array.h>

#include "mlxrt/model/nn/expert_store.h"
#include "mlxrt/model/nn/linear.h"
#include "mlxrt/model/nn/weight_binder.h"

namespace mlxrt::model::nn {

namespace mx = mlx::core;

/** mlx-lm sorts the (token, expert) pairs when there are at least this many indices. */
inline constexpr int kSwitchSortThreshold = 64;

/** SwitchLinear / QuantizedSwitchLinear: `path`.weight [num_experts, out, in] (packed when the
 * checkpoint's quantization map quantizes `path`), optional `path`.bias [num_experts, out]. An nvfp4
 * layer may hold one tensor scale per expert, `path`.global_scale [num_experts] (mlx-lm's
 * quantize_model(..., global_scale=True)), which gather_qmm applies. */
class SwitchLinear {
 public:
  static SwitchLinear load(WeightBinder& w, const std::string& path, int input_dims, int output_dims,
                           int num_experts, bool bias);

  /** Where the elements of a sorted call come from (mixed-adapter batches): the token of each
   * (token, expert) pair and how many tokens the call has. */
  struct PairTokens {
    mx::array token_of;
    int num_tokens;
  };
  /** x [..., 1, in] (broadcast against indices) -> [..., k, 1, out] for the experts in `indices`.
   * `pairs`: given with sorted indices, for a mixed-adapter model's row selection. */
  mx::array operator()(const mx::array& x, const mx::array& indices, bool sorted_indices,
                       const std::optional<PairTokens>& pairs = std::nullopt) const;

  /** The quantization of this projection, if any (for checks across a block's projections). */
  const std::optional<Quantized>& quantized() const { return q_; }
  /** The per-expert nvfp4 tensor scales, if the layer holds them. */
  const std::optional<mx::array>& global_scale() const { return global_scale_; }

  /** Streamed experts: the tensors this projection left in the weight files (weight, scales,
   * biases, bias: those it has), empty when its experts are resident. */
  const std::vector<StreamedTensor>& streamed() const { return streamed_; }
  /** This projection over a compact stack of some experts: `arrays` from position `pos` on hold
   * its tensors in streamed() order; `pos` is advanced past them. */
  SwitchLinear with_experts(const std::vector<mx::array>& arrays, size_t& pos) const;
  /** shard_inplace(layer, shard): this rank's slice of every parameter (all-to-sharded: axis 1 of
   * weight/scales/biases [E, out, ...] and the last axis of bias [E, out]; sharded-to-all: the
   * last axis of each, bias whole). The layer itself does no communication. */
  void shard(WeightBinder& w, Shard shard, const std::string& path);
  /** bias /= n (gpt_oss.py's shard(): the sharded-to-all down projection's bias, which every rank
   * adds before the all_sum). */
  void divide_bias(int n) {
    if (bias_) bias_ = mx::divide(*bias_, mx::array(static_cast<float>(n), bias_->dtype()));
  }

 private:
  SwitchLinear(mx::array weight, std::optional<mx::array> bias, std::optional<Quantized> q,
               std::optional<mx::array> global_scale)
      : weight_(std::move(weight)), bias_(std::move(bias)), q_(std::move(q)), global_scale_(std::move(global_scale)) {}
  std::shared_ptr<const LoraDelta> lora_;  // an adapter's LoRASwitchLinear delta, if any
  std::shared_ptr<const SlotDeltas> slots_;  // a mixed-adapter model's deltas, by slot
  mx::array weight_;
  std::optional<mx::array> bias_;
  std::optional<Quantized> q_;
  std::optional<mx::array> global_scale_;
  std::vector<StreamedTensor> streamed_;
};

/** The activation between a SwitchGLU's projections. */
enum class SwitchActivation {
  swiglu,      // silu(gate) * up (mlx-lm's compiled swiglu), the default
  swiglu_oai,  // gpt-oss: clamped gate and up, (up + 1) * gate * sigmoid(1.702 * gate)
  geglu,       // gemma4_text: gelu_approx(gate) * up (its compiled geglu)
};

class SwitchGLU {
 public:
  /** Binds `path`.{gate_proj,up_proj,down_proj} (e.g. path "model.layers.0.mlp.switch_mlp"). */
  /** With streamed experts (the binder's ExpertStreaming), `top_k` (experts per token) sets the
   * smallest budget that can run this block. */
  static SwitchGLU load(WeightBinder& w, const std::string& path, int input_dims, int hidden_dims,
                        int num_experts, bool bias = false,
                        SwitchActivation activation = SwitchActivation::swiglu, int top_k = 0);

  /** x [..., D], indices [..., k] -> [..., k, D]: each token through each of its k experts. */
  mx::array operator()(const mx::array& x, const mx::array& indices) const;
  /** qwen3_moe.py's shard(): gate/up all-to-sharded, down sharded-to-all, in place; the block that
   * holds this layer sums its output over the group. */
  void shard(WeightBinder& w, const std::string& path);
  /** After shard(): the down projection's bias divided by the group size (gpt_oss.py). */
  void divide_down_bias(int n) { down_proj_.divide_bias(n); }
  /** Streamed experts: lets the store guess this block's experts ahead (ExpertStore::set_predictor);
   * a no-op when the experts are resident. */
  void set_predictor(ExpertPredictor predict) const {
    if (store_) store_->set_predictor(block_, std::move(predict));
  }

 private:
  SwitchGLU(SwitchLinear gate, SwitchLinear up, SwitchLinear down, SwitchActivation activation)
      : gate_proj_(std::move(gate)), up_proj_(std::move(up)), down_proj_(std::move(down)), activation_(activation) {}
  mx::array apply(const mx::array& x, const mx::array& indices, const SwitchLinear& gate, const SwitchLinear& up,
                  const SwitchLinear& down) const;
  SwitchLinear gate_proj_, up_proj_, down_proj_;
  SwitchActivation activation_;
  std::shared_ptr<ExpertStore> store_;  // streamed experts: the store and this block's id there
  int block_ = -1;
};

/** SwitchMLP: fc1, GELU (approx="precise", i.e. gelu_approx), fc2. */
class SwitchMLP {
 public:
  static SwitchMLP load(WeightBinder& w, const std::string& path, int input_dims, int hidden_dims,
                        int num_experts, bool bias = false, int top_k = 0);
  mx::array operator()(const mx::array& x, const mx::array& indices) const;

 private:
  SwitchMLP(SwitchLinear fc1, SwitchLinear fc2) : fc1_(std::move(fc1)), fc2_(std::move(fc2)) {}
  mx::array apply(const mx::array& x, const mx::array& indices, const SwitchLinear& fc1,
                  const SwitchLinear& fc2) const;
  SwitchLinear fc1_, fc2_;
  std::shared_ptr<ExpertStore> store_;
  int block_ = -1;
};

/** activations.py's swiglu_oai(gate, x) with its defaults alpha 1.702 and limit 7.0 (the only values
 * mlx-lm uses), compiled shapeless as there. */
mx::array swiglu_oai(const mx::array& gate, const mx::array& x);

}  // namespace mlxrt::model::nn
