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
 * Not MLX's bytes (L3): each weight is rounded to the scales' type before the product, where MLX's
 * kernel keeps s q + b in float32. `mlxrt fidelity` measures it in its prefill mode.
 *
 * Memory: each product holds its matrix dequantized while it runs (a Qwen3-8B gate projection:
 * 100 MB in bf16), and the allocator keeps such buffers for reuse as it keeps any. */
#include <optional>

#include <mlx/array.h>

namespace mlxrt::kernels::cuda {

namespace mx = mlx::core;

/** The fewest rows of x for which the model takes dequantized_gemm at L3 on a CUDA GPU:
 * MLXRT_CUDA_L3_PREFILL_ROWS (a positive integer), read once a process; 0 (never) where unset,
 * until a GPU has timed it against MLX's kernel and measured its fidelity. */
int dequantized_gemm_min_rows();

/** Whether a product of x's rows takes dequantized_gemm with `min_rows` as the threshold (0: never):
 * x floating with at least min_rows rows (all dimensions but the last), affine mode (biases given). */
bool dequantized_gemm_wanted(const mx::array& x, const std::optional<mx::array>& biases, int min_rows);

/** x @ dequantize(w, scales, biases).T, the matrix in the scales' type: the result's shape and type
 * are mx::quantized_matmul's (transpose = true) for the same operands. */
mx::array dequantized_gemm(const mx::array& x, const mx::array& w, const mx::array& scales, const mx::array& biases,
                           int group_size, int bits);

}  // namespace mlxrt::kernels::cuda
