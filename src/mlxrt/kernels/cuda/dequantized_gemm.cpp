#include "mlxrt/kernels/cuda/dequantized_gemm.h"

#include <cstdlib>

#include <mlx/ops.h>

#include "mlxrt/kernels/cuda/env_knob.h"

namespace mlxrt::kernels::cuda {

int dequantized_gemm_min_rows() {
  static const int rows = std::getenv("MLXRT_CUDA_L3_PREFILL_ROWS") ? env_positive_int("MLXRT_CUDA_L3_PREFILL_ROWS")
                                                                     : kDequantizedGemmDefaultRows;
  return rows;
}

bool dequantized_gemm_wanted(const mx::array& x, const std::optional<mx::array>& biases, int min_rows) {
  if (min_rows <= 0 || !biases || x.ndim() < 1 || !mx::issubdtype(x.dtype(), mx::floating)) return false;
  const size_t cols = static_cast<size_t>(x.shape(-1));
  return cols > 0 && x.size() / cols >= static_cast<size_t>(min_rows);
}

mx::array dequantized_gemm(const mx::array& x, const mx::array& w, const mx::array& scales, const mx::array& biases,
                           int group_size, int bits) {
  // dequantize gives the scales' type; matmul then promotes with x's as quantized_matmul does.
  const auto dense = mx::dequantize(w, scales, biases, group_size, bits, "affine");
  return mx::matmul(x, mx::transpose(dense));
}

}  // namespace mlxrt::kernels::cuda
