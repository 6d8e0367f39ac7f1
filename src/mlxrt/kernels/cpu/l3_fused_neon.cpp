// The L3 CPU attention, log-softmax and SwiGLU (l3_fused_args.h) on NEON, for aarch64. The same
// algorithm as l3_fused_avx2.cpp, over eight lanes held as two 4-lane NEON vectors (F8), so every
// lane does the same IEEE operations (the fused multiply-adds where that file fuses, the same
// exponential polynomial) and every horizontal sum adds in the same order: the same bits as the
// AVX2 file. Compiled with -ffp-contract=off (cmake/cpu_kernels.cmake).
#include <arm_neon.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "mlxrt/kernels/cpu/l3_fused_args.h"

namespace mlxrt::kernels::cpu {

namespace {

struct F8 {
  float32x4_t lo, hi;
};

F8 set1(float x) { return {vdupq_n_f32(x), vdupq_n_f32(x)}; }
F8 zero8() { return set1(0.0f); }
F8 loadu(const float* p) { return {vld1q_f32(p), vld1q_f32(p + 4)}; }
void storeu(float* p, F8 v) {
  vst1q_f32(p, v.lo);
  vst1q_f32(p + 4, v.hi);
}
F8 add(F8 a, F8 b) { return {vaddq_f32(a.lo, b.lo), vaddq_f32(a.hi, b.hi)}; }
F8 sub(F8 a, F8 b) { return {vsubq_f32(a.lo, b.lo), vsubq_f32(a.hi, b.hi)}; }
F8 mul(F8 a, F8 b) { return {vmulq_f32(a.lo, b.lo), vmulq_f32(a.hi, b.hi)}; }
F8 fmadd(F8 a, F8 b, F8 c) { return {vfmaq_f32(c.lo, a.lo, b.lo), vfmaq_f32(c.hi, a.hi, b.hi)}; }   // a * b + c

// Eight elements at p as float.
template <QmmElem E>
F8 load8(const void* p, long long at) {
  if constexpr (E == QmmElem::f32) {
    return loadu(static_cast<const float*>(p) + at);
  } else if constexpr (E == QmmElem::bf16) {
    const uint16x8_t h = vld1q_u16(static_cast<const std::uint16_t*>(p) + at);
    return {vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)), vreinterpretq_f32_u32(vshll_high_n_u16(h, 16))};
  } else {
    const uint16x8_t h = vld1q_u16(static_cast<const std::uint16_t*>(p) + at);
    return {vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h))), vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(h)))};
  }
}

// AVX2's hsum: the halves added (s), then (s0 + s2) + (s1 + s3).
float hsum(F8 v) {
  const float32x4_t s = vaddq_f32(v.lo, v.hi);
  const float32x4_t t = vaddq_f32(s, vextq_f32(s, s, 2));
  return vgetq_lane_f32(t, 0) + vgetq_lane_f32(t, 1);
}

// exp(x) for x <= 0, as l3_fused_avx2.cpp's exp_nonpositive (the same operations lane by lane).
float32x4_t exp4(float32x4_t x) {
  const float32x4_t low = vdupq_n_f32(-87.0f);
  const uint32x4_t under = vcltq_f32(x, low);
  x = vbslq_f32(vcgtq_f32(x, low), x, low);  // as AVX2's max_ps: `low` where x is NaN
  const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
  float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
  r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
  float32x4_t p = vdupq_n_f32(1.0f / 720.0f);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 120.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 24.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 6.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23);
  const float32x4_t y = vmulq_f32(p, vreinterpretq_f32_s32(e));
  return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(y), under));
}
F8 exp_nonpositive(F8 x) { return {exp4(x.lo), exp4(x.hi)}; }

std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

void store_f16x8(std::uint16_t* o, F8 v) {
  vst1q_u16(o, vreinterpretq_u16_f16(vcombine_f16(vcvt_f16_f32(v.lo), vcvt_f16_f32(v.hi))));
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
    constexpr int kMaxVectors = 32;
    F8 qv[kMaxVectors];
    const int vectors = a.dims / 8;
    const F8 scale = set1(a.scale);
    if (vectors <= kMaxVectors)
      for (int c = 0; c < vectors; ++c) qv[c] = mul(load8<E>(a.q, q_at + 8 * c), scale);
    // Key j's q · k_j in two chains (even and odd vectors of the head), added lane by lane.
    auto lanes = [&](int j) {
      const long long kj = k_at + j * a.k_strides[2];
      F8 s0 = zero8(), s1 = zero8();
      if (vectors <= kMaxVectors) {
        int c = 0;
        for (; c + 1 < vectors; c += 2) {
          s0 = fmadd(qv[c], load8<K>(a.k, kj + 8 * c), s0);
          s1 = fmadd(qv[c + 1], load8<K>(a.k, kj + 8 * c + 8), s1);
        }
        if (c < vectors) s0 = fmadd(qv[c], load8<K>(a.k, kj + 8 * c), s0);
      } else {
        for (int c = 0; c < vectors; ++c) s0 = fmadd(mul(load8<E>(a.q, q_at + 8 * c), scale), load8<K>(a.k, kj + 8 * c), s0);
      }
      return add(s0, s1);
    };
    // Each key's lanes summed as hsum sums them (the AVX2 file's four-key transpose adds the same
    // values in the same order).
    float max_score = -3.4e38f;
    for (int j = 0; j < seen; ++j) {
      const float s = hsum(lanes(j));
      scores[j] = s;
      max_score = s > max_score ? s : max_score;
    }
    const F8 m = set1(max_score);
    F8 total = zero8();
    int j = 0;
    for (; j + 8 <= seen; j += 8) {
      const F8 p = exp_nonpositive(sub(loadu(scores + j), m));
      storeu(scores + j, p);
      total = add(total, p);
    }
    float sum = hsum(total);
    if (j < seen) {
      float tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int t = 0; t < seen - j; ++t) tail[t] = scores[j + t] - max_score;
      float p[8];
      storeu(p, exp_nonpositive(loadu(tail)));
      for (int t = 0; t < seen - j; ++t) {
        scores[j + t] = p[t];
        sum += p[t];
      }
    }
    // The weighted values, 64 dimensions at a time (each lane's sum in key order).
    for (int d0 = 0; d0 < a.v_dims; d0 += 64) {
      const int n = a.v_dims - d0 < 64 ? (a.v_dims - d0) / 8 : 8;
      F8 sum8[8];
      for (int c = 0; c < 8; ++c) sum8[c] = zero8();
      for (int jj = 0; jj < seen; ++jj) {
        const F8 p = set1(scores[jj]);
        const long long vj = v_at + jj * a.v_strides[2] + d0;
        for (int c = 0; c < n; ++c) sum8[c] = fmadd(p, load8<K>(a.v, vj + 8 * c), sum8[c]);
      }
      for (int c = 0; c < n; ++c) storeu(acc + d0 + 8 * c, sum8[c]);
    }
    const F8 inverse = set1(1.0f / sum);
    for (int d = 0; d < a.v_dims; d += 8) storeu(acc + d, mul(loadu(acc + d), inverse));
  }
  const long long out_at = ((static_cast<long long>(b) * a.q_heads + h) * a.q_length + i) * a.v_dims;
  if constexpr (E == QmmElem::f32) {
    std::memcpy(static_cast<float*>(a.out) + out_at, acc, sizeof(float) * static_cast<size_t>(a.v_dims));
  } else if constexpr (E == QmmElem::bf16) {
    auto* o = static_cast<std::uint16_t*>(a.out) + out_at;
    for (int d = 0; d < a.v_dims; ++d) o[d] = to_bf16(acc[d]);
  } else {
    auto* o = static_cast<std::uint16_t*>(a.out) + out_at;
    for (int d = 0; d < a.v_dims; d += 8) store_f16x8(o + d, loadu(acc + d));
  }
}

template <QmmElem E>
void store8(void* p, long long at, F8 v) {
  if constexpr (E == QmmElem::f32) {
    storeu(static_cast<float*>(p) + at, v);
  } else if constexpr (E == QmmElem::bf16) {
    float t[8];
    storeu(t, v);
    auto* o = static_cast<std::uint16_t*>(p) + at;
    for (int i = 0; i < 8; ++i) o[i] = to_bf16(t[i]);
  } else {
    store_f16x8(static_cast<std::uint16_t*>(p) + at, v);
  }
}

// silu(g) * u: g · sigmoid(g), sigmoid from e = exp(-|g|) <= 1 so nothing overflows.
float32x4_t swiglu4(float32x4_t g, float32x4_t u) {
  const float32x4_t e = exp4(vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(g), vdupq_n_u32(0x80000000u))));
  const float32x4_t one = vdupq_n_f32(1.0f);
  const float32x4_t positive = vdivq_f32(one, vaddq_f32(one, e));
  const float32x4_t negative = vdivq_f32(e, vaddq_f32(one, e));
  const uint32x4_t sign = vcltq_s32(vreinterpretq_s32_f32(g), vdupq_n_s32(0));  // g's sign bit picks
  const float32x4_t sigmoid = vbslq_f32(sign, negative, positive);
  return vmulq_f32(vmulq_f32(g, sigmoid), u);
}
F8 swiglu8(F8 g, F8 u) { return {swiglu4(g.lo, u.lo), swiglu4(g.hi, u.hi)}; }

#include "mlxrt/kernels/cpu/l3_fused_impl.h"

}  // namespace

void l3_attention_units_neon(const L3AttentionArgs& a, int begin, int end, float* scratch) {
  attention_units(a, begin, end, scratch);
}

void l3_log_softmax_neon(const float* x, float* out, long long n) {
  // The maximum in eight lanes as AVX2's max_ps (x's NaNs are found apart: the result is then NaN).
  F8 top = set1(-INFINITY);
  bool nan = false;
  long long i = 0;
  for (; i + 8 <= n; i += 8) {
    const F8 v = loadu(x + i);
    nan = nan || vminvq_u32(vceqq_f32(v.lo, v.lo)) == 0 || vminvq_u32(vceqq_f32(v.hi, v.hi)) == 0;
    // AVX2's max_ps(top, v): top > v ? top : v (so -0 against +0 keeps v, as there).
    top = {vbslq_f32(vcgtq_f32(top.lo, v.lo), top.lo, v.lo), vbslq_f32(vcgtq_f32(top.hi, v.hi), top.hi, v.hi)};
  }
  float lanes[8];
  storeu(lanes, top);
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
    const F8 mv = set1(m);
    F8 total = zero8();
    for (i = 0; i + 8 <= n; i += 8) total = add(total, exp_nonpositive(sub(loadu(x + i), mv)));
    float sum = hsum(total);
    if (i < n) {
      float tail[8];
      for (int t = 0; t < 8; ++t) tail[t] = i + t < n ? x[i + t] - m : -INFINITY;
      sum += hsum(exp_nonpositive(loadu(tail)));
    }
    lse = m + std::log(sum);
  }
  const F8 lv = set1(lse);
  for (i = 0; i + 8 <= n; i += 8) storeu(out + i, sub(loadu(x + i), lv));
  for (; i < n; ++i) out[i] = x[i] - lse;
}

void l3_swiglu_neon(const void* gate, const void* up, void* out, QmmElem elem, long long begin, long long end) {
  swiglu_units(gate, up, out, elem, begin, end);
}

}  // namespace mlxrt::kernels::cpu
