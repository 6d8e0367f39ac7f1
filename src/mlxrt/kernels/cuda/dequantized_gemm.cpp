#include "mlxrt/kernels/cuda/dequantized_gemm.h"

#include <cstdlib>
#include <string>

#include <mlx/ops.h>

namespace mlxrt::kernels::cuda {

int dequantized_gemm_min_rows() {
  static const int rows = [] {
    const char* v = std::getenv("MLXRT_CUDA_L3_PREFILL_ROWS");
    if (!v) return 0;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    // Anything but a positive integer leaves the path off, as an unset variable does.
    return end != v && *end == '\0' && n > 0 && n < (1L << 30) ? static_cast<int>(n) : 0;
  }();
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
