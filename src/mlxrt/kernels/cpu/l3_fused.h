#pragma once
/** The decode step's small operations fused for the CPU at L3 (--fidelity l3): one node each where
 * MLX's CPU backend expands mx::fast::rms_norm into about ten and mx::fast::rope into about thirty
 * (its fast kernels are for the GPUs), which at decode cost more than the arithmetic (a
 * SmolLM2-135M step is some 3,500 nodes). They compute in float32 and round once to the element
 * type; `mlxrt fidelity` measures them with the rest of L3. Where they do not apply (no L3
 * kernels, another device or dtype) each returns MLX's own op. */
#include <memory>
#include <optional>

#include <mlx/array.h>

namespace mlxrt::kernels::cpu {

namespace mx = mlx::core;

class CpuKernels;

/** mx::fast::rms_norm(x, weight, eps): x * rsqrt(mean(x²) + eps), rounded to x's type, times the
 * weight. Fused where the weight has x's type. */
mx::array rms_norm(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x,
                   const std::optional<mx::array>& weight, float eps);

/** mx::fast::rope(x, dims, traditional, base, scale, offset, freqs) with one offset. Fused for
 * x of 3 or more dimensions (positions along axis -2); the angles in double precision. */
mx::array rope(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x, int dims, bool traditional,
               std::optional<float> base, float scale, int offset, const std::optional<mx::array>& freqs);

/** mx::fast::scaled_dot_product_attention(q, k, v, scale, causal ? "causal" : "") over q
 * [B, Hq, Lq, D] and k, v [B, Hkv, Lk, D or Dv] (Hq a multiple of Hkv): one node, threaded over
 * heads and query rows, in place of MLX's CPU composition (matmuls, a mask, a softmax). Fused for
 * head dimensions that are multiples of 8; nullopt where it does not apply (the caller then runs
 * MLX's own). */
std::optional<mx::array> attention(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& q,
                                   const mx::array& k, const mx::array& v, float scale, bool causal);

/** Whether attention() above fuses these operands. */
bool attention_applies(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& q, const mx::array& k,
                       const mx::array& v, bool causal);

/** x - logsumexp(x, -1, keepdims) (the generation step's log-probabilities) as one node with a
 * vectorised exp, for float32 x; nullopt elsewhere (the caller runs mlx's). A decode step spent
 * ~5% of its time in MLX's scalar exp over a 49k-word vocabulary. */
std::optional<mx::array> log_softmax(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x);

/** silu(gate) * up (mlx-lm's compiled swiglu) as one threaded node with a vectorised exp, where gate
 * and up have one shape and element type; nullopt elsewhere (the caller runs mlx-lm's). */
std::optional<mx::array> swiglu(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& gate,
                                const mx::array& up);

}  // namespace mlxrt::kernels::cpu
