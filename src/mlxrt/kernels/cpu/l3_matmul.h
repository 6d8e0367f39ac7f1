#pragma once
/** The L3 (measured, not bit-exact) CPU quantized matmul, selected by --fidelity l3: x's rows
 * quantized to int8 in blocks of 32 and multiplied with the affine 4- or 8-bit weights in integers
 * (AVX-512 VNNI, or AVX2), the weights repacked once at load into tiles of 16 rows. Its arithmetic
 * is defined in l3_qmm_args.h; `mlxrt fidelity` measures it against L1. */
#include <memory>
#include <optional>

#include <mlx/array.h>

namespace mlxrt::kernels::cpu {

namespace mx = mlx::core;

class CpuKernels;

/** The weight matrix w (n × k, affine, `bits`, `group_size`) with its scales and biases packed for
 * the L3 kernels: a lazy array, computed with the load. nullopt where they do not apply (no L3
 * kernels, not affine 4 or 8 bits with groups of 32, 64 or 128, not a 2-D weight, no biases). */
std::optional<mx::array> l3_pack(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& w,
                                 const mx::array& scales, const std::optional<mx::array>& biases, int group_size,
                                 int bits, const std::string& mode);

/** x (…, k) @ the packed weights' transpose: (…, n) of `dtype` (what mx::quantized_matmul's result
 * type would be), on the CPU stream. */
mx::array l3_quantized_matmul(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x,
                              const mx::array& packed, int n, int k, int group_size, int bits, mx::Dtype dtype);

}  // namespace mlxrt::kernels::cpu
