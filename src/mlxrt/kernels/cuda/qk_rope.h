#pragma once
/** The L3 decoding step's q/k norms and RoPE on CUDA, one node (--fidelity l3 on an NVIDIA GPU).
 *
 * After the fused q/k/v projections (fused_qmv.h) a Qwen3-style layer still made, per decoding
 * step, an RMSNorm over each query head and each key head, a RoPE of the queries and one of the
 * keys, and the views between them: four compute nodes and their views, each costing MLX's host a
 * few microseconds (bench/gpu/node_cost.py). qk_norm_rope does all of it in one launch, writing
 * the queries and keys in the [B, heads, L, head_dim] layout the cache and the attention read.
 *
 * Arithmetic, per head (one warp): the norm as mx.fast.rms_norm computes it (float32 sum of
 * squares, rsqrt(sum / D + eps), x times that rounded to the type, times the weight rounded
 * again; the sum in this kernel's order, so the same bytes only where the sum is exact in any
 * order), then the rotation as MLX's CUDA RoPE computes it (theta = scale * position *
 * exp2(-d * log2(base)) or scale * position / freqs[d], cos and sin in float32, each output
 * rounded to the type). Dimensions past the rotated ones pass through. How close a model's
 * logits stay to L1 is measured by `mlxrt fidelity`. */
#include <optional>
#include <utility>

#include <mlx/array.h>

#include "mlxrt/kernels/cuda/kernel_launch.h"

#include "mlxrt/kernels/cuda/fused_qmv.h"

namespace mlxrt::kernels::cuda {

namespace mx = mlx::core;

/** The rotation fast::rope applies: `dims` rotated dimensions (even, at most head_dim), the pairs
 * (i, i + dims / 2), or (2i, 2i + 1) if traditional; frequencies from `base`, or 1 / freqs
 * (float32 [dims / 2]) where freqs is given; positions times `scale`. */
struct RopeIn {
  int dims = 0;
  bool traditional = false;
  std::optional<float> base;
  float scale = 1.0f;
  std::optional<mx::array> freqs;
};

/** The most rows (B * L) one call takes: a decoding step's, as fused_qmv's kernels. */
constexpr int kQkRopeMaxRows = kFusedMaxRows;

/** queries [B, n_heads, L, D] and keys [B, n_kv_heads, L, D] from the projections q [B, L, n_heads * D]
 * and k [B, L, n_kv_heads * D]: each head RMS-normalised by q_norm / k_norm where given (both or
 * neither), then rotated at position offset[b] + l. `offset`: int32, one value ([] or [1]) or one per
 * batch row ([B]). nullopt where it does not apply (the caller runs MLX's nodes): default device
 * not a CUDA GPU, q and k not of one floating type, a norm weight not [D] of that type, more than
 * kQkRopeMaxRows rows, a head wider than 256, or a rotation that is not an even count of at most D. */
std::optional<std::pair<mx::array, mx::array>> qk_norm_rope(const mx::array& q, const mx::array& k, int n_heads,
                                                            int n_kv_heads, const std::optional<RmsNormIn>& q_norm,
                                                            const std::optional<RmsNormIn>& k_norm,
                                                            const RopeIn& rope, const mx::array& offset);

/** qk_norm_rope's launch (kernel_launch.h) from the operands alone: nullopt where it declines
 * them for their shapes or types (any device). */
std::optional<KernelLaunch> qk_norm_rope_launch(const mx::array& q, const mx::array& k, int n_heads, int n_kv_heads,
                                                const std::optional<RmsNormIn>& q_norm,
                                                const std::optional<RmsNormIn>& k_norm, const RopeIn& rope,
                                                const mx::array& offset);

/** The kernel's text (tests and tools compile it without a GPU). */
const KernelSpec& qk_norm_rope_spec();

}  // namespace mlxrt::kernels::cuda
