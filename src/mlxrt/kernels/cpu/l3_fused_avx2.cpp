// The L3 CPU attention and SwiGLU (l3_fused_args.h) on AVX2 with FMA and F16C: eight lanes of the
// head dimension (or of the elements) per vector, exponentials by a vectorised polynomial. Compiled with -mavx2
// -mfma -mf16c (CMakeLists.txt); called only at --fidelity l3, which needs them.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "mlxrt/kernels/cpu/l3_fused_args.h"

namespace mlxrt::kernels::cpu {

namespace {

#include "mlxrt/kernels/cpu/avx2_elements.h"

float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

// exp(x) for x <= 0 (scores minus their maximum): 2^n · e^r with |r| <= ln2 / 2, e^r by a degree-6
// polynomial (relative error about 2e-7); below -87 the result is 0 as the true one nearly is.
__m256 exp_nonpositive(__m256 x) {
  const __m256 low = _mm256_set1_ps(-87.0f);
  const __m256 under = _mm256_cmp_ps(x, low, _CMP_LT_OQ);
  x = _mm256_max_ps(x, low);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

template <QmmElem E, QmmElem K>
void query_row(const L3AttentionArgs& a, int b, int h, int i, float* scratch) {
  const int kv_head = h / (a.q_heads / a.kv_heads);
  const long long q_at = b * a.q_strides[0] + h * a.q_strides[1] + i * a.q_strides[2];
  const long long k_at = b * a.k_strides[0] + kv_head * a.k_strides[1];
  const long long v_at = b * a.v_strides[0] + kv_head * a.v_strides[1];
  const int seen = a.causal ? a.kv_length - a.q_length + i + 1 : a.kv_length;
  float* scores = scratch;
  float* acc = scratch + a.kv_length + 8 - (a.kv_length % 8);
  if (seen <= 0) {  // a row that sees no key (never under mlx-lm's masks): zeros
    for (int d = 0; d < a.v_dims; ++d) acc[d] = 0.0f;
  } else {
    // The query, scaled once, in registers when it fits (head dims up to 256).
    constexpr int kMaxVectors = 32;
    __m256 qv[kMaxVectors];
    const int vectors = a.dims / 8;
    const __m256 scale = _mm256_set1_ps(a.scale);
    if (vectors <= kMaxVectors)
      for (int c = 0; c < vectors; ++c) qv[c] = _mm256_mul_ps(load8<E>(a.q, q_at + 8 * c), scale);
    // Key j's q · k_j in two chains (even and odd vectors of the head), added lane by lane.
    auto lanes = [&](int j) {
      const long long kj = k_at + j * a.k_strides[2];
      __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
      if (vectors <= kMaxVectors) {
        int c = 0;
        for (; c + 1 < vectors; c += 2) {
          s0 = _mm256_fmadd_ps(qv[c], load8<K>(a.k, kj + 8 * c), s0);
          s1 = _mm256_fmadd_ps(qv[c + 1], load8<K>(a.k, kj + 8 * c + 8), s1);
        }
        if (c < vectors) s0 = _mm256_fmadd_ps(qv[c], load8<K>(a.k, kj + 8 * c), s0);
      } else {
        for (int c = 0; c < vectors; ++c)
          s0 = _mm256_fmadd_ps(_mm256_mul_ps(load8<E>(a.q, q_at + 8 * c), scale), load8<K>(a.k, kj + 8 * c), s0);
      }
      return _mm256_add_ps(s0, s1);
    };
    float max_score = -3.4e38f;
    int j = 0;
    // Four keys at a time: their eight lanes summed as hsum sums them ((l0 + l2) + (l1 + l3) of
    // the halves added), through one transpose instead of four horizontal sums: the same bits.
    for (; j + 4 <= seen; j += 4) {
      __m128 x[4];
      for (int t = 0; t < 4; ++t) {
        const __m256 v = lanes(j + t);
        x[t] = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
      }
      _MM_TRANSPOSE4_PS(x[0], x[1], x[2], x[3]);
      const __m128 four = _mm_add_ps(_mm_add_ps(x[0], x[2]), _mm_add_ps(x[1], x[3]));
      _mm_storeu_ps(scores + j, four);
      for (int t = 0; t < 4; ++t) max_score = scores[j + t] > max_score ? scores[j + t] : max_score;
    }
    for (; j < seen; ++j) {
      const float s = hsum(lanes(j));
      scores[j] = s;
      max_score = s > max_score ? s : max_score;
    }
    // Exponentials and their sum.
    const __m256 m = _mm256_set1_ps(max_score);
    __m256 total = _mm256_setzero_ps();
    j = 0;
    for (; j + 8 <= seen; j += 8) {
      const __m256 p = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(scores + j), m));
      _mm256_storeu_ps(scores + j, p);
      total = _mm256_add_ps(total, p);
    }
    float sum = hsum(total);
    if (j < seen) {
      alignas(32) float tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int t = 0; t < seen - j; ++t) tail[t] = scores[j + t] - max_score;
      alignas(32) float p[8];
      _mm256_store_ps(p, exp_nonpositive(_mm256_load_ps(tail)));
      for (int t = 0; t < seen - j; ++t) {
        scores[j + t] = p[t];
        sum += p[t];
      }
    }
    // The weighted values.
    // 64 dimensions at a time, their eight accumulators in registers over all the keys (each
    // lane's sum in key order, as before).
    for (int d0 = 0; d0 < a.v_dims; d0 += 64) {
      const int n = a.v_dims - d0 < 64 ? (a.v_dims - d0) / 8 : 8;
      __m256 sum8[8];
      // Unrolled, or GCC keeps the array on the stack (a store and a reload around each FMA).
      _Pragma("GCC unroll 8") for (int c = 0; c < 8; ++c) sum8[c] = _mm256_setzero_ps();
      if (n == 8) {
        for (int jj = 0; jj < seen; ++jj) {
          const __m256 p = _mm256_set1_ps(scores[jj]);
          const long long vj = v_at + jj * a.v_strides[2] + d0;
          _Pragma("GCC unroll 8") for (int c = 0; c < 8; ++c) sum8[c] = _mm256_fmadd_ps(p, load8<K>(a.v, vj + 8 * c), sum8[c]);
        }
      } else {
        for (int jj = 0; jj < seen; ++jj) {
          const __m256 p = _mm256_set1_ps(scores[jj]);
          const long long vj = v_at + jj * a.v_strides[2] + d0;
          for (int c = 0; c < n; ++c) sum8[c] = _mm256_fmadd_ps(p, load8<K>(a.v, vj + 8 * c), sum8[c]);
        }
      }
      for (int c = 0; c < n; ++c) _mm256_storeu_ps(acc + d0 + 8 * c, sum8[c]);
    }
    const __m256 inverse = _mm256_set1_ps(1.0f / sum);
    for (int d = 0; d < a.v_dims; d += 8) _mm256_storeu_ps(acc + d, _mm256_mul_ps(_mm256_loadu_ps(acc + d), inverse));
  }
  const long long out_at = ((static_cast<long long>(b) * a.q_heads + h) * a.q_length + i) * a.v_dims;
  if constexpr (E == QmmElem::f32) {
    std::memcpy(static_cast<float*>(a.out) + out_at, acc, sizeof(float) * static_cast<size_t>(a.v_dims));
  } else if constexpr (E == QmmElem::bf16) {
    auto* o = static_cast<std::uint16_t*>(a.out) + out_at;
    for (int d = 0; d < a.v_dims; ++d) o[d] = to_bf16(acc[d]);
  } else {
    auto* o = static_cast<std::uint16_t*>(a.out) + out_at;
    for (int d = 0; d < a.v_dims; d += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + d),
                       _mm256_cvtps_ph(_mm256_loadu_ps(acc + d), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}

template <QmmElem E>
void store8(void* p, long long at, __m256 v) {
  if constexpr (E == QmmElem::f32) {
    _mm256_storeu_ps(static_cast<float*>(p) + at, v);
  } else if constexpr (E == QmmElem::bf16) {
    alignas(32) float t[8];
    _mm256_store_ps(t, v);
    auto* o = static_cast<std::uint16_t*>(p) + at;
    for (int i = 0; i < 8; ++i) o[i] = to_bf16(t[i]);
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<std::uint16_t*>(p) + at),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}

// silu(g) * u: g · sigmoid(g), sigmoid from e = exp(-|g|) <= 1 so nothing overflows.
__m256 swiglu8(__m256 g, __m256 u) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 e = exp_nonpositive(_mm256_or_ps(g, sign));  // exp(-|g|)
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 positive = _mm256_div_ps(one, _mm256_add_ps(one, e));
  const __m256 negative = _mm256_div_ps(e, _mm256_add_ps(one, e));
  const __m256 sigmoid = _mm256_blendv_ps(positive, negative, g);  // g's sign bit picks
  return _mm256_mul_ps(_mm256_mul_ps(g, sigmoid), u);
}

#include "mlxrt/kernels/cpu/l3_fused_impl.h"

}  // namespace

void l3_attention_units_avx2(const L3AttentionArgs& a, int begin, int end, float* scratch) {
  attention_units(a, begin, end, scratch);
}

void l3_log_softmax_avx2(const float* x, float* out, long long n) {
  __m256 top = _mm256_set1_ps(-INFINITY);
  bool nan = false;
  long long i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    nan = nan || _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0;
    top = _mm256_max_ps(top, v);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, top);
  float m = lanes[0];
  for (int l = 1; l < 8; ++l) m = lanes[l] > m ? lanes[l] : m;
  for (long long j = i; j < n; ++j) {
    nan = nan || x[j] != x[j];
    m = x[j] > m ? x[j] : m;
  }
  if (nan) {
    for (long long j = 0; j < n; ++j) out[j] = NAN;
    return;
  }
  float lse = m;
  if (!std::isinf(m)) {
    const __m256 mv = _mm256_set1_ps(m);
    __m256 total = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) total = _mm256_add_ps(total, exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv)));
    float sum = hsum(total);
    if (i < n) {
      alignas(32) float tail[8];
      for (int t = 0; t < 8; ++t) tail[t] = i + t < n ? x[i + t] - m : -INFINITY;
      sum += hsum(exp_nonpositive(_mm256_load_ps(tail)));
    }
    lse = m + std::log(sum);
  }
  const __m256 lv = _mm256_set1_ps(lse);
  for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_sub_ps(_mm256_loadu_ps(x + i), lv));
  for (; i < n; ++i) out[i] = x[i] - lse;
}

void l3_swiglu_avx2(const void* gate, const void* up, void* out, QmmElem elem, long long begin, long long end) {
  swiglu_units(gate, up, out, elem, begin, end);
}

}  // namespace mlxrt::kernels::cpu
