#pragma once
/** The plain-data calls of the L3 CPU attention and SwiGLU (l3_fused.h): what their
 * instruction-set file sees (as affine_qmm_args.h, no header with inline functions).
 *
 * Attention:
 * Per query row (keys and values read as float32 from their own type): s_j = scale * (q · k_j) in float32 over the keys it may see (all, or under a
 * causal mask the first Lk - Lq + i + 1), p_j = exp(s_j - max s), out = (sum of p_j v_j) / (sum of
 * p_j), rounded once to the element type. */
#include <cstdint>

#include "mlxrt/kernels/cpu/affine_qmm_args.h"

namespace mlxrt::kernels::cpu {

struct L3AttentionArgs {
  void* out = nullptr;  // B × Hq × Lq × Dv, contiguous
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  // Element strides of the batch, head and position dimensions; the last dimension is contiguous.
  long long q_strides[3] = {0, 0, 0};
  long long k_strides[3] = {0, 0, 0};
  long long v_strides[3] = {0, 0, 0};
  int batch = 0, q_heads = 0, kv_heads = 0, q_length = 0, kv_length = 0, dims = 0, v_dims = 0;
  float scale = 1.0f;
  bool causal = false;
  QmmElem elem = QmmElem::f32;     // of q and out
  QmmElem kv_elem = QmmElem::f32;  // of k and v: elem, or f16 under f32 queries (an L3 KV cache)
};

/** Query rows one work unit covers (of one batch row and head). */
constexpr int kL3AttentionRowsPerUnit = 16;

inline int l3_attention_units(const L3AttentionArgs& a) {
  return a.batch * a.q_heads * ((a.q_length + kL3AttentionRowsPerUnit - 1) / kL3AttentionRowsPerUnit);
}

/** Floats of scratch one thread needs: the scores of one query row and its output accumulator. */
inline long long l3_attention_scratch(const L3AttentionArgs& a) { return a.kv_length + a.v_dims + 16; }

/** Units [begin, end) of `a`. AVX2 with FMA and F16C; dims and v_dims multiples of 8. */
void l3_attention_units_avx2(const L3AttentionArgs& a, int begin, int end, float* scratch);
void l3_attention_units_neon(const L3AttentionArgs& a, int begin, int end, float* scratch);

/** Log-softmax of a row of n float32 values: out = x - (m + log(sum of exp(x - m))), m = max x
 * (the exponentials by the attention's polynomial, their sum in float32 lanes); NaN everywhere
 * where x holds a NaN, and x - m where m is infinite, as mlx's logsumexp gives. */
void l3_log_softmax_avx2(const float* x, float* out, long long n);
void l3_log_softmax_neon(const float* x, float* out, long long n);

/** SwiGLU: out[i] = silu(gate[i]) * up[i] = gate / (1 + exp(-gate)) * up in float32, rounded once,
 * for elements [begin, end) of three contiguous buffers of one element type. */
void l3_swiglu_avx2(const void* gate, const void* up, void* out, QmmElem elem, long long begin, long long end);
void l3_swiglu_neon(const void* gate, const void* up, void* out, QmmElem elem, long long begin, long long end);

}  // namespace mlxrt::kernels::cpu
