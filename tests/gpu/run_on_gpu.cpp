// tests/cuda_kernels' launches on a CUDA GPU, through CachedKernel as the model's. What it is for:
// tests/cuda_kernels/kernel_backend.h.
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <mlx/backend/cuda/cuda.h>
#include <mlx/device.h>
#include <mlx/transforms.h>

#include "kernel_backend.h"
#include "mlxrt/kernels/cuda/cached_kernel.h"

namespace mlxrt::kernels::cuda::kernel_tests {

bool kernels_on_gpu() { return true; }

bool use_kernel_device() {
  if (!mx::cu::is_available()) return false;
  mx::set_default_device(mx::Device::gpu);
  return true;
}

std::vector<mx::array> run(const KernelLaunch& launch) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<CachedKernel>> kernels;
  CachedKernel* kernel = nullptr;
  {
    std::lock_guard lock(mutex);
    auto& slot = kernels[launch.spec->name];
    if (!slot) slot = std::make_unique<CachedKernel>(*launch.spec);
    kernel = slot.get();
  }
  // Evaluated, as the CPU's runtime returns them: a test may read an input the kernel writes in
  // place (a cache, the barrier's state) before any output, and must find the launch's writes.
  auto outputs = (*kernel)(launch);
  mx::eval(outputs);
  return outputs;
}

}  // namespace mlxrt::kernels::cuda::kernel_tests
