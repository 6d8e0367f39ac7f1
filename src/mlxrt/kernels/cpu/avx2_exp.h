#pragma once
// MLX's CPU exp (backend/cpu/simd/math.h) on AVX2 with FMA, eight lanes at a time and one: what the
// L1 kernels that take exponentials share (logsumexp_avx2.cpp, categorical_avx2.cpp). Included
// only by those files, inside their anonymous namespace (each file's own copy, compiled with
// -mavx2 -mfma -mf16c -ffp-contract=off), after their includes of <immintrin.h>, <cmath>,
// <cstdint> and <cstring>.

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
  r = _mm256_blendv_ps(r, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x_init, _mm256_set1_ps(88.0f), _CMP_GT_OQ));
  return _mm256_blendv_ps(r, _mm256_setzero_ps(), _mm256_cmp_ps(x_init, _mm256_set1_ps(-88.0f), _CMP_LT_OQ));
}

// The same exp one value at a time (MLX's one-lane build, literally), for the rows the vector path
// leaves: those holding a NaN or whose maximum is a zero (its sign is the first zero's).
[[maybe_unused]] float exp_as_mlx(float x_init) {
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
  result = x_init > 88.0f ? INFINITY : result;
  return x_init < -88.0f ? 0.0f : result;
}
