#pragma once
/** The L3 decoding step's fused matrix-vector products on CUDA (--fidelity l3 on an NVIDIA GPU).
 *
 * A decoding step on MLX's CUDA backend is bound by the host: MLX spends a few microseconds
 * encoding each node, about twenty a layer, while the GPU finishes sooner (`mlxrt benchmark
 * --step-timing`, bench/RESULTS.md). These kernels take the RMSNorm before a layer's projections,
 * the three projections of q, k and v, SwiGLU and the residual adds into the products, so a
 * llama-style layer costs eight nodes instead of nineteen:
 *   rms_norm_qkv:    q, k, v = rms_norm(x) @ Wq.T, Wk.T, Wv.T        (one launch)
 *   rms_norm_swiglu: silu(rms_norm(x) @ Wg.T) * (rms_norm(x) @ Wu.T)  (one launch)
 *   qmv_residual:    residual + x @ W.T                              (one launch)
 * Each block first stages its rows of x in shared memory (normalised there as mx.fast.rms_norm
 * computes it: float32 sum of squares, rsqrt(sum / K + eps), x * that rounded to x's type, times
 * the weight rounded again); the products are affine_qmv's (qmv_device.h). The intermediate
 * results are rounded to the output type where MLX's separate nodes round them (a projection's
 * output, the gate and up products, the MLP output before the add), so the fused step stays
 * close to L1; how close is measured by `mlxrt fidelity` (bench/gpu/l3_bench.py).
 *
 * Dense matrices (a bfloat16, float16 or float32 model) take the same kernels with the products
 * of dense_mv (affine_qmv.h): MLX runs each of those products as a cuBLAS matrix-vector call of
 * its own node.
 *
 * Each function returns nullopt where it does not apply (the caller runs the unfused nodes):
 * default device not a CUDA GPU, a matrix neither affine 4/8-bit with group 32/64/128 nor dense of
 * x's type, matrices that differ in bits, group size or parameter type, more than kFusedMaxRows
 * rows of x, or rows of x too long for a block's shared memory. */
#include <array>
#include <optional>
#include <utility>

#include <mlx/array.h>

#include "mlxrt/kernels/cuda/kernel_launch.h"

namespace mlxrt::kernels::cuda {

namespace mx = mlx::core;

/** One matrix of a decoding step's products: affine-quantized as mx.quantize packs it, or dense
 * (`bits` 0: w [N, K] of the input's floating type; scales and biases are w again, unread, so that
 * each kernel keeps one list of inputs). */
struct QmvMatrix {
  mx::array w, scales, biases;
  int group_size = 64, bits = 4;
  static QmvMatrix dense(const mx::array& w) { return {w, w, w, 0, 0}; }
  bool is_dense() const { return bits == 0; }
};

/** An RMSNorm's weight and eps. */
struct RmsNormIn {
  mx::array weight;
  float eps;
};

/** The most rows of x the fused kernels take (a decoding step: batch rows of one token). */
constexpr int kFusedMaxRows = 4;

/** rms_norm(x) @ q.T, k.T, v.T for x [..., K] of 1 to kFusedMaxRows rows. */
std::optional<std::array<mx::array, 3>> rms_norm_qkv(const mx::array& x, const RmsNormIn& norm, const QmvMatrix& q,
                                                     const QmvMatrix& k, const QmvMatrix& v);

/** silu(rms_norm(x) @ gate.T) * (rms_norm(x) @ up.T), as mlx-lm's swiglu(gate(x), up(x)). */
std::optional<mx::array> rms_norm_swiglu(const mx::array& x, const RmsNormIn& norm, const QmvMatrix& gate,
                                         const QmvMatrix& up);

/** residual + x @ m.T, the product rounded to its type before the add (as two MLX nodes give). */
std::optional<mx::array> qmv_residual(const mx::array& x, const QmvMatrix& m, const mx::array& residual);

/** The three functions' launches (kernel_launch.h), worked out from the operands alone: nullopt
 * where the function would decline them for their shapes or types (any device). */
std::optional<KernelLaunch> rms_norm_qkv_launch(const mx::array& x, const RmsNormIn& norm, const QmvMatrix& q,
                                                const QmvMatrix& k, const QmvMatrix& v);
std::optional<KernelLaunch> rms_norm_swiglu_launch(const mx::array& x, const RmsNormIn& norm, const QmvMatrix& gate,
                                                   const QmvMatrix& up, bool paired = false);

/** MLXRT_CUDA_L3_SWIGLU_PAIRS=1: rms_norm_swiglu reads gate's and up's rows of a warp in one pass
 * (twice the loads in flight) instead of one matrix after the other (opt-in until the H200 times
 * it; the sums are the same either way). Read once a process. */
bool swiglu_pairs_opted_in();
std::optional<KernelLaunch> qmv_residual_launch(const mx::array& x, const QmvMatrix& m, const mx::array& residual);

/** The kernels' text (tests and tools compile it without a GPU). */
const KernelSpec& rms_norm_qkv_spec();
const KernelSpec& rms_norm_swiglu_spec();
const KernelSpec& qmv_residual_spec();

}  // namespace mlxrt::kernels::cuda
