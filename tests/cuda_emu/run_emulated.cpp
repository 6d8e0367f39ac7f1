// tests/cuda_kernels' launches on the CPU, through the SIMT runtime. What it is for:
// tests/cuda_kernels/kernel_backend.h.
#include <mlx/device.h>

#include "emulated_kernel.h"
#include "kernel_backend.h"

namespace mlxrt::kernels::cuda::kernel_tests {

bool kernels_on_gpu() { return false; }

bool use_kernel_device() {
  mx::set_default_device(mx::Device::cpu);
  return true;
}

std::vector<mx::array> run(const KernelLaunch& launch) {
  return cuda_emu::emulated_launch(*launch.spec, launch.inputs, launch.output_shapes, launch.output_dtypes,
                                   launch.grid, launch.threadgroup, launch.template_args,
                                   launch.spec->grid_barrier);
}

}  // namespace mlxrt::kernels::cuda::kernel_tests
