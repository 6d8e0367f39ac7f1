#pragma once
/** mlx-lm hands a batched decoding step's projections x as [B, 1, K]. MLX's CUDA QuantizedMatmul
 * reads that as B problems of one row each (m = 1, l = B), and its GEMM then reads all of w once per
 * problem: a 32-row Qwen3-8B q_proj takes 252 µs that way and 29 µs as one problem of 32 rows (an
 * H100), about 108 ms of a 115 ms 32-row step summed over the model. Folded into [B, K], the same
 * product is one problem, and its bytes do not change (MLX 0.32's CUDA backend):
 * - the kernel chosen is the same: the sm_90 GEMM leaves qmv to M == 1 && B == 1 and the sm80 and
 *   naive GEMMs to M * B < 8, and both layouts have M * B rows, more than one;
 * - qmv computes each row of x alone (one grid row per row of x, whatever its batch);
 * - the sm80 and naive GEMMs' tile over rows (16 to 64, from m) moves warps over the output tile
 *   only: every output is still the dequantized w's MMA steps over the same K tiles in the same
 *   order, accumulated in float32; the sm_90 GEMM's tiles come from n alone.
 * Below compute capability 8.0 (the naive GEMM's other MMA) and in the non-affine modes x is left
 * as it comes: not read closely enough to promise the same. The batched parity tests
 * (tests/generate/test_batch_generate.py, quantized fixtures) check the bytes on a GPU. */
#include <string>

#include <mlx/array.h>

namespace mlxrt::kernels::cuda {

namespace mx = mlx::core;

/** Whether x (…, K) may go to MLX's quantized_matmul as one [rows, K] matrix with the same bytes:
 * a GPU stream on a CUDA device of compute capability 8.0 or more under an MLX the rule was read
 * for (fold_read_for), affine mode, x of three or more dimensions with more than one matrix of
 * rows. MLXRT_CUDA_FOLD_ROWS=0 leaves x as it comes (for timing the difference). */
bool quantized_rows_fold_exactly(const mx::array& x, const std::string& mode);

/** The shape part of that rule, on any device: affine mode, x of three or more dimensions, not
 * empty, its leading dimensions more than one matrix of rows. */
bool rows_fold_by_shape(const mx::array& x, const std::string& mode);

/** Whether `mlx_version` (mx::version() at run time) is a release whose CUDA selection code the
 * rule above was read from: 0.32.*. Another MLX leaves x as it comes until its source is read and
 * the batched parity tests pass on a GPU with it. */
bool fold_read_for(const std::string& mlx_version);

/** Whether MLX's quantized_matmul runs x's rows as one problem: x is one matrix of rows already,
 * or quantized_rows_fold_exactly folds it. Then MLX's GEMM reads w once, and from 8 rows it is 2-5x
 * faster than L3's chunked CUDA-core product (affine_qmv_chunks: 12.4 against 29.6 µs for 8 rows of
 * a Qwen3-8B q_proj, 22.4 against 121.9 for 32, on an H100; bench/RESULTS.md, twenty-sixth
 * session), so L3 keeps the chunks for what MLX would run row by row. */
bool quantized_rows_as_one_problem(const mx::array& x, const std::string& mode);

/** x's leading dimensions folded into rows: [rows, K] (a view where x is row-contiguous). */
mx::array fold_rows(const mx::array& x);

}  // namespace mlxrt::kernels::cuda
