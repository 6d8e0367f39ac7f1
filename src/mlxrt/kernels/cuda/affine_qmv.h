#pragma once
/** The L3 affine quantized matrix-vector product on CUDA (--fidelity l3 on an NVIDIA GPU).
 *
 * y = x @ dequantize(w, scales, biases).T for the few rows of x a decoding step has (1 to 8), with
 * w as mx.quantize packs it (4- or 8-bit values in uint32 words, [N, K * bits / 32]) and one scale
 * and bias per group of 32, 64 or 128 values. Memory-bound: each lane reads 16 bytes of a weight
 * row per load (32 four-bit or 16 eight-bit values, always inside one group), a warp owns several
 * rows so that their loads are in flight together, and the next chunk's words are loaded before
 * the current one is summed.
 *
 * Arithmetic (float32 throughout, not MLX's bytes): a value q of b bits is placed under the
 * exponent of 1.0f, f = 1 + q / 2^b (two integer operations, no conversion instruction), so a
 * chunk's dot product is s * 2^b * (sum x f - sum x) + bias * sum x, with sum x computed once per
 * chunk for all rows. That costs a few bits of float32 against summing x * (s q + b) directly
 * (the difference of two sums near sum x), far below the output's 16-bit rounding; the test in
 * tests/cuda_kernels/affine_qmv_test.cpp holds it to a bound derived from that. */
#include <optional>

#include <mlx/array.h>

#include "mlxrt/kernels/cuda/kernel_launch.h"

namespace mlxrt::kernels::cuda {

namespace mx = mlx::core;

/** How the rows are spread: rows of w per warp and warps per block (benchmarked, not semantic; the
 * bytes of a row's result do not depend on them). 0: chosen from N (affine_qmv.cpp says how).
 * split_k (dense_mv only, a variant for mlxrt_qmv_bench): the block's warps share rows_per_warp
 * rows and split K between them, 2-8 warps (a row's sum then comes in another order). */
struct QmvTiling {
  int rows_per_warp = 0;
  int warps_per_block = 0;
  bool split_k = false;
  int depth = 0;  // steps of loads a warp keeps in flight, 1-4 (qmv_device.h); 0: l3_depth()
};

/** The steps of loads in flight the L3 products take by default: 2 (one step ahead, as measured),
 * or 1-4 from MLXRT_CUDA_L3_DEPTH (a tuning knob until the H200 times it; the sums do not depend on
 * it). Read once a process. */
int l3_depth();

/** `t` with its zero fields chosen for an output of `n` rows of a quantized matrix, or of a dense
 * one of `k` columns (affine_qmv.cpp says how). */
QmvTiling choose_tiling(int n, QmvTiling t = {}, bool dense = false, int k = 0);

/** The most rows of x one call takes (a batched decoding step's). */
constexpr int kQmvMaxRows = 8;

/** Whether affine_qmv's kernel takes these operands: affine mode (biases given), 4 or 8 bits, group
 * size 32, 64 or 128, w uint32 [N, K * bits / 32] with scales and biases [N, K / group_size] of one
 * floating dtype, x floating [..., K] of 1 to kQmvMaxRows rows. */
bool affine_qmv_operands_fit(const mx::array& x, const mx::array& w, const mx::array& scales,
                             const std::optional<mx::array>& biases, int group_size, int bits);

/** Whether affine_qmv computes this product: the operands fit and the default device is a CUDA GPU. */
bool affine_qmv_applies(const mx::array& x, const mx::array& w, const mx::array& scales,
                        const std::optional<mx::array>& biases, int group_size, int bits);

/** Where the model takes affine_qmv over MLX's kernel (both measured on an H200,
 * bench/RESULTS.md 2026-12-03, fourth session): at most 7 rows (from 8 rows MLX's quantized GEMM
 * reads faster) and at least 4 MiB of packed weights (below that both are bound by the host's
 * cost per launch, where MLX's own is lower). */
bool affine_qmv_preferred(const mx::array& x, const mx::array& w, int bits);

/** x @ dequantize(w).T in the dtype mx::quantized_matmul gives (x, scales and biases promoted),
 * shaped [..., N]. std::invalid_argument where affine_qmv_applies does not hold. */
mx::array affine_qmv(const mx::array& x, const mx::array& w, const mx::array& scales, const mx::array& biases,
                     int group_size, int bits, QmvTiling tiling = {});

/** affine_qmv's launch (kernel_launch.h). std::invalid_argument where the operands do not fit or
 * the tiling is out of range. */
KernelLaunch affine_qmv_launch(const mx::array& x, const mx::array& w, const mx::array& scales,
                               const mx::array& biases, int group_size, int bits, QmvTiling tiling = {});

/** The most rows affine_qmv_chunks takes: below the dense prefill's default threshold
 * (dequantized_gemm.h). */
constexpr int kQmvChunksMaxRows = 127;

/** affine_qmv_operands_fit with x of 1 to kQmvChunksMaxRows rows. */
bool affine_qmv_chunks_operands_fit(const mx::array& x, const mx::array& w, const mx::array& scales,
                                    const std::optional<mx::array>& biases, int group_size, int bits);

/** Whether affine_qmv_chunks computes this product: the operands fit and the default device is a
 * CUDA GPU. */
bool affine_qmv_chunks_applies(const mx::array& x, const mx::array& w, const mx::array& scales,
                               const std::optional<mx::array>& biases, int group_size, int bits);

/** Where the model takes affine_qmv_chunks at L3 over MLX's kernel: 8 to kQmvChunksMaxRows rows
 * (a batched decoding step's, where MLX's quantized GEMM takes 37 ms for 8 rows and 115 ms for 32 of
 * a Qwen3-8B 4-bit step on an H100: bench/RESULTS.md, twenty-fifth session) and at least 4 MiB of
 * packed weights. */
bool affine_qmv_chunks_preferred(const mx::array& x, const mx::array& w, int bits);

/** affine_qmv for 1 to kQmvChunksMaxRows rows of x: chunks of kQmvMaxRows rows (the last padded
 * with zero rows) in one launch whose blocks over the same rows of w run side by side, so w is
 * read from memory about once. Each output is what affine_qmv gives its row in a launch of
 * kQmvMaxRows rows. std::invalid_argument where affine_qmv_chunks_applies does not hold. */
mx::array affine_qmv_chunks(const mx::array& x, const mx::array& w, const mx::array& scales, const mx::array& biases,
                            int group_size, int bits, QmvTiling tiling = {});

/** affine_qmv_chunks' launch (x padded): its output is [chunks * kQmvMaxRows, N]. */
KernelLaunch affine_qmv_chunks_launch(const mx::array& x, const mx::array& w, const mx::array& scales,
                                      const mx::array& biases, int group_size, int bits, QmvTiling tiling = {});

/** Whether dense layers (bfloat16, float16, float32) take dense_mv and the fused kernels
 * (fused_qmv.h) at --fidelity l3: MLXRT_CUDA_L3_DENSE=1, opt-in. On the H200 (bench/RESULTS.md,
 * 2026-12-04, tenth session) dense_mv reads 0.54-0.97x as fast as MLX's cuBLAS matrix-vector
 * product, and a Qwen3 decode step with the fused dense kernels is no faster than L1, so L3 leaves
 * dense layers to MLX unless asked. */
bool dense_l3_opted_in();

/** Whether dense_mv's kernel takes these operands: w [N, K] of x's floating type (bfloat16,
 * float16 or float32), x [..., K] of 1 to kQmvMaxRows rows. */
bool dense_mv_operands_fit(const mx::array& x, const mx::array& w);

/** Whether dense_mv computes x @ w.T: the operands fit and the default device is a CUDA GPU. */
bool dense_mv_applies(const mx::array& x, const mx::array& w);

/** Where a dense layer takes dense_mv at L3 over MLX's matmul (a cuBLAS matrix-vector product
 * for one row): as affine_qmv_preferred, at most 7 rows and at least 4 MiB of weights. */
bool dense_mv_preferred(const mx::array& x, const mx::array& w);

/** x @ w.T for a dense w, each output the float32 sum of its products (16-byte loads of w as
 * affine_qmv reads its words; not cuBLAS's order, so not L1's bytes), rounded to x's type,
 * shaped [..., N]. std::invalid_argument where dense_mv_applies does not hold. */
mx::array dense_mv(const mx::array& x, const mx::array& w, QmvTiling tiling = {});

/** dense_mv's launch (either kernel, by tiling.split_k). std::invalid_argument as dense_mv's. */
KernelLaunch dense_mv_launch(const mx::array& x, const mx::array& w, QmvTiling tiling = {});

/** The kernels' text (tests and tools compile it without a GPU). */
const KernelSpec& affine_qmv_spec();
const KernelSpec& affine_qmv_chunks_spec();
const KernelSpec& dense_mv_split_spec();

}  // namespace mlxrt::kernels::cuda
