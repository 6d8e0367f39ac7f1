#pragma once
/** Activations mlx-lm and mlx.nn wrap in mx.compile (mlx_lm/models/activations.py,
 * mlx/nn/layers/activations.py). */
#include <mlx/array.h>

namespace mlxrt::model::nn {

/** silu(gate) * x, compiled shapeless as mlx-lm does: the fused kernel rounds like the reference. */
mlx::core::array swiglu(const mlx::core::array& gate, const mlx::core::array& x);

/** mlx.nn.gelu (the exact erf form, x * (1 + erf(x / sqrt(2))) / 2), compiled shapeless as mlx does. */
mlx::core::array gelu(const mlx::core::array& x);

/** mlx.nn.silu: x * sigmoid(x), compiled shapeless as mlx does. */
mlx::core::array silu(const mlx::core::array& x);

/** mlx-lm's precise_swiglu(h, gate, x): silu(gate) * x in float32, cast to h's dtype (compiled
 * shapeless). */
mlx::core::array precise_swiglu(const mlx::core::array& h, const mlx::core::array& gate, const mlx::core::array& x);

/** mlx.nn.gelu_approx (the tanh approximation), compiled shapeless as mlx does. */
mlx::core::array gelu_approx(const mlx::core::array& x);


/** gelu_approx(gate) * x in one shapeless compiled function, as gemma4_text.py's geglu: the
 * product is fused with the activation. */
mlx::core::array geglu(const mlx::core::array& gate, const mlx::core::array& x);

/** gemma3n.py's gelu_topk(inputs, std_multiplier): gelu_approx(max(0, inputs - (mean + std *
 * std_multiplier))) over the last axis, compiled shapeless as there (activation sparsity). */
mlx::core::array gelu_topk(const mlx::core::array& inputs, const mlx::core::array& std_multiplier);

}  // namespace mlxrt::model::nn
