#pragma once
/** Whole pieces of a decoder layer as one MLX node each at L3 (--fidelity l3) on the CPU. MLX's CPU
 * backend runs a node at a time on its stream thread, and at decode the nodes cost more than their
 * arithmetic (a SmolLM2-135M step was ~27 nodes a layer); here a layer is three nodes and the KV
 * cache's own: norm + q/k/v + RoPE; attention + o_proj + residual; norm + MLP + residual. Each
 * chains the L3 steps of l3_rows.h on plain buffers, quantizes an input once for every matrix that
 * reads it, and rounds every intermediate to the element type as the separate L3 nodes round it,
 * so the bytes are those nodes' bytes (MLXRT_L3_BLOCKS=0 runs them instead), but for a float32
 * model's KV cache, which the blocks keep as float16 (l3_attention_input). */
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <mlx/array.h>

namespace mlxrt::kernels::cpu {

namespace mx = mlx::core;

class CpuKernels;

/** A weight matrix packed for the L3 matmul (l3_pack): n outputs by k inputs; `params` is its
 * scales' and biases' type promoted together (a product's type is x's promoted with it). */
struct L3Matrix {
  mx::array packed;
  int n = 0, k = 0, group_size = 0, bits = 0;
  mx::Dtype params = mx::float32;
};

/** h + down(silu(gate(x)) * up(x)) with x = rms_norm(h, norm_weight, eps): llama's MLP with its
 * pre-norm and residual, where h, the norm's weight and the matrices' products share one float
 * type (the matrices' scales that type too); nullopt where it does not apply (the caller then
 * builds the separate nodes). */
std::optional<mx::array> l3_mlp_block(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& h,
                                      const mx::array& norm_weight, float eps, const L3Matrix& gate,
                                      const L3Matrix& up, const L3Matrix& down);

/** An RMSNorm's weight and eps. */
struct L3Norm {
  mx::array weight;
  float eps;
};

/** [queries, keys, values] of llama's attention, each [B, heads, L, head_dim]: x = rms_norm(h,
 * norm_weight, eps) through q, k and v (one quantization of x), split into heads, with qwen3's
 * per-head RMSNorms where `qk_norms` are given, queries and keys rotated by RoPE (`rope`:
 * fast::rope's dims, traditional, base, scale; `freqs` its optional frequencies) at positions
 * offset, offset + 1, ...; nullopt where it does not apply. `half_kv_cache`: a float32 model's keys
 * and values come as float16 (where l3_attention_output reads them: head dimensions a multiple of 8
 * up to 256), the type the cache then keeps, as llama.cpp's does: half the bytes a decode step's
 * attention reads (measured, like all of L3, by `mlxrt fidelity`). */
std::optional<std::vector<mx::array>> l3_attention_input(const std::shared_ptr<const CpuKernels>& kernels,
                                                         const mx::array& h, const mx::array& norm_weight, float eps,
                                                         const L3Matrix& q, const L3Matrix& k, const L3Matrix& v,
                                                         int n_heads, int n_kv_heads, int rope_dims,
                                                         bool rope_traditional, std::optional<float> rope_base,
                                                         float rope_scale, const std::optional<mx::array>& freqs,
                                                         int offset,
                                                         const std::optional<std::pair<L3Norm, L3Norm>>& qk_norms,
                                                         bool half_kv_cache = false);

/** h + o(attention(queries, keys, values)) with the heads joined back ([B, L, heads · Dv]):
 * l3_fused.h's attention (causal or unmasked) then the o projection and the residual add, one node;
 * nullopt where it does not apply. */
std::optional<mx::array> l3_attention_output(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& h,
                                             const mx::array& queries, const mx::array& keys, const mx::array& values,
                                             float scale, bool causal, const L3Matrix& o);

}  // namespace mlxrt::kernels::cpu
