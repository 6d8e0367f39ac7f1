#pragma once
/** One launch of one of mlxrt's CUDA kernels, as data: which kernel, its inputs, its outputs'
 * shapes and types, the grid (in threads, as MLX counts it), the threadgroup and the template
 * arguments. Each kernel's `*_launch` function works it out from the operands alone (no device
 * needed), and its public function runs it through CachedKernel on a CUDA GPU; the tests run the
 * same launch on the CPU (tests/cuda_emu), so what the model launches is what they check. */
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <mlx/array.h>
#include <mlx/fast.h>

#include "mlxrt/kernels/cuda/kernel_source.h"

namespace mlxrt::kernels::cuda {

namespace mx = mlx::core;

struct KernelLaunch {
  const KernelSpec* spec = nullptr;
  std::vector<mx::array> inputs;
  std::vector<mx::Shape> output_shapes;
  std::vector<mx::Dtype> output_dtypes;
  std::tuple<int, int, int> grid{1, 1, 1};
  std::tuple<int, int, int> threadgroup{1, 1, 1};
  std::vector<std::pair<std::string, mx::fast::TemplateArg>> template_args;
};

/** Whether MLX's default device is a CUDA GPU: where the kernels' launches run. */
bool cuda_gpu_is_default();

}  // namespace mlxrt::kernels::cuda
