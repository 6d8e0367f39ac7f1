// The L1 categorical draws (categorical_args.h) on AVX2 with FMA and F16C. One row's: the maximum and
// the exponentials eight elements at a time by MLX's operations, the running sum one element at a time
// in MLX's order, then MLX's binary search. A batch's (Gumbel): MLX's Threefry eight counters at a
// time, and each row's sums with an approximate logarithm, for the caller to settle exactly.
// Compiled with -mavx2 -mfma -mf16c -ffp-contract=off (cmake/cpu_kernels.cmake), as logsumexp_avx2.cpp,
// whose exp this shares (avx2_exp.h).
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "mlxrt/kernels/cpu/categorical_args.h"

namespace mlxrt::kernels::cpu {

namespace {

#include "mlxrt/kernels/cpu/avx2_elements.h"
#include "mlxrt/kernels/cpu/avx2_exp.h"

template <QmmElem E>
std::uint32_t inverse_cdf_row(const void* row, long long n, float u, float* cdf) {
  const auto [maximum, nan] = row_maximum<E>(row, n);
  // A NaN makes MLX's maximum a NaN, so every weight, the total and u times it: its search then
  // finds no running sum above the NaN (its nan-aware less-than puts NaNs last) and answers n - 1.
  if (nan) return static_cast<std::uint32_t>(n - 1);
  if (std::isinf(maximum)) {
    // An infinite maximum (a +inf logit, or every logit -inf): weight one on each element equal to it.
    for (long long i = 0; i < n; ++i) cdf[i] = load1<E>(row, i) == maximum ? 1.0f : 0.0f;
  } else {
    const __m256 m = _mm256_set1_ps(maximum);
    long long i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(cdf + i, exp_as_mlx(_mm256_sub_ps(load8<E>(row, i), m)));
    if (i < n) {
      alignas(32) float tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      alignas(32) float w[8];
      for (long long t = 0; t < n - i; ++t) tail[t] = load1<E>(row, i + t);
      _mm256_store_ps(w, exp_as_mlx(_mm256_sub_ps(_mm256_load_ps(tail), m)));
      for (long long t = 0; t < n - i; ++t) cdf[i + t] = w[t];
    }
  }
  // The exclusive running sum (MLX's cumsum, inclusive=False) in place of the weights; its last value
  // plus the last weight is MLX's sum of the weights (the same additions from zero, in the same order).
  float running = 0.0f;
  for (long long i = 0; i < n; ++i) {
    const float w = cdf[i];
    cdf[i] = running;
    running = running + w;
  }
  const float target = u * running;
  // MLX's searchsorted(side="right"): the first running sum above the target (none is a NaN here).
  std::uint32_t lo = 0, hi = static_cast<std::uint32_t>(n);
  while (lo < hi) {
    const std::uint32_t mid = lo + (hi - lo) / 2;
    if (!(target < cdf[mid]))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo - 1u;
}

// --- the Gumbel draw's pieces ------------------------------------------------------------------

template <int R>
__m256i rotate_left(__m256i x) {
  return _mm256_or_si256(_mm256_slli_epi32(x, R), _mm256_srli_epi32(x, 32 - R));
}

template <int R0, int R1, int R2, int R3>
inline __attribute__((always_inline)) void four_rounds(__m256i& x0, __m256i& x1) {
  x0 = _mm256_add_epi32(x0, x1);
  x1 = _mm256_xor_si256(rotate_left<R0>(x1), x0);
  x0 = _mm256_add_epi32(x0, x1);
  x1 = _mm256_xor_si256(rotate_left<R1>(x1), x0);
  x0 = _mm256_add_epi32(x0, x1);
  x1 = _mm256_xor_si256(rotate_left<R2>(x1), x0);
  x0 = _mm256_add_epi32(x0, x1);
  x1 = _mm256_xor_si256(rotate_left<R3>(x1), x0);
}

// Threefry-2x32, 20 rounds, of eight counter pairs (x0, x1) at once: MLX's threefry2x32_hash (its
// rotations alternate between two sets of four; after each four, a key injection).
inline __attribute__((always_inline)) void threefry8(std::uint32_t k0, std::uint32_t k1, __m256i& x0, __m256i& x1) {
  const std::uint32_t ks[3] = {k0, k1, k0 ^ k1 ^ 0x1BD11BDAu};
  auto inject = [&](int i) {  // after group i (0-based)
    x0 = _mm256_add_epi32(x0, _mm256_set1_epi32(static_cast<int>(ks[(i + 1) % 3])));
    x1 = _mm256_add_epi32(x1, _mm256_set1_epi32(static_cast<int>(ks[(i + 2) % 3] + static_cast<std::uint32_t>(i) + 1u)));
  };
  x0 = _mm256_add_epi32(x0, _mm256_set1_epi32(static_cast<int>(ks[0])));
  x1 = _mm256_add_epi32(x1, _mm256_set1_epi32(static_cast<int>(ks[1])));
  four_rounds<13, 15, 26, 6>(x0, x1);
  inject(0);
  four_rounds<17, 29, 16, 24>(x0, x1);
  inject(1);
  four_rounds<13, 15, 26, 6>(x0, x1);
  inject(2);
  four_rounds<17, 29, 16, 24>(x0, x1);
  inject(3);
  four_rounds<13, 15, 26, 6>(x0, x1);
  inject(4);
}

// The same hash of one pair.
void threefry1(std::uint32_t k0, std::uint32_t k1, std::uint32_t& x0, std::uint32_t& x1) {
  __m256i a = _mm256_set1_epi32(static_cast<int>(x0)), b = _mm256_set1_epi32(static_cast<int>(x1));
  threefry8(k0, k1, a, b);
  x0 = static_cast<std::uint32_t>(_mm256_extract_epi32(a, 0));
  x1 = static_cast<std::uint32_t>(_mm256_extract_epi32(b, 0));
}

// float(w) for unsigned 32-bit lanes, rounded to nearest as a C++ conversion rounds: both 16-bit
// halves convert exactly, the high one's scaling is exact, and the sum rounds once.
__m256 unsigned_to_float(__m256i w) {
  const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(w, 16));
  const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(w, _mm256_set1_epi32(0xFFFF)));
  return _mm256_add_ps(_mm256_mul_ps(hi, _mm256_set1_ps(65536.0f)), lo);
}

// An approximate natural logarithm of positive normal floats (not MLX's, which is the C library's
// logf): x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) = 2 atanh(s), s = (m - 1) / (m + 1), by
// its series to s^11 (|s| <= 0.172: the next term is below 2^-40 of the sum). Its error against the
// true logarithm, over every float the Gumbel draw can meet, is pinned by cpu_categorical_test.cpp
// (4.2 units in the last place at most, measured over all of them; the C library's logf: 0.82).
__m256 log_approx(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  __m256i e = _mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(127));
  __m256 m = _mm256_castsi256_ps(
      _mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFF)), _mm256_set1_epi32(0x3F800000)));
  const __m256 big = _mm256_cmp_ps(m, _mm256_set1_ps(1.41421356f), _CMP_GT_OQ);
  m = _mm256_blendv_ps(m, _mm256_mul_ps(m, _mm256_set1_ps(0.5f)), big);
  e = _mm256_sub_epi32(e, _mm256_castps_si256(big));  // a true lane is -1
  const __m256 f = _mm256_sub_ps(m, _mm256_set1_ps(1.0f));  // exact: m is within a factor 2 of 1
  // s = f / (f + 2) by the reciprocal estimate and one Newton step (a division costs more).
  const __m256 d = _mm256_add_ps(f, _mm256_set1_ps(2.0f));
  __m256 r = _mm256_rcp_ps(d);
  r = _mm256_mul_ps(r, _mm256_fnmadd_ps(d, r, _mm256_set1_ps(2.0f)));
  const __m256 s = _mm256_mul_ps(f, r);
  const __m256 z = _mm256_mul_ps(s, s);
  __m256 p = _mm256_set1_ps(2.0f / 11.0f);
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.0f / 9.0f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.0f / 7.0f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.0f / 5.0f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.0f / 3.0f));
  const __m256 log_m = _mm256_fmadd_ps(_mm256_mul_ps(s, z), p, _mm256_add_ps(s, s));
  // e log 2 in two parts (the high one has few bits, so e times it is exact).
  const __m256 ef = _mm256_cvtepi32_ps(e);
  return _mm256_fmadd_ps(ef, _mm256_set1_ps(0.693145751953125f),
                         _mm256_fmadd_ps(ef, _mm256_set1_ps(1.428606765330187e-06f), log_m));
}

template <QmmElem E>
float gumbel_sums_row(const void* row, long long n, const std::uint32_t* words, float* sums, bool& unusual) {
  const __m256 below_one = _mm256_set1_ps(0.99999994f);
  const __m256 scale = _mm256_set1_ps(2.3283064365386963e-10f);  // 2^-32
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 slack = _mm256_set1_ps(kGumbelSlack), per_unit = _mm256_set1_ps(kGumbelSlackPerUnit);
  __m256 lower = _mm256_set1_ps(-INFINITY);
  __m256 odd = _mm256_setzero_ps();  // lanes that met a NaN or +inf logit or a zero word
  alignas(32) float tail[8];
  alignas(32) std::uint32_t tail_words[8];
  for (long long i = 0; i < n; i += 8) {
    const bool full = i + 8 <= n;
    __m256 x;
    __m256i w;
    if (full) {
      x = load8<E>(row, i);
      w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + i));
    } else {
      for (long long t = 0; t < 8; ++t) {
        tail[t] = i + t < n ? load1<E>(row, i + t) : -INFINITY;
        tail_words[t] = i + t < n ? words[i + t] : 1u;
      }
      x = _mm256_load_ps(tail);
      w = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail_words));
    }
    odd = _mm256_or_ps(odd, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    odd = _mm256_or_ps(odd, _mm256_cmp_ps(x, _mm256_set1_ps(INFINITY), _CMP_EQ_OQ));
    odd = _mm256_or_ps(odd, _mm256_castsi256_ps(_mm256_cmpeq_epi32(w, _mm256_setzero_si256())));
    const __m256 u = _mm256_min_ps(_mm256_mul_ps(unsigned_to_float(w), scale), below_one);
    const __m256 b = _mm256_xor_ps(log_approx(u), sign);
    const __m256 g = _mm256_xor_ps(log_approx(b), sign);
    const __m256 s = _mm256_add_ps(g, x);
    const __m256 margin = _mm256_fmadd_ps(_mm256_andnot_ps(sign, s), per_unit, slack);
    lower = _mm256_max_ps(lower, _mm256_sub_ps(s, margin));
    if (full) {
      _mm256_storeu_ps(sums + i, s);
    } else {
      _mm256_store_ps(tail, s);
      for (long long t = 0; t < n - i; ++t) sums[i + t] = tail[t];
    }
  }
  unusual = _mm256_movemask_ps(odd) != 0;
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, lower);
  float best = lanes[0];
  for (int l = 1; l < 8; ++l) best = lanes[l] > best ? lanes[l] : best;
  return best;
}

}  // namespace

std::uint32_t inverse_cdf_row_avx2(const void* row, QmmElem elem, long long n, float u, float* cdf) {
  switch (elem) {
    case QmmElem::f32: return inverse_cdf_row<QmmElem::f32>(row, n, u, cdf);
    case QmmElem::bf16: return inverse_cdf_row<QmmElem::bf16>(row, n, u, cdf);
    default: return inverse_cdf_row<QmmElem::f16>(row, n, u, cdf);
  }
}

}  // namespace mlxrt::kernels::cpu

namespace mlxrt::kernels::cpu {

void random_bits_avx2(std::uint32_t k0, std::uint32_t k1, long long count, std::uint32_t* words) {
  const long long half = count / 2, odd = count % 2;
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  long long c = 0;
  for (; c + 8 <= half; c += 8) {
    __m256i x0 = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(c)), lanes);
    __m256i x1 = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(c + half + odd)), lanes);
    threefry8(k0, k1, x0, x1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(words + c), x0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(words + c + half + odd), x1);
  }
  for (; c < half; ++c) {
    auto a = static_cast<std::uint32_t>(c), b = static_cast<std::uint32_t>(c + half + odd);
    threefry1(k0, k1, a, b);
    words[c] = a;
    words[c + half + odd] = b;
  }
  if (odd) {
    auto a = static_cast<std::uint32_t>(half), b = 0u;
    threefry1(k0, k1, a, b);
    words[half] = a;
  }
}

void log_approx_avx2(const float* x, long long n, float* out) {
  long long i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, log_approx(_mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float tail[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    for (long long t = 0; t < n - i; ++t) tail[t] = x[i + t];
    _mm256_store_ps(tail, log_approx(_mm256_load_ps(tail)));
    for (long long t = 0; t < n - i; ++t) out[i + t] = tail[t];
  }
}

long long gumbel_near_row_avx2(const float* sums, long long n, float lower, std::uint32_t* near) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 slack = _mm256_set1_ps(kGumbelSlack), per_unit = _mm256_set1_ps(kGumbelSlackPerUnit);
  const __m256 bound = _mm256_set1_ps(lower);
  long long count = 0, i = 0;
  auto near_enough = [&](__m256 s) {
    return _mm256_cmp_ps(_mm256_add_ps(s, _mm256_fmadd_ps(_mm256_andnot_ps(sign, s), per_unit, slack)), bound, _CMP_GE_OQ);
  };
  for (; i + 8 <= n; i += 8) {
    unsigned hits = static_cast<unsigned>(_mm256_movemask_ps(near_enough(_mm256_loadu_ps(sums + i))));
    for (; hits; hits &= hits - 1) near[count++] = static_cast<std::uint32_t>(i + __builtin_ctz(hits));
  }
  if (i < n) {
    alignas(32) float tail[8];
    for (int t = 0; t < 8; ++t) tail[t] = i + t < n ? sums[i + t] : -INFINITY;
    unsigned hits = static_cast<unsigned>(_mm256_movemask_ps(near_enough(_mm256_load_ps(tail))));
    for (; hits; hits &= hits - 1) near[count++] = static_cast<std::uint32_t>(i + __builtin_ctz(hits));
  }
  return count;
}

float gumbel_sums_row_avx2(const void* row, QmmElem elem, long long n, const std::uint32_t* words, float* sums,
                           bool& unusual) {
  switch (elem) {
    case QmmElem::f32: return gumbel_sums_row<QmmElem::f32>(row, n, words, sums, unusual);
    case QmmElem::bf16: return gumbel_sums_row<QmmElem::bf16>(row, n, words, sums, unusual);
    default: return gumbel_sums_row<QmmElem::f16>(row, n, words, sums, unusual);
  }
}

}  // namespace mlxrt::kernels::cpu
