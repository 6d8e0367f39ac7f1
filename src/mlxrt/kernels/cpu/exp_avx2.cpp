// MLX's exp on many floats (exp_args.h) on AVX2 with FMA. Compiled with -mavx2 -mfma -mf16c
// -ffp-contract=off (cmake/cpu_kernels.cmake), as the other files that include avx2_exp.h.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "mlxrt/kernels/cpu/exp_args.h"

namespace mlxrt::kernels::cpu {

namespace {

#include "mlxrt/kernels/cpu/avx2_exp.h"

}  // namespace

void exp_as_mlx_avx2(const float* x, long long n, float* out) {
  long long i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, exp_as_mlx(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) out[i] = exp_as_mlx(x[i]);
}

}  // namespace mlxrt::kernels::cpu
