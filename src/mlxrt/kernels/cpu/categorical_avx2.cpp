// The L1 categorical draw of one row (categorical_args.h) on AVX2 with FMA and F16C: the maximum and
// the exponentials eight elements at a time by MLX's operations, the running sum one element at a time
// in MLX's order, then MLX's binary search. Compiled with -mavx2 -mfma -mf16c -ffp-contract=off
// (cmake/cpu_kernels.cmake), as logsumexp_avx2.cpp, whose exp this shares (avx2_exp.h).
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

}  // namespace

std::uint32_t inverse_cdf_row_avx2(const void* row, QmmElem elem, long long n, float u, float* cdf) {
  switch (elem) {
    case QmmElem::f32: return inverse_cdf_row<QmmElem::f32>(row, n, u, cdf);
    case QmmElem::bf16: return inverse_cdf_row<QmmElem::bf16>(row, n, u, cdf);
    default: return inverse_cdf_row<QmmElem::f16>(row, n, u, cdf);
  }
}

}  // namespace mlxrt::kernels::cpu
