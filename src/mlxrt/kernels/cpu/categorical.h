#pragma once
/** Sampling's categorical draw over the last axis (mlx-lm's `mx.random.categorical(logits * (1 /
 * temp))`) on the CPU with MLX's result (L1).
 *
 * Why: MLX's Linux CPU build computes one element at a time (its SIMD width is one there).
 * - One row (a single stream; a server's batched step, where mlx_lm.server gives each request its
 *   own sampler, so each row is drawn alone): MLX draws by the inverse of the distribution function,
 *   4.5 of the 5 ms a draw from Qwen3's 151,936 words costs being its exponentials. Ours takes the
 *   maximum and the exponentials eight at a time by the same operations, and the running sum (the
 *   one part that must stay serial) in the same order.
 * - Several rows (mlx-lm's batch_generate, one sampler for the batch): MLX adds Gumbel noise,
 *   -log(-log(u)) of Threefry random bits, to every logit and takes the argmax: 98 ms for 32 rows,
 *   two scalar logf calls and a scalar hash per element. Ours hashes eight counters at a time and
 *   computes the sums with a vectorized logarithm of its own, close to the C library's within a
 *   certified bound; only the elements whose sums come within that bound of the largest are
 *   computed again exactly, with the C library's logf as MLX's graph computes them, so the argmax is
 *   MLX's.
 * Where it cannot promise MLX's result (no AVX2 + FMA + F16C, another architecture or device, a type
 * other than float32, bfloat16 or float16, or MLXRT_CPU_KERNELS=mlx) MLX's graph stays. */
#include <mlx/array.h>

namespace mlxrt::kernels::cpu {

namespace mx = mlx::core;

/** mx::random::categorical(logits, -1, key): ours where it computes the same, MLX's otherwise. */
mx::array categorical_last_axis(const mx::array& logits, const mx::array& key);

}  // namespace mlxrt::kernels::cpu
