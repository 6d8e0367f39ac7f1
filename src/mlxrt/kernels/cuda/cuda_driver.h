#pragma once
/** What mlxrt asks the CUDA driver directly: the binary is built against MLX's CPU wheel and runs
 * on a CUDA one, so the driver library (libcuda.so.1, which MLX's CUDA backend has loaded) is opened
 * at run time, not linked. */

namespace mlxrt::kernels::cuda {

/** The multiprocessors of CUDA device 0 (MLX's GPU), or 0 where the driver cannot be opened or
 * answers with an error (no GPU, no driver). */
int cuda_multiprocessor_count();

/** Device 0's compute capability as major * 10 + minor (90 for an H100 or H200), or 0 where the
 * driver cannot be opened or answers with an error. */
int cuda_compute_capability();

}  // namespace mlxrt::kernels::cuda
