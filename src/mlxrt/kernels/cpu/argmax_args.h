#pragma once
/** The plain-data call of the L1 CPU argmax (argmax.h): what its instruction-set file sees (as
 * affine_qmm_args.h, no header with inline functions). */
#include <cstdint>

#include "mlxrt/kernels/cpu/affine_qmm_args.h"

namespace mlxrt::kernels::cpu {

/** MLX's CPU argmax of one row of n > 0 values of type `elem`: the first NaN's index where the row
 * has one, else the first of its largest values (+0 and -0 equal), as MLX 0.32.4 answers. AVX2 with
 * F16C. */
std::uint32_t argmax_row_avx2(const void* row, QmmElem elem, long long n);

}  // namespace mlxrt::kernels::cpu
