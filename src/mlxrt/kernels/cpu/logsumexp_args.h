#pragma once
/** The plain-data call of the L1 CPU logsumexp (logsumexp.h): what its instruction-set file sees
 * (as affine_qmm_args.h, no header with inline functions). */
#include "mlxrt/kernels/cpu/affine_qmm_args.h"

namespace mlxrt::kernels::cpu {

/** Floats of scratch one row takes: a block of exponentials, computed eight at a time, before they
 * are added one by one. */
constexpr long long kLogSumExpScratch = 512;

/** MLX's CPU logsumexp of one row of n > 0 values of type `elem`, before its rounding to that type:
 * m = the row's maximum, then m itself where m is infinite, else log(sum of exp(x - m)) + m with
 * MLX's exp polynomial (backend/cpu/simd/math.h) and the sum taken in element order in float32, as
 * MLX's Linux build (one lane: Simd<T, 1>) computes it. AVX2 with FMA and F16C. */
float logsumexp_row_avx2(const void* row, QmmElem elem, long long n, float* scratch);

/** out[i] = row[i] - normalizer for n values of type `elem` (float32 or bfloat16; `normalizer`
 * already of that type), rounded to it as MLX's CPU subtract rounds: the difference in float32
 * (x86's rule for NaN operands: the first one's), then, for bfloat16, to nearest even, every NaN
 * becoming MLX's one bfloat16 NaN. AVX2. */
void subtract_row_avx2(const void* row, QmmElem elem, long long n, float normalizer, void* out);

}  // namespace mlxrt::kernels::cpu
