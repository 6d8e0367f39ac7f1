#pragma once
/** Sampling's categorical draw over the last axis (mlx-lm's `mx.random.categorical(logits * (1 /
 * temp))`) on the CPU with MLX's result (L1).
 *
 * Why: for one row MLX draws by the inverse of the distribution function, and its Linux CPU build
 * takes the row's exponentials one element at a time (its SIMD width is one there): 4.5 of the
 * 5 ms a draw from Qwen3's 151,936 words costs, paid by every sampled token of a single stream, and
 * once per row in a server's batched step (mlx_lm.server gives each request its own sampler, so each
 * row is drawn alone). Ours takes the maximum and the exponentials eight at a time by the same
 * operations, and the running sum (the one part that must stay serial) in the same order.
 * Where it cannot promise MLX's result (no AVX2 + FMA + F16C, another architecture or device, a type
 * other than float32, bfloat16 or float16, more than one row, or MLXRT_CPU_KERNELS=mlx) MLX's
 * graph stays. */
#include <mlx/array.h>

namespace mlxrt::kernels::cpu {

namespace mx = mlx::core;

/** mx::random::categorical(logits, -1, key): ours where it computes the same, MLX's otherwise. */
mx::array categorical_last_axis(const mx::array& logits, const mx::array& key);

}  // namespace mlxrt::kernels::cpu
