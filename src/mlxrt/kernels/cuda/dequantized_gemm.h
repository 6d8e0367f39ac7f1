#pragma once
/** L3 on CUDA: a prefill's products with affine-quantized matrices as one dense matmul.
 *
 * MLX's CUDA backend runs x @ dequantize(w).T for many rows of x (a prompt's chunk) as its own
 * quantized matrix-matrix kernel (`qmm_sm80`). A Qwen3-8B 4-bit prefill of 512 tokens takes 80-93
 * ms there (bench/RESULTS.md), about 100 TFLOP/s of the model's arithmetic, where the H200's dense
 * bf16 peak is near 990 (how much of the 80 ms is that kernel is for a GPU profile to say). Here the
 * matrix is dequantized to its scales' type (one elementwise kernel, mx::dequantize) and multiplied
 * by MLX's dense matmul (cuBLASLt): a prefill chunk then costs dense GEMMs plus writing and reading
 * each matrix once in 16 bits (about 7 ms for the 8B on an H200).
 *
 * L3: MLX's tensor-core kernel rounds each dequantized weight to 16 bits too, and where both
 * accumulate in the same order the bytes are MLX's (every Qwen3 product at 512 rows on an H100);
 * nothing promises that order for every shape and GPU (at 64-100 rows long products differ).
 * `mlxrt fidelity` measures it in its prefill mode.
 *
 * Memory: each product holds its matrix dequantized while it runs (a Qwen3-8B gate projection:
 * 100 MB in bf16), and the allocator keeps such buffers for reuse as it keeps any. */
#include <optional>

#include <mlx/array.h>

namespace mlxrt::kernels::cuda {

namespace mx = mlx::core;

/** The default threshold. Measured on an H100 (Qwen3-8B dims, 4-bit): a 511-row prefill chunk
 * 1.70x MLX's kernel, a 255-row one 1.21x; at 511 rows every product of Qwen3-0.6B and 8B gave MLX's
 * own bytes (fidelity's prefill mode: KL 0), at 64-100 rows those with long rows (K >= 3072) did
 * not (bench/RESULTS.md). */
inline constexpr int kDequantizedGemmDefaultRows = 128;

/** The fewest rows of x for which the model takes dequantized_gemm at L3 on a CUDA GPU:
 * MLXRT_CUDA_L3_PREFILL_ROWS where set (a positive integer; anything else, e.g. 0: never),
 * kDequantizedGemmDefaultRows where unset; read once a process. */
int dequantized_gemm_min_rows();

/** Whether a product of x's rows takes dequantized_gemm with `min_rows` as the threshold (0: never):
 * x floating with at least min_rows rows (all dimensions but the last), affine mode (biases given). */
bool dequantized_gemm_wanted(const mx::array& x, const std::optional<mx::array>& biases, int min_rows);

/** x @ dequantize(w, scales, biases).T, the matrix in the scales' type: the result's shape and type
 * are mx::quantized_matmul's (transpose = true) for the same operands. */
mx::array dequantized_gemm(const mx::array& x, const mx::array& w, const mx::array& scales, const mx::array& biases,
                           int group_size, int bits);

}  // namespace mlxrt::kernels::cuda
