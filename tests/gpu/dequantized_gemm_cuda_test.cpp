// L3's prefill product (kernels/cuda/dequantized_gemm.h) against MLX's own quantized_matmul on a
// CUDA GPU, at the shapes a Qwen3 prefill multiplies: whether the dequantized dense GEMM gives
// MLX's bytes. MLX's tensor-core kernel also rounds each dequantized weight to 16 bits before its
// products, so equal bytes are possible where both accumulate the same k order. On an H100 they
// were equal from 512 rows at every shape, and differed at 64-100 rows for the long products
// (bench/RESULTS.md): the test holds the first (a chunk of 512 or more rows gives MLX's bytes) and
// prints the rest, each shape's count of differing elements and largest difference (L3 there:
// `mlxrt fidelity` measures it). Needs a CUDA device.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <mlx/backend/cuda/cuda.h>
#include <mlx/mlx.h>

#include "mlxrt/kernels/cuda/dequantized_gemm.h"

namespace mlxrt::kernels::cuda {
namespace {

struct Shape {
  int rows, out_dims, in_dims, bits, group_size;
};

std::string describe(const Shape& s) {
  return std::to_string(s.rows) + " x " + std::to_string(s.in_dims) + " -> " + std::to_string(s.out_dims) + ", " +
         std::to_string(s.bits) + "-bit g" + std::to_string(s.group_size);
}

TEST(DequantizedGemmCuda, GivesQuantizedMatmulsBytesFrom512RowsAtAPrefillsShapes) {
  if (!mx::cu::is_available()) GTEST_SKIP() << "needs a CUDA device";
  mx::set_default_device(mx::Device::gpu);
  std::vector<Shape> shapes;
  // Qwen3-0.6B's q/o, gate/up, down and Qwen3-8B's q, k/v, gate/up, down, at a chunk's row counts.
  for (int rows : {64, 100, 128, 256, 512, 777, 2048})
    for (auto [n, k] : std::vector<std::pair<int, int>>{
             {2048, 1024}, {3072, 1024}, {1024, 3072}, {4096, 4096}, {1024, 4096}, {12288, 4096}, {4096, 12288}})
      shapes.push_back({rows, n, k, 4, 64});
  for (auto [bits, group] : std::vector<std::pair<int, int>>{{4, 32}, {4, 128}, {8, 64}})
    shapes.push_back({512, 4096, 4096, bits, group});
  auto key = mx::random::key(11);
  constexpr int kEqualFromRows = 512;
  int unequal_shapes = 0;
  for (const Shape& s : shapes) {
    auto keys = mx::random::split(key, 3);
    key = mx::take(keys, 0, 0);
    const auto w_float =
        mx::astype(mx::random::normal({s.out_dims, s.in_dims}, mx::float32, mx::take(keys, 1, 0)), mx::bfloat16);
    const auto x = mx::astype(mx::random::normal({1, s.rows, s.in_dims}, mx::float32, mx::take(keys, 2, 0)),
                              mx::bfloat16);
    const auto q = mx::quantize(w_float, s.group_size, s.bits);
    const auto ours = dequantized_gemm(x, q[0], q[1], q[2], s.group_size, s.bits);
    const auto mlx = mx::quantized_matmul(x, q[0], q[1], q[2], true, s.group_size, s.bits);
    const auto differ = mx::sum(mx::not_equal(ours, mlx));
    const auto largest = mx::max(mx::abs(mx::subtract(mx::astype(ours, mx::float32), mx::astype(mlx, mx::float32))));
    mx::eval({differ, largest});
    const auto n_differ = differ.item<uint32_t>();
    std::printf("%-34s %9u of %9zu differ, largest %g\n", describe(s).c_str(), n_differ, ours.size(),
                largest.item<float>());
    unequal_shapes += n_differ != 0 && s.rows >= kEqualFromRows;
  }
  EXPECT_EQ(unequal_shapes, 0) << "shapes of " << kEqualFromRows
                               << " rows or more whose dense product differs from MLX's quantized_matmul (listed above)";
}

}  // namespace
}  // namespace mlxrt::kernels::cuda
