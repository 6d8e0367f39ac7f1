#pragma once
/** Sampling's top-p, top-k and min-p filters (mlx-lm's apply_top_p, apply_top_k, apply_min_p) on
 * the CPU with MLX's bytes (L1).
 *
 * Why: top-p sorts the whole row (MLX's stable sort, then a scalar exp and two serial scans): 22 ms
 * a row of Qwen3's 151,936 words on this class of CPU, four times the tiny model's whole step and
 * paid again for every row of a server's batch; top-k's partition costs 2.3 ms, min-p's one-lane
 * maximum, add, compare and select 0.4 ms (ours: one pass with vectorized loops). Neither of the
 * first two needs the
 * order of the row, only the order of its values: a 16-bit row has at most 65,536 distinct values,
 * so counting them orders them; a float32 row is radix-sorted. The sums then run over the values in
 * MLX's order (the one part that must stay serial), each value's exponential MLX's.
 * Where ours does not apply (no AVX2 + FMA + F16C, another architecture or device, a type other
 * than float32, bfloat16 or float16, or MLXRT_CPU_KERNELS=mlx) these return nothing and the caller
 * builds MLX's graph. */
#include <optional>

#include <mlx/array.h>

namespace mlxrt::kernels::cpu {

namespace mx = mlx::core;

/** mlx-lm's apply_top_p(logprobs, top_p) over the last axis, 0 < top_p < 1: each row's values below
 * the smallest of the fewest largest whose probability mass reaches top_p become -inf. */
std::optional<mx::array> top_p_mask(const mx::array& logprobs, double top_p);

/** mlx-lm's apply_top_k(logprobs, top_k) over the last axis, 0 < top_k < its length: all but each
 * row's top_k largest (ties to the earlier index, as MLX's partition orders them) become -inf. */
std::optional<mx::array> top_k_mask(const mx::array& logprobs, int top_k);

/** mlx-lm's apply_min_p(logprobs, min_p, min_tokens_to_keep) over the last axis, for
 * min_tokens_to_keep 1 (more keeps MLX's partition): each row's values below its largest plus
 * log(min_p) (both of its type) become -inf. */
std::optional<mx::array> min_p_mask(const mx::array& logprobs, double min_p, int min_tokens_to_keep);

}  // namespace mlxrt::kernels::cpu
