#pragma once
/** Where the tests in tests/cuda_kernels run the kernels' launches. The same test files are built
 * twice: into mlxrt_cuda_kernel_tests with tests/gpu/run_on_gpu.cpp (a CUDA GPU, through
 * CachedKernel, as the model launches them) and into mlxrt_cuda_emu_tests with
 * tests/cuda_emu/run_emulated.cpp (the CPU, through the SIMT runtime: CTest runs these in CI). The
 * tests check values against float64 within float32 bounds, which both hold to. */
#include <vector>

#include <mlx/array.h>

#include "mlxrt/kernels/cuda/kernel_launch.h"

namespace mlxrt::kernels::cuda::kernel_tests {

/** Whether this executable's launches run on a CUDA GPU. */
bool kernels_on_gpu();

/** Makes the launches' device MLX's default; false where this executable's device is missing. */
bool use_kernel_device();

/** The launch's outputs, computed (evaluated) on this executable's device: inputs the kernel writes
 * in place hold its writes on return. */
std::vector<mx::array> run(const KernelLaunch& launch);

}  // namespace mlxrt::kernels::cuda::kernel_tests
