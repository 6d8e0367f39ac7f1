// Where mlxrt's CUDA kernels run. What a launch holds: kernel_launch.h.
#include "mlxrt/kernels/cuda/kernel_launch.h"

#include <mlx/backend/cuda/cuda.h>
#include <mlx/device.h>

namespace mlxrt::kernels::cuda {

bool cuda_gpu_is_default() { return mx::default_device() == mx::Device::gpu && mx::cu::is_available(); }

}  // namespace mlxrt::kernels::cuda
