// The L1 logsumexp row (logsumexp_args.h) on AVX2 with FMA and F16C: the maximum and the
// exponentials eight elements at a time by MLX's operations, the sum one element at a time in MLX's
// order. Compiled with -mavx2 -mfma -mf16c -ffp-contract=off (cmake/cpu_kernels.cmake): every fused
// multiply-add here is one MLX's exp asks for by name (simd::fma, std::fma in its one-lane build).
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "mlxrt/kernels/cpu/logsumexp_args.h"

namespace mlxrt::kernels::cpu {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

#include "mlxrt/kernels/cpu/avx2_elements.h"

// MLX's floor(x + 0.5): the sum is a double there (0.5 is a double literal), so it never rounds;
// in float it would (0.49999997f + 0.5f is 1.0f).
__m256 floor_half_up(__m256 x) {
  const __m256d half = _mm256_set1_pd(0.5);
  const __m256d lo = _mm256_floor_pd(_mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), half));
  const __m256d hi = _mm256_floor_pd(_mm256_add_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), half));
  return _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
}

// MLX's simd::exp (2^(x log2 e) as 2^ipart times a degree-6 polynomial of the fraction), operation
// for operation: the same constants, fused multiply-adds where it has them, its selects in its order.
__m256 exp_as_mlx(__m256 x_init) {
  const __m256 x = _mm256_mul_ps(x_init, _mm256_set1_ps(1.442695f));
  const __m256 ipart = floor_half_up(x);
  const __m256 fpart = _mm256_sub_ps(x, ipart);
  __m256 p = _mm256_set1_ps(1.535336188319500e-4f);
  p = _mm256_fmadd_ps(p, fpart, _mm256_set1_ps(1.339887440266574e-3f));
  p = _mm256_fmadd_ps(p, fpart, _mm256_set1_ps(9.618437357674640e-3f));
  p = _mm256_fmadd_ps(p, fpart, _mm256_set1_ps(5.550332471162809e-2f));
  p = _mm256_fmadd_ps(p, fpart, _mm256_set1_ps(2.402264791363012e-1f));
  p = _mm256_fmadd_ps(p, fpart, _mm256_set1_ps(6.931472028550421e-1f));
  p = _mm256_fmadd_ps(p, fpart, _mm256_set1_ps(1.000000000000000f));
  // Truncation to int as a C++ cast does on x86-64 (out of range: INT_MIN; only where a select
  // below replaces the lane).
  const __m256i epart = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(ipart), _mm256_set1_epi32(127)), 23);
  __m256 r = _mm256_mul_ps(_mm256_castsi256_ps(epart), p);
  r = _mm256_blendv_ps(r, x_init, _mm256_cmp_ps(x_init, x_init, _CMP_UNORD_Q));
  r = _mm256_blendv_ps(r, _mm256_set1_ps(kInf), _mm256_cmp_ps(x_init, _mm256_set1_ps(88.0f), _CMP_GT_OQ));
  return _mm256_blendv_ps(r, _mm256_setzero_ps(), _mm256_cmp_ps(x_init, _mm256_set1_ps(-88.0f), _CMP_LT_OQ));
}

// The same exp one value at a time (MLX's one-lane build, literally), for the rows the vector path
// leaves: those holding a NaN or whose maximum is a zero (its sign is the first zero's).
float exp_as_mlx(float x_init) {
  float x = x_init * 1.442695f;
  const float ipart = static_cast<float>(std::floor(static_cast<double>(x) + 0.5));
  const float fpart = x - ipart;
  x = 1.535336188319500e-4f;
  x = std::fma(x, fpart, 1.339887440266574e-3f);
  x = std::fma(x, fpart, 9.618437357674640e-3f);
  x = std::fma(x, fpart, 5.550332471162809e-2f);
  x = std::fma(x, fpart, 2.402264791363012e-1f);
  x = std::fma(x, fpart, 6.931472028550421e-1f);
  x = std::fma(x, fpart, 1.000000000000000f);
  const std::uint32_t epart = (static_cast<std::uint32_t>(_mm_cvtt_ss2si(_mm_set_ss(ipart))) + 127u) << 23;
  float scale;
  std::memcpy(&scale, &epart, 4);
  float result = std::isnan(x_init) ? x_init : scale * x;
  result = x_init > 88.0f ? kInf : result;
  return x_init < -88.0f ? 0.0f : result;
}

// a + b and a - b with a as the instruction's first operand, as MLX's build computes them: where
// both are NaN, x86 returns the first one's, and its sign is in the result's bytes.
float add_in_order(float a, float b) { return _mm_cvtss_f32(_mm_add_ss(_mm_set_ss(a), _mm_set_ss(b))); }
float subtract_in_order(float a, float b) { return _mm_cvtss_f32(_mm_sub_ss(_mm_set_ss(a), _mm_set_ss(b))); }

template <QmmElem E>
float logsumexp_scalar(const void* row, long long n) {
  float maximum = -kInf;
  for (long long i = 0; i < n; ++i) {
    const float v = load1<E>(row, i);
    maximum = std::isnan(v) ? v : (v > maximum ? v : maximum);
  }
  float normalizer = 0.0f;
  for (long long i = 0; i < n; ++i)
    normalizer = add_in_order(normalizer, exp_as_mlx(subtract_in_order(load1<E>(row, i), maximum)));
  if (std::isinf(maximum)) return maximum;
  // MLX's float32 build adds the maximum first, its 16-bit ones the logarithm (what a row holding
  // NaNs of both signs shows: the test's special rows).
  return E == QmmElem::f32 ? add_in_order(maximum, std::log(normalizer)) : add_in_order(std::log(normalizer), maximum);
}

template <QmmElem E>
float logsumexp_row(const void* row, long long n, float* scratch) {
  const auto [maximum, nan] = row_maximum<E>(row, n);
  // A row's maximum is one value whatever the order it is found in, but for a NaN (MLX keeps the
  // first) and a zero (+0 and -0 compare equal: MLX keeps the first it met).
  if (nan || maximum == 0.0f) return logsumexp_scalar<E>(row, n);
  if (std::isinf(maximum)) return maximum;
  const __m256 m = _mm256_set1_ps(maximum);
  float normalizer = 0.0f;
  for (long long start = 0; start < n; start += kLogSumExpScratch) {
    const long long count = n - start < kLogSumExpScratch ? n - start : kLogSumExpScratch;
    long long j = 0;
    for (; j + 8 <= count; j += 8) _mm256_storeu_ps(scratch + j, exp_as_mlx(_mm256_sub_ps(load8<E>(row, start + j), m)));
    if (j < count) {
      alignas(32) float tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (long long t = 0; t < count - j; ++t) tail[t] = load1<E>(row, start + j + t);
      _mm256_storeu_ps(scratch + j, exp_as_mlx(_mm256_sub_ps(_mm256_load_ps(tail), m)));
    }
    // One addition after another, in element order: float addition is not associative.
    for (long long k = 0; k < count; ++k) normalizer = normalizer + scratch[k];
  }
  return std::log(normalizer) + maximum;
}

}  // namespace

float logsumexp_row_avx2(const void* row, QmmElem elem, long long n, float* scratch) {
  switch (elem) {
    case QmmElem::f32: return logsumexp_row<QmmElem::f32>(row, n, scratch);
    case QmmElem::bf16: return logsumexp_row<QmmElem::bf16>(row, n, scratch);
    default: return logsumexp_row<QmmElem::f16>(row, n, scratch);
  }
}

}  // namespace mlxrt::kernels::cpu
