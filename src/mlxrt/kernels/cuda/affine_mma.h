#pragma once
/** The L3 affine 4-bit product of few rows on the tensor cores (--fidelity l3, CUDA, compute
 * capability 8.0 and up): a batched decoding step's products (2 rows and more) and a short prompt's.
 *
 * y = x @ dequantize(w, scales, biases).T for 1 to kMmaMaxRows rows of x (bfloat16 or float16),
 * w as mx.quantize packs 4-bit values (8 a uint32 word, [N, K / 8]) with a scale and a bias per
 * group of 32, 64 or 128 values.
 *
 * Why: affine_qmv sums on the CUDA cores, each value unpacked, then one float FMA per row of x, so
 * its arithmetic grows with the rows: from a few rows on it, not the reads, bounds the product (a
 * Qwen3-8B 4-bit step of 32 rows took 50 ms in chunks of 8; bench/RESULTS.md, twenty-fifth
 * session). At one row both kernels read at about the same speed. Here a warp
 * turns two 4-bit values into a pair of 16-bit floats with two integer instructions and leaves
 * the products to `mma.sync.m16n8k16` (16 rows of w by 8 rows of x by 16 values of K a call):
 * a few instructions per byte (by our count, not a profile), and rows 2-8 of x cost no more than
 * the first.
 *
 * Layout: a block owns 16 rows of w and its warps split K in units of 64 values (32 for group
 * size 32), each unit inside one group. In a unit, lane (g, t) (g = lane / 4, t = lane % 4) reads
 * 16 values of rows g and g + 8 (8 bytes each: the 4 lanes of a row read 32 contiguous bytes)
 * and the same 16 values of x's row g. A word's nibbles j and j + 4 make one register of A (and
 * x's values j and j + 4 the matching one of B): the sum over K does not care which of its
 * values sit in which of the instruction's 16 slots, only that A's and B's agree, and the
 * fragment layout gives lane t the same slots in both.
 *
 * Arithmetic (not MLX's bytes): a value q becomes the 16-bit float B + q exactly (B = 128 for
 * bfloat16, 1024 for float16: q under the exponent), products are exact in float32 and summed
 * by the tensor core in float32; a second mma with A all ones gives each unit's sum of x, so the
 * unit adds s (D - B sum x) + b sum x to each output in float32. Warps' sums meet in shared
 * memory in a fixed order. tests/cuda_kernels/affine_mma_test.cpp holds every output to a bound
 * derived from this. */
#include <optional>

#include <mlx/array.h>

#include "mlxrt/kernels/cuda/kernel_launch.h"

namespace mlxrt::kernels::cuda {

namespace mx = mlx::core;

/** Warps a block (each a share of K) and units each warp loads before it sums them (loads in
 * flight). 0: the defaults (affine_mma.cpp). Benchmarked, not semantic beyond the order in which
 * warps' sums are added. */
struct MmaTiling {
  int warps_per_block = 0;
  int units_ahead = 0;
};

/** The most rows of x one launch takes: up to 16 tiles of 8 rows. */
constexpr int kMmaMaxRows = 127;

/** Whether affine_mma's kernel takes these operands: affine, 4 bits, group size 32, 64 or 128,
 * x bfloat16 or float16 [..., K] of 1 to kMmaMaxRows rows, w uint32 [N, K / 8], scales and biases
 * [N, K / group_size] of one floating dtype. */
bool affine_mma_operands_fit(const mx::array& x, const mx::array& w, const mx::array& scales,
                             const std::optional<mx::array>& biases, int group_size, int bits);

/** Whether affine_mma computes this product: the operands fit, the default device is a CUDA GPU
 * and its compute capability is 8.0 or more (the instruction's). */
bool affine_mma_applies(const mx::array& x, const mx::array& w, const mx::array& scales,
                        const std::optional<mx::array>& biases, int group_size, int bits);

/** The fewest rows of x for which L3's quantized products take affine_mma (up to kMmaMaxRows; below
 * it affine_qmv): kMmaDefaultMinRows, or MLXRT_CUDA_L3_MMA_ROWS=N (1 to 127; 0 or anything else
 * turns affine_mma off). Read once a process. */
int affine_mma_min_rows();

/** From 2 rows: mlxrt_qmv_bench --mma on an H100 (bench/RESULTS.md, twenty-sixth session) gave
 * 1.10-1.35x affine_qmv's speed at 2 rows, 1.14-1.95x at 4, 1.7-3.5x affine_qmv_chunks' at 8 and
 * 4.9-6.9x at 32, but 0.85-1.00x affine_qmv's at one row. */
constexpr int kMmaDefaultMinRows = 2;

/** Where the model takes affine_mma: from affine_mma_min_rows() rows (when it is not 0) and at
 * least 4 MiB of packed weights, as affine_qmv_preferred (below that the host's cost per launch
 * decides, where MLX's is lower). */
bool affine_mma_preferred(const mx::array& x, const mx::array& w);

/** x @ dequantize(w).T in the dtype mx::quantized_matmul gives (x, scales and biases promoted),
 * shaped [..., N]. std::invalid_argument where affine_mma_applies does not hold. */
mx::array affine_mma(const mx::array& x, const mx::array& w, const mx::array& scales, const mx::array& biases,
                     int group_size, int bits, MmaTiling tiling = {});

/** affine_mma's launch, x as [rows, K] and y as [rows, N]. std::invalid_argument where the
 * operands do not fit or the tiling is out of range (1-8 warps, 1-8 units ahead). */
KernelLaunch affine_mma_launch(const mx::array& x, const mx::array& w, const mx::array& scales,
                               const mx::array& biases, int group_size, int bits, MmaTiling tiling = {});

/** The kernel's text (tests and tools compile it without a GPU). */
const KernelSpec& affine_mma_spec();

}  // namespace mlxrt::kernels::cuda
