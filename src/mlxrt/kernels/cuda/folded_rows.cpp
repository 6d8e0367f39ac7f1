#include "mlxrt/kernels/cuda/folded_rows.h"

#include <cstdlib>

#include <mlx/ops.h>
#include <mlx/version.h>

#include "mlxrt/kernels/cuda/cuda_driver.h"

namespace mlxrt::kernels::cuda {

namespace {

bool fold_switched_off() {
  const char* v = std::getenv("MLXRT_CUDA_FOLD_ROWS");
  return v && std::string(v) == "0";
}

}  // namespace

bool rows_fold_by_shape(const mx::array& x, const std::string& mode) {
  if (mode != "affine" || x.ndim() < 3 || x.size() == 0) return false;
  return x.size() / static_cast<size_t>(x.shape(-1)) != static_cast<size_t>(x.shape(-2));
}

bool quantized_rows_fold_exactly(const mx::array& x, const std::string& mode) {
  if (!rows_fold_by_shape(x, mode) || mx::default_device() != mx::Device::gpu) return false;
  // Asked on every projection of every step: the driver once (0 on Metal or without a GPU).
  static const bool applies = cuda_compute_capability() >= 80 && fold_read_for(mx::version()) && !fold_switched_off();
  return applies;
}

bool quantized_rows_as_one_problem(const mx::array& x, const std::string& mode) {
  if (x.ndim() <= 2) return true;
  if (x.size() > 0 && x.size() / static_cast<size_t>(x.shape(-1)) == static_cast<size_t>(x.shape(-2))) return true;
  return quantized_rows_fold_exactly(x, mode);
}

bool fold_read_for(const std::string& mlx_version) { return mlx_version.rfind("0.32.", 0) == 0; }

mx::array fold_rows(const mx::array& x) { return mx::reshape(x, {-1, x.shape(-1)}); }

}  // namespace mlxrt::kernels::cuda
