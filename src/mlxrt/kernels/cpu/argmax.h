#pragma once
/** Greedy sampling's argmax over the last axis (mlx-lm's `mx.argmax(logprobs, axis=-1)`) on the CPU
 * with MLX's result (L1).
 *
 * Why: MLX's CPU argmax compares one element at a time: 0.5 ms a row of Qwen3's 151,936 words in
 * bfloat16, 17 ms a server's batch of 32 rows. Ours finds the row's largest value (and whether it
 * holds a NaN) eight elements at a time, then the first element equal to it (or the first NaN),
 * which is the element MLX keeps.
 * Where it cannot (no AVX2 + F16C, another architecture or device, another type, or
 * MLXRT_CPU_KERNELS=mlx) MLX's node stays. */
#include <mlx/array.h>

namespace mlxrt::kernels::cpu {

namespace mx = mlx::core;

/** mx::argmax(x, -1) (uint32, the last axis removed): ours where it computes the same, MLX's
 * otherwise. No model's kernels needed: one thread does a row in tens of microseconds. */
mx::array argmax_last_axis(const mx::array& x);

}  // namespace mlxrt::kernels::cpu
