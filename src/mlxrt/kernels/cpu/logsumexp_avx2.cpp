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
#include "mlxrt/kernels/cpu/avx2_exp.h"

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

// float32 to bfloat16 as MLX's _MLX_BFloat16(float) converts: round to nearest even, and any NaN
// to 0x7FC0 (its sign dropped).
__m128i to_bf16_as_mlx(__m256 f) {
  const __m256i u = _mm256_castps_si256(f);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
  rounded = _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7FC0), nan);
  // Eight 32-bit lanes holding 16-bit values, packed in order.
  const __m128i lo = _mm256_castsi256_si128(rounded), hi = _mm256_extracti128_si256(rounded, 1);
  return _mm_packus_epi32(lo, hi);
}

std::uint16_t to_bf16_as_mlx(float f) {
  if (std::isnan(f)) return 0x7FC0;
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += ((u >> 16) & 1) + 0x7FFFu;
  return static_cast<std::uint16_t>(u >> 16);
}

template <QmmElem E>
void subtract_row(const void* row, long long n, float normalizer, void* out) {
  const __m256 l = _mm256_set1_ps(normalizer);
  long long i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 d = _mm256_sub_ps(load8<E>(row, i), l);
    if constexpr (E == QmmElem::f32)
      _mm256_storeu_ps(static_cast<float*>(out) + i, d);
    else
      _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<std::uint16_t*>(out) + i), to_bf16_as_mlx(d));
  }
  for (; i < n; ++i) {
    const float d = subtract_in_order(load1<E>(row, i), normalizer);
    if constexpr (E == QmmElem::f32)
      static_cast<float*>(out)[i] = d;
    else
      static_cast<std::uint16_t*>(out)[i] = to_bf16_as_mlx(d);
  }
}

}  // namespace

void subtract_row_avx2(const void* row, QmmElem elem, long long n, float normalizer, void* out) {
  if (elem == QmmElem::f32)
    subtract_row<QmmElem::f32>(row, n, normalizer, out);
  else
    subtract_row<QmmElem::bf16>(row, n, normalizer, out);
}

float logsumexp_row_avx2(const void* row, QmmElem elem, long long n, float* scratch) {
  switch (elem) {
    case QmmElem::f32: return logsumexp_row<QmmElem::f32>(row, n, scratch);
    case QmmElem::bf16: return logsumexp_row<QmmElem::bf16>(row, n, scratch);
    default: return logsumexp_row<QmmElem::f16>(row, n, scratch);
  }
}

}  // namespace mlxrt::kernels::cpu
