#include "mlxrt/util/cuda_graphs.h"

#include <cstdlib>

namespace mlxrt {

bool prefer_direct_kernel_launches() {
  // MLX's own reading of the variable: set means atoi(value), 0 for off.
  if (const char* set = std::getenv("MLX_USE_CUDA_GRAPHS")) return std::atoi(set) != 0;
  setenv("MLX_USE_CUDA_GRAPHS", "0", 0);
  return false;
}

}  // namespace mlxrt
