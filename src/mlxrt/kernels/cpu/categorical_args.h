#pragma once
/** The plain-data call of the L1 CPU categorical sampling (categorical.h): what its instruction-set
 * file sees (as affine_qmm_args.h, no header with inline functions). */
#include <cstdint>

#include "mlxrt/kernels/cpu/affine_qmm_args.h"

namespace mlxrt::kernels::cpu {

/** MLX's categorical draw from one row of n > 0 logits of type `elem` by the inverse of its
 * distribution function (mlx/random.cpp, categorical_inverse_cdf), given the draw's uniform number
 * u in [0, 1): with x the row as float32 and m its maximum, the weights w = exp(x - m) (MLX's exp
 * polynomial; where m is infinite, w = (x == m)), their running sum from zero taken in element order
 * in float32, and the answer one less than the number of running sums at or below u times the total.
 * `cdf` holds n floats of scratch. AVX2 with FMA and F16C. */
std::uint32_t inverse_cdf_row_avx2(const void* row, QmmElem elem, long long n, float u, float* cdf);

}  // namespace mlxrt::kernels::cpu
