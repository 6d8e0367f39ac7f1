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

}  // namespace

float logsumexp_row_avx2(const void* row, QmmElem elem, long long n, float* scratch) {
  switch (elem) {
    case QmmElem::f32: return logsumexp_row<QmmElem::f32>(row, n, scratch);
    case QmmElem::bf16: return logsumexp_row<QmmElem::bf16>(row, n, scratch);
    default: return logsumexp_row<QmmElem::f16>(row, n, scratch);
  }
}

}  // namespace mlxrt::kernels::cpu
