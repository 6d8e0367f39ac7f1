#pragma once
/** Activations mlx-lm wraps in mx.compile (mlx_lm/models/activations.py). */
#include <mlx/array.h>

namespace mlxrt::model::nn {

/** silu(gate) * x, compiled shapeless as mlx-lm does: the fused kernel rounds like the reference. */
mlx::core::array swiglu(const mlx::core::array& gate, const mlx::core::array& x);

}  // namespace mlxrt::model::nn
