#pragma once
/** The L3 matrix-vector product of MLX's 4-bit float modes on CUDA (--fidelity l3 on an NVIDIA GPU).
 *
 * y = x @ dequantize(w, scales).T for the few rows of x a decoding step has (1 to 8), with w as
 * mx.quantize packs it in mode "mxfp4" (E2M1 codes, one E8M0 scale per 32 values) or "nvfp4" (E2M1
 * codes, one E4M3 scale per 16 values, no global scale): eight codes a uint32 word, value j in bits
 * 4j..4j+3; scales uint8 [N, K / group_size]. The loads are affine_qmv's (affine_qmv.h): each lane
 * reads 16 bytes of a weight row at a time, a warp owns several rows, the next step's loads go out
 * before the current step is summed.
 *
 * Decoding: a code's three magnitude bits go under a half's exponent and mantissa (bits 9-11) with
 * its sign on bit 15. That half is the code's value times 2^-14, E2M1's subnormal (0 and 0.5)
 * falling on the half's subnormals, so four integer operations and a conversion give two values,
 * exactly. Each group's sum of x times those values (float32) is then scaled by 2^14 and by the
 * group's scale: not MLX's order (its qmv sums 4-bit products in x's own type), so L3, measured by
 * `mlxrt fidelity`; tests/cuda_kernels/fp4_qmv_test.cpp holds every output to a float32 bound.
 *
 * Off by default: on an H100 it is 1.2-2.2x MLX's kernel at one row on Qwen3-8B's shapes, but its
 * greedy agreement with L1 on a random 8B nvfp4 model was 91.8% (mean KL 3.8e-5), under the 99%
 * gate (bench/RESULTS.md, twenty-eighth session). MLXRT_CUDA_L3_FP4=1 opts in. */
#include <mlx/array.h>

#include <string>

#include "mlxrt/kernels/cuda/affine_qmv.h"
#include "mlxrt/kernels/cuda/kernel_launch.h"

namespace mlxrt::kernels::cuda {

namespace mx = mlx::core;

/** Whether fp4_qmv's kernel takes these operands: mode "mxfp4" with group size 32 or "nvfp4" with
 * 16, 4 bits, w uint32 [N, K / 8] with K a multiple of 32, scales uint8 [N, K / group_size], x
 * floating [..., K] of 1 to kQmvMaxRows rows. */
bool fp4_qmv_operands_fit(const mx::array& x, const mx::array& w, const mx::array& scales, int group_size, int bits,
                          const std::string& mode);

/** Whether fp4_qmv computes this product: the operands fit and the default device is a CUDA GPU. */
bool fp4_qmv_applies(const mx::array& x, const mx::array& w, const mx::array& scales, int group_size, int bits,
                     const std::string& mode);

/** Whether the 4-bit float modes take fp4_qmv at L3: MLXRT_CUDA_L3_FP4=1, read once a process. */
bool fp4_l3_opted_in();

/** Whether the model takes fp4_qmv at L3: opted in, at most 7 rows and at least 4 MiB of packed
 * weights (affine_qmv_preferred's rule). */
bool fp4_qmv_preferred(const mx::array& x, const mx::array& w);

/** x @ dequantize(w, scales).T in x's dtype (mx::quantized_matmul's for these modes), shaped
 * [..., N]. std::invalid_argument where fp4_qmv_applies does not hold. */
mx::array fp4_qmv(const mx::array& x, const mx::array& w, const mx::array& scales, int group_size,
                  const std::string& mode, QmvTiling tiling = {});

/** fp4_qmv's launch (kernel_launch.h). std::invalid_argument where the operands do not fit or the
 * tiling is out of range. */
KernelLaunch fp4_qmv_launch(const mx::array& x, const mx::array& w, const mx::array& scales, int group_size,
                            const std::string& mode, QmvTiling tiling = {});

/** The kernel's text (tests and tools compile it without a GPU). */
const KernelSpec& fp4_qmv_spec();

}  // namespace mlxrt::kernels::cuda
