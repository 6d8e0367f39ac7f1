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
 * the L3 kernels, or experts' matrices w (E × n × k) one after another: a lazy array, computed with
 * the load. nullopt where they do not apply (no L3 kernels, not affine 4 or 8 bits with groups of
 * 32, 64 or 128, no biases). */
std::optional<mx::array> l3_pack(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& w,
                                 const mx::array& scales, const std::optional<mx::array>& biases, int group_size,
                                 int bits, const std::string& mode);

/** mx::gather_qmm(x, w, scales, biases, lhs none, rhs_indices, transpose = true, group_size, bits,
 * "affine") over experts w [E, n, k · bits / 32] that l3_pack packed (`packed`): each output block
 * computed as l3_quantized_matmul computes it. nullopt where it does not apply. */
std::optional<mx::array> l3_gather_qmm(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x,
                                       const mx::array& w, const mx::array& scales, const mx::array& biases,
                                       const mx::array& packed, const mx::array& rhs_indices, int group_size, int bits,
                                       bool sorted_indices);

/** x (…, k) @ the packed weights' transpose: (…, n) of `dtype` (what mx::quantized_matmul's result
 * type would be), on the CPU stream. */
mx::array l3_quantized_matmul(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x,
                              const mx::array& packed, int n, int k, int group_size, int bits, mx::Dtype dtype);

}  // namespace mlxrt::kernels::cpu
