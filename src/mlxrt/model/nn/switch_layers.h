#pragma once
/** Mixture-of-experts layers (mlx_lm/models/switch_layers.py): one stacked weight per projection,
 * [num_experts, out, in], applied per token to the experts its router picked with gather_mm /
 * gather_qmm. With many (token, expert) pairs, the pairs are sorted by expert first so that each
 * expert's weights are read once, then put back in token order, exactly as mlx-lm does. */
#include <optional>
#include <string>

#include <mlx/array.h>

#include "mlxrt/model/nn/linear.h"
#include "mlxrt/model/nn/weight_binder.h"

namespace mlxrt::model::nn {

namespace mx = mlx::core;

/** mlx-lm sorts the (token, expert) pairs when there are at least this many indices. */
inline constexpr int kSwitchSortThreshold = 64;

/** SwitchLinear / QuantizedSwitchLinear: `path`.weight [num_experts, out, in] (packed when the
 * checkpoint's quantization map quantizes `path`), optional `path`.bias [num_experts, out]. */
class SwitchLinear {
 public:
  static SwitchLinear load(WeightBinder& w, const std::string& path, int input_dims, int output_dims,
                           int num_experts, bool bias);

  /** x [..., 1, in] (broadcast against indices) -> [..., k, 1, out] for the experts in `indices`. */
  mx::array operator()(const mx::array& x, const mx::array& indices, bool sorted_indices) const;

  /** The quantization of this projection, if any (for checks across a block's projections). */
  const std::optional<Quantized>& quantized() const { return q_; }

 private:
  SwitchLinear(mx::array weight, std::optional<mx::array> bias, std::optional<Quantized> q)
      : weight_(std::move(weight)), bias_(std::move(bias)), q_(std::move(q)) {}
  mx::array weight_;
  std::optional<mx::array> bias_;
  std::optional<Quantized> q_;
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
  static SwitchGLU load(WeightBinder& w, const std::string& path, int input_dims, int hidden_dims,
                        int num_experts, bool bias = false,
                        SwitchActivation activation = SwitchActivation::swiglu);

  /** x [..., D], indices [..., k] -> [..., k, D]: each token through each of its k experts. */
  mx::array operator()(const mx::array& x, const mx::array& indices) const;

 private:
  SwitchGLU(SwitchLinear gate, SwitchLinear up, SwitchLinear down, SwitchActivation activation)
      : gate_proj_(std::move(gate)), up_proj_(std::move(up)), down_proj_(std::move(down)), activation_(activation) {}
  SwitchLinear gate_proj_, up_proj_, down_proj_;
  SwitchActivation activation_;
};

/** SwitchMLP: fc1, GELU (approx="precise", i.e. gelu_approx), fc2. */
class SwitchMLP {
 public:
  static SwitchMLP load(WeightBinder& w, const std::string& path, int input_dims, int hidden_dims,
                        int num_experts, bool bias = false);
  mx::array operator()(const mx::array& x, const mx::array& indices) const;

 private:
  SwitchMLP(SwitchLinear fc1, SwitchLinear fc2) : fc1_(std::move(fc1)), fc2_(std::move(fc2)) {}
  SwitchLinear fc1_, fc2_;
};

/** activations.py's swiglu_oai(gate, x) with its defaults alpha 1.702 and limit 7.0 (the only values
 * mlx-lm uses), compiled shapeless as there. */
mx::array swiglu_oai(const mx::array& gate, const mx::array& x);

}  // namespace mlxrt::model::nn
