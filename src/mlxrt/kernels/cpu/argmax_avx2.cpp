// The L1 argmax row (argmax_args.h) on AVX2 with F16C: the row's largest value eight elements at a
// time, then the first element equal to it. Compiled with -mavx2 -mf16c -ffp-contract=off
// (cmake/cpu_kernels.cmake); comparisons only, so no rounding to match.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "mlxrt/kernels/cpu/argmax_args.h"

namespace mlxrt::kernels::cpu {

namespace {

#include "mlxrt/kernels/cpu/avx2_elements.h"

// The first element i with `matches(v_i)`, eight at a time (`vector` the same test on a vector's
// lanes); n when none.
template <QmmElem E, class Vector, class Scalar>
long long first_match(const void* row, long long n, Vector vector, Scalar matches) {
  long long i = 0;
  for (; i + 8 <= n; i += 8) {
    const int hit = _mm256_movemask_ps(vector(load8<E>(row, i)));
    if (hit) return i + __builtin_ctz(static_cast<unsigned>(hit));
  }
  for (; i < n; ++i)
    if (matches(load1<E>(row, i))) return i;
  return n;
}

template <QmmElem E>
std::uint32_t argmax_row(const void* row, long long n) {
  const auto [maximum, nan] = row_maximum<E>(row, n);
  // MLX 0.32.4 takes the first NaN where a row has one (a NaN, once taken, is never replaced), and
  // otherwise the first element equal to the largest (a later equal one does not compare greater).
  if (nan)
    return static_cast<std::uint32_t>(first_match<E>(
        row, n, [](__m256 v) { return _mm256_cmp_ps(v, v, _CMP_UNORD_Q); }, [](float v) { return std::isnan(v); }));
  const __m256 m = _mm256_set1_ps(maximum);
  return static_cast<std::uint32_t>(first_match<E>(
      row, n, [m](__m256 v) { return _mm256_cmp_ps(v, m, _CMP_EQ_OQ); }, [maximum](float v) { return v == maximum; }));
}

}  // namespace

std::uint32_t argmax_row_avx2(const void* row, QmmElem elem, long long n) {
  switch (elem) {
    case QmmElem::f32: return argmax_row<QmmElem::f32>(row, n);
    case QmmElem::bf16: return argmax_row<QmmElem::bf16>(row, n);
    default: return argmax_row<QmmElem::f16>(row, n);
  }
}

}  // namespace mlxrt::kernels::cpu
