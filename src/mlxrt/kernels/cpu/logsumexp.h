#pragma once
/** The generation step's normalizer, logsumexp over the last axis (mlx-lm's
 * `logits - mx.logsumexp(logits, axis=-1, keepdims=True)`), on the CPU with MLX's bytes (L1).
 *
 * Why: MLX's Linux CPU build computes logsumexp one element at a time (its SIMD width is one
 * there), the exponential a scalar polynomial: 3.3 ms a row for Qwen3's 151,936-word vocabulary,
 * and 100 ms for a server's batch of 32 rows, on one thread. Ours computes the maximum and the
 * exponentials eight at a time by the same operations and adds them up in the same order (the one
 * part that must stay serial), a row per worker thread. Where it cannot promise MLX's bytes (no
 * AVX2 + FMA + F16C, another architecture, another device, a type other than float32, bfloat16 or
 * float16) MLX's node stays. */
#include <memory>

#include <mlx/array.h>

namespace mlxrt::kernels::cpu {

namespace mx = mlx::core;

class CpuKernels;

/** mx::logsumexp(x, -1, keepdims = true): ours when `kernels` is set and computes it exactly, MLX's
 * otherwise. For x [1, V] this is also mx::logsumexp(x, keepdims = true) (every axis: MLX takes the
 * same primitive when all axes but the last have one element). */
mx::array logsumexp_last_axis(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x);

/** mx::subtract(x, mx::logsumexp(x, -1, true)), mlx-lm's log-probabilities: one node of ours
 * (the normalizer and the subtraction row by row, MLX's bytes) where logsumexp_last_axis is ours
 * and x is float32 or bfloat16; that subtraction over logsumexp_last_axis otherwise. */
mx::array log_probs_last_axis(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x);

}  // namespace mlxrt::kernels::cpu
