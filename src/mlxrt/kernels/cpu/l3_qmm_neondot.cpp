// The L3 affine quantized matmul (l3_qmm_impl.h) on NEON with the ARMv8.2 dot product (SDOT):
// 4 outputs per vector, four byte products per lane and instruction (l3_qmm_neon_vec.h). Compiled
// with -march=armv8.2-a+dotprod -ffp-contract=off (cmake/cpu_kernels.cmake); called only where the
// kernel reports the dot product (HWCAP_ASIMDDP).
#include <cstdint>

#include "mlxrt/kernels/cpu/l3_qmm_args.h"
#include "mlxrt/kernels/cpu/l3_qmm_impl.h"
#include "mlxrt/kernels/cpu/l3_qmm_neon_vec.h"

namespace mlxrt::kernels::cpu {

void l3_qmm_units_neondot(const L3QmmArgs& a, int begin, int end) { detail::L3Qmm<Vec128L3<true>>(a).units(begin, end); }

}  // namespace mlxrt::kernels::cpu
