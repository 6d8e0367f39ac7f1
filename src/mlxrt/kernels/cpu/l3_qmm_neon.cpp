// The L3 affine quantized matmul (l3_qmm_impl.h) and its x quantization on plain NEON (ARMv8-A):
// a quarter of a packed tile (4 outputs) per vector, the integer products by widening byte
// multiplies (l3_qmm_neon_vec.h). Compiled with -ffp-contract=off (cmake/cpu_kernels.cmake); the
// aarch64 CPUs without the dot product run it.
#include <cstdint>

#include "mlxrt/kernels/cpu/l3_qmm_args.h"
#include "mlxrt/kernels/cpu/l3_qmm_impl.h"
#include "mlxrt/kernels/cpu/l3_qmm_neon_vec.h"
#include "mlxrt/kernels/cpu/l3_quantize_impl.h"

namespace mlxrt::kernels::cpu {

void l3_qmm_units_neon(const L3QmmArgs& a, int begin, int end) { detail::L3Qmm<Vec128L3<false>>(a).units(begin, end); }

// The quantization has no integer products: one version serves both NEON paths.
void l3_quantize_block_neon(const float* x, std::int8_t* q1, std::int8_t* q2, float* d, int* sums) {
  detail::L3QuantizeBlock<Vec128L3<false>>::run(x, q1, q2, d, sums);
}

}  // namespace mlxrt::kernels::cpu
