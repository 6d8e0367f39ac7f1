// L3's prefill product on CUDA (kernels/cuda/dequantized_gemm.h), run here on the CPU through the
// same MLX ops: which products take it, and that its result has quantized_matmul's shape and type
// and stays within the rounding of each dequantized weight (and of the output) of the exact
// product. (MLX's CPU quantized_matmul with bf16 operands is itself further from the exact product:
// 1.68 at most against this path's 0.24 on one random 96 x 256 case, so it is not the reference.)
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <mlx/mlx.h>

#include "mlxrt/kernels/cuda/dequantized_gemm.h"
#include "matmul_case.h"

namespace mx = mlx::core;
using mlxrt::kernels::cuda::dequantized_gemm;
using mlxrt::kernels::cuda::dequantized_gemm_wanted;
using mlxrt::kernels::test::floats_of;

namespace {

TEST(DequantizedGemm, TakesProductsOfAtLeastTheThresholdsRowsInAffineMode) {
  const auto biases = std::optional<mx::array>(mx::zeros({4, 1}, mx::bfloat16));
  const auto rows = [](int b, int l) { return mx::zeros({b, l, 64}, mx::bfloat16); };
  EXPECT_FALSE(dequantized_gemm_wanted(rows(1, 7), biases, 8));
  EXPECT_TRUE(dequantized_gemm_wanted(rows(1, 8), biases, 8));
  EXPECT_TRUE(dequantized_gemm_wanted(rows(2, 4), biases, 8)) << "rows are every dimension but the last";
  EXPECT_FALSE(dequantized_gemm_wanted(rows(1, 512), biases, 0)) << "threshold 0: never";
  EXPECT_FALSE(dequantized_gemm_wanted(rows(1, 512), std::nullopt, 8)) << "no biases: not affine";
  EXPECT_FALSE(dequantized_gemm_wanted(mx::zeros({1, 512, 64}, mx::int32), biases, 8));
  // Unset in the test's environment: the default.
  EXPECT_EQ(mlxrt::kernels::cuda::dequantized_gemm_min_rows(), mlxrt::kernels::cuda::kDequantizedGemmDefaultRows);
}

struct Case {
  int bits, group_size;
  mx::Dtype x_type, scale_type;
};

TEST(DequantizedGemm, QuantizedMatmulsShapeTypeAndValuesWithinTheWeightsRounding) {
  const int N = 96, K = 256;
  auto key = mx::random::key(7);
  for (const Case c : {Case{4, 64, mx::bfloat16, mx::bfloat16}, Case{4, 32, mx::float16, mx::float16},
                       Case{8, 128, mx::bfloat16, mx::bfloat16}, Case{4, 64, mx::float32, mx::bfloat16},
                       Case{4, 64, mx::float32, mx::float32}}) {
    const std::string what = std::to_string(c.bits) + "-bit g" + std::to_string(c.group_size) + " x " +
                             (c.x_type == mx::float32 ? "f32" : "16-bit") + " scales " +
                             (c.scale_type == mx::float32 ? "f32" : "16-bit");
    SCOPED_TRACE(what);
    auto keys = mx::random::split(key, 3);
    key = mx::take(keys, 0, 0);
    const auto w_float = mx::astype(mx::random::normal({N, K}, mx::float32, mx::take(keys, 1, 0)), c.scale_type);
    const auto x = mx::astype(mx::random::normal({2, 5, K}, mx::float32, mx::take(keys, 2, 0)), c.x_type);
    const auto q = mx::quantize(w_float, c.group_size, c.bits);
    const auto &w = q[0], &scales = q[1], &biases = q[2];
    const auto ours = dequantized_gemm(x, w, scales, biases, c.group_size, c.bits);
    const auto mlx = mx::quantized_matmul(x, w, scales, biases, true, c.group_size, c.bits);
    // The exact product in float32: each weight s q + b in float32.
    const auto exact_w = mx::dequantize(w, mx::astype(scales, mx::float32), mx::astype(biases, mx::float32),
                                        c.group_size, c.bits);
    const auto exact = mx::matmul(mx::astype(x, mx::float32), mx::transpose(exact_w));
    const auto magnitude = mx::matmul(mx::abs(mx::astype(x, mx::float32)), mx::transpose(mx::abs(exact_w)));
    mx::eval({ours, mlx, exact, magnitude});
    ASSERT_EQ(ours.shape(), mlx.shape());
    ASSERT_EQ(ours.dtype(), mlx.dtype());
    // Each weight rounded to the scales' type moves a term of the sum by at most half a unit in its
    // last place (relative); the result is rounded to the output type; float32's own sums add a few
    // units of 2^-24. The bound is twice those.
    const double w_unit = c.scale_type == mx::float32 ? 0.0 : c.scale_type == mx::float16 ? 0x1p-11 : 0x1p-8;
    const double y_unit = ours.dtype() == mx::float32 ? 0x1p-24 : ours.dtype() == mx::float16 ? 0x1p-11 : 0x1p-8;
    const auto a = floats_of(ours), e = floats_of(exact), m = floats_of(magnitude);
    int differ = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const double bound = 2.0 * (w_unit * m[i] + y_unit * std::fabs(e[i]) + 0x1p-20 * m[i]);
      ASSERT_LE(std::fabs(a[i] - e[i]), bound) << what << " at " << i << ": " << a[i] << " vs " << e[i];
      differ += static_cast<float>(a[i]) != static_cast<float>(e[i]);
    }
    // With float32 scales and x it is the exact product itself; elsewhere the roundings show.
    if (w_unit > 0 || ours.dtype() != mx::float32) {
      EXPECT_GT(differ, 0) << "the comparison should see the roundings";
    }
  }
}

}  // namespace
