#pragma once
/** Fused CUDA kernels for the gated delta net whose bytes equal the ops path mlx-lm runs on CUDA.
 *
 * mlx-lm runs the recurrence on CUDA as one compiled step per token (a few elementwise kernels and
 * two row reductions each) and the causal convolution as cuDNN's depthwise conv followed by the
 * compiled SiLU: prefill is launch-bound. These kernels do the same arithmetic in one launch:
 *  - the step keeps each state row in one warp's registers over all T tokens; every product and
 *    sum is the same float32 operation the ops path performs, each row sum is the reduction MLX's
 *    row_reduce_simple does (four consecutive elements per lane from zero, then the warp's
 *    cooperative-groups reduce), and the state update is the fused multiply-add that MLX's JIT
 *    makes of `state + k * delta` (NVRTC contracts it);
 *  - the conv sums the taps in ascending order in float32 (the products of 16-bit inputs are exact
 *    in float32), rounds to the input dtype as cuDNN's output does, and applies MLX's own Sigmoid
 *    and Multiply functors in that dtype, as the compiled SiLU does.
 * Both were checked element for element against the ops path on an H200 (random data of
 * Qwen3.5's dims and odd ones) and run by default on CUDA; the parity suite proves them there.
 * MLXRT_GATED_DELTA_OPS=1 in the environment forces the ops path (for A/B measurements). */
#include <utility>

#include <mlx/array.h>

namespace mlxrt::model::nn {

namespace mx = mlx::core;

/** Whether the fused step applies: default device a CUDA GPU, not disabled by the environment,
 * q/k of one 16-bit or float32 dtype with Dk a multiple of 4 up to 512 (one warp per row, as MLX
 * reduces such rows), a scalar gate [B, T, Hv] and a state in float32. */
bool fused_gated_delta_applies(const mx::array& q, const mx::array& k, const mx::array& v, const mx::array& g,
                               const mx::array& beta, const mx::array& state);

/** gated_delta_ops in one launch: q, k [B, T, Hk, Dk], v [B, T, Hv, Dv], g [B, T, Hv] float32,
 * beta [B, T, Hv], state [B, Hv, Dv, Dk] float32 -> {y [B, T, Hv, Dv] in q's dtype, state}. */
std::pair<mx::array, mx::array> gated_delta_fused(const mx::array& q, const mx::array& k, const mx::array& v,
                                                  const mx::array& g, const mx::array& beta, const mx::array& state);

/** Whether the fused depthwise conv + SiLU applies: CUDA as above, x [B, L, C] and weight [C, K, 1]
 * both bfloat16 or both float16 (cuDNN's float32 path sums differently), L - K + 1 <= 65535. */
bool fused_conv_silu_applies(const mx::array& x, const mx::array& weight);

/** silu(conv1d(x, weight, stride 1, no padding, groups C)) in one launch: [B, L - K + 1, C]. */
mx::array conv_silu_fused(const mx::array& x, const mx::array& weight);

}  // namespace mlxrt::model::nn
