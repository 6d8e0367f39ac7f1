// The fused L3 CUDA kernels of a decoding step (kernels/cuda/fused_qmv.h) against float64 on the
// host. x is drawn from {±0.5, ±1, ±2}, whose squares sum exactly in float32 in any order, so the
// kernels' RMSNorm gives exactly the bytes of mx.fast.rms_norm (the same rsqrt of the same sum);
// the products then get affine_qmv's float32 bound (tests/cuda_kernels/affine_qmv_test.cpp):
//   |p - ref| <= u_out |ref| + 2^-24 (3 V + K / V + 16) sum_k |x_k| (|s_k| 2^bits + |b_k|),
// and SwiGLU and the residual add the roundings fused_qmv.h names, each bounded in the check. A
// wrong row, matrix or lane is off by orders of magnitude. Runs on a CUDA GPU and on the CPU's SIMT
// runtime (kernel_backend.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>
#include <mlx/fast.h>
#include <mlx/ops.h>
#include <mlx/random.h>
#include <mlx/transforms.h>

#include "kernel_backend.h"
#include "reference.h"
#include "mlxrt/kernels/cuda/fused_qmv.h"

namespace mlxrt::kernels::cuda {
namespace {

using namespace kernel_tests;

struct Case {
  int n, k, rows, group_size, bits;
  mx::Dtype x_type;
};

std::string describe(const char* kernel, const Case& c) {
  std::ostringstream s;
  s << kernel << " N " << c.n << " K " << c.k << " rows " << c.rows << " g" << c.group_size << " " << c.bits << "-bit "
    << c.x_type;
  return s.str();
}

class FusedQmv : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(kernel_tests::use_kernel_device()) << "these tests need a CUDA device";
  }
};

TEST_F(FusedQmv, RmsNormQkvIsTheNormThenThreeProducts) {
  const Case cases[] = {{512, 1024, 1, 64, 4, mx::bfloat16}, {333, 2048, 3, 128, 4, mx::float16},
                        {256, 512, 4, 32, 8, mx::float32},  {1024, 4096, 1, 64, 8, mx::bfloat16},
                        {1024, 4096, 1, 0, 0, mx::bfloat16}, {300, 1024, 3, 0, 0, mx::float16},
                        {128, 576, 2, 0, 0, mx::float32}};
  int seed = 1;
  for (const auto& c : cases) {
    Keys keys(seed++);
    const auto x = exact_square_x(keys, c.rows, c.k, c.x_type);
    const auto nw = mx::astype(mx::random::normal({c.k}, mx::float32, keys.next()), c.x_type);
    const float eps = 1e-6f;
    // The three matrices of a GQA layer: q the widest, k and v a quarter (at least one block).
    const QmvMatrix q = random_matrix(keys, c.n, c.k, c.group_size, c.bits, c.x_type);
    const QmvMatrix k = random_matrix(keys, std::max(1, c.n / 4), c.k, c.group_size, c.bits, c.x_type);
    const QmvMatrix v = random_matrix(keys, std::max(1, c.n / 4) + 3, c.k, c.group_size, c.bits, c.x_type);
    const auto launch = rms_norm_qkv_launch(x, {nw, eps}, q, k, v);
    ASSERT_TRUE(launch.has_value()) << describe("qkv", c);
    const auto ys = kernel_tests::run(*launch);
    const auto xn = host(mx::fast::rms_norm(x, nw, eps));  // exact: see the file's comment
    const double u = half_ulp(c.x_type);
    const QmvMatrix* mats[] = {&q, &k, &v};
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(ys[i].shape(), (mx::Shape{1, c.rows, mats[i]->w.shape(0)}));
      ASSERT_EQ(ys[i].dtype(), c.x_type);
      const auto p = products(xn, c.rows, *mats[i]);
      expect_close(describe("qkv", c) + " output " + std::to_string(i), host(ys[i]),
                   [&](size_t j) { return p.ref[j]; }, [&](size_t j) { return u * std::abs(p.ref[j]) + p.bound[j]; });
    }
  }
}

TEST_F(FusedQmv, RmsNormSwigluIsSiluOfGateTimesUp) {
  const Case cases[] = {{1536, 1024, 1, 64, 4, mx::bfloat16}, {777, 512, 2, 32, 8, mx::float16},
                        {300, 2048, 4, 128, 4, mx::float32},  {3072, 1024, 1, 0, 0, mx::bfloat16},
                        {500, 2048, 2, 0, 0, mx::float16}};
  int seed = 50;
  for (const auto& c : cases) {
    // The paired pass on a quantized and a dense case of two rows (the emulator's time is the limit).
    const bool try_paired = &c == &cases[1] || &c == &cases[4];
    Keys keys(seed++);
    const auto x = exact_square_x(keys, c.rows, c.k, c.x_type);
    const auto nw = mx::astype(mx::random::normal({c.k}, mx::float32, keys.next()), c.x_type);
    const QmvMatrix gate = random_matrix(keys, c.n, c.k, c.group_size, c.bits, c.x_type);
    const QmvMatrix up = random_matrix(keys, c.n, c.k, c.group_size, c.bits, c.x_type);
    const auto xn = host(mx::fast::rms_norm(x, nw, 1e-5f));
    const auto g = products(xn, c.rows, gate), v = products(xn, c.rows, up);
    const double u = half_ulp(c.x_type);
    auto silu = [](double a) { return a / (1.0 + std::exp(-a)); };
    // The two matrices read in turn, then in one pass (MLXRT_CUDA_L3_SWIGLU_PAIRS): the same sums.
    std::vector<double> first;
    for (const bool paired : {false, true}) {
      if (paired && !try_paired) continue;
      const auto what = describe(paired ? "swiglu paired" : "swiglu", c);
      const auto launch = rms_norm_swiglu_launch(x, {nw, 1e-5f}, gate, up, paired);
      ASSERT_TRUE(launch.has_value()) << what;
      const auto y = kernel_tests::run(*launch)[0];
      ASSERT_EQ(y.shape(), (mx::Shape{1, c.rows, c.n}));
      // Each product off by its bound and its rounding to the output type; |silu'| <= 1.1; then the
      // sigmoid, silu and the product each rounded once more.
      const auto got = host(y);
      expect_close(
          what, got, [&](size_t j) { return silu(g.ref[j]) * v.ref[j]; },
          [&](size_t j) {
            const double eg = u * std::abs(g.ref[j]) + g.bound[j], ev = u * std::abs(v.ref[j]) + v.bound[j];
            const double s = std::abs(silu(g.ref[j]));
            return 1.1 * eg * (std::abs(v.ref[j]) + ev) + s * ev + 4 * u * (s + 1.1 * eg) * (std::abs(v.ref[j]) + ev) + 1e-30;
          });
      if (paired) {
        EXPECT_EQ(got, first) << what << ": each row's sums are taken in the same order either way";
      } else {
        first = got;
      }
    }
  }
}

TEST_F(FusedQmv, QmvResidualAddsTheRoundedProduct) {
  const Case cases[] = {{1024, 3072, 1, 64, 4, mx::bfloat16}, {513, 1024, 3, 128, 8, mx::float16},
                        {200, 4096, 4, 32, 4, mx::float32},   {1024, 3072, 1, 0, 0, mx::bfloat16},
                        {77, 1000, 3, 0, 0, mx::float32}};
  int seed = 90;
  for (const auto& c : cases) {
    Keys keys(seed++);
    const auto x = mx::astype(mx::random::normal({1, c.rows, c.k}, mx::float32, keys.next()), c.x_type);
    const auto res = mx::astype(mx::random::normal({1, c.rows, c.n}, mx::float32, keys.next()), c.x_type);
    const QmvMatrix m = random_matrix(keys, c.n, c.k, c.group_size, c.bits, c.x_type);
    const auto launch = qmv_residual_launch(x, m, res);
    ASSERT_TRUE(launch.has_value()) << describe("residual", c);
    const auto y = kernel_tests::run(*launch)[0];
    ASSERT_EQ(y.shape(), res.shape());
    const auto p = products(host(x), c.rows, m);
    const auto r = host(res);
    const double u = half_ulp(c.x_type);
    expect_close(
        describe("residual", c), host(y), [&](size_t j) { return r[j] + p.ref[j]; },
        [&](size_t j) { return u * std::abs(p.ref[j]) + p.bound[j] + u * (std::abs(r[j] + p.ref[j]) + p.bound[j]); });
  }
}

TEST_F(FusedQmv, DeclinesWhatItDoesNotFuse) {
  Keys keys(7);
  const QmvMatrix a = random_matrix(keys, 128, 512, 64, 4, mx::bfloat16);
  const QmvMatrix eight = random_matrix(keys, 128, 512, 64, 8, mx::bfloat16);
  const auto nw = mx::ones({512}, mx::bfloat16);
  const auto x = mx::ones({1, 1, 512}, mx::bfloat16);
  EXPECT_TRUE(rms_norm_qkv_launch(x, {nw, 1e-6f}, a, a, a).has_value());
  EXPECT_FALSE(rms_norm_qkv_launch(x, {nw, 1e-6f}, a, eight, a).has_value());                    // mixed bits
  const QmvMatrix dense = random_matrix(keys, 128, 512, 0, 0, mx::bfloat16);
  EXPECT_TRUE(rms_norm_qkv_launch(x, {nw, 1e-6f}, dense, dense, dense).has_value());
  EXPECT_FALSE(rms_norm_qkv_launch(x, {nw, 1e-6f}, dense, a, dense).has_value());               // dense with quantized
  EXPECT_FALSE(qmv_residual_launch(mx::ones({1, 1, 512}, mx::float32), random_matrix(keys, 64, 512, 0, 0, mx::bfloat16),
                            mx::ones({1, 1, 64}, mx::float32)));                          // dense of another type
  EXPECT_FALSE(rms_norm_qkv_launch(mx::ones({1, 5, 512}, mx::bfloat16), {nw, 1e-6f}, a, a, a));  // 5 rows
  EXPECT_FALSE(rms_norm_qkv_launch(x, {mx::ones({512}, mx::float32), 1e-6f}, a, a, a));         // norm dtype
  EXPECT_FALSE(rms_norm_swiglu_launch(x, {nw, 1e-6f}, a, random_matrix(keys, 64, 512, 64, 4, mx::bfloat16)));  // shapes
  EXPECT_FALSE(qmv_residual_launch(x, a, mx::ones({1, 1, 64}, mx::bfloat16)));                   // residual shape
  EXPECT_FALSE(qmv_residual_launch(x, a, mx::ones({1, 1, 128}, mx::float32)));                   // residual dtype
}

// The model's functions: the launch through CachedKernel on a CUDA GPU, declined elsewhere.
TEST_F(FusedQmv, TheModelsFunctionsRunTheLaunchOnlyOnAGpu) {
  Keys keys(8);
  const QmvMatrix a = random_matrix(keys, 128, 512, 64, 4, mx::bfloat16);
  const auto nw = mx::ones({512}, mx::bfloat16);
  const auto x = exact_square_x(keys, 1, 512, mx::bfloat16);
  const auto res = mx::ones({1, 1, 128}, mx::bfloat16);
  if (kernel_tests::kernels_on_gpu()) {
    const auto qkv = rms_norm_qkv(x, {nw, 1e-6f}, a, a, a);
    ASSERT_TRUE(qkv.has_value());
    const auto launched = kernel_tests::run(*rms_norm_qkv_launch(x, {nw, 1e-6f}, a, a, a));
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(mx::array_equal((*qkv)[i], launched[i]).item<bool>());
    ASSERT_TRUE(rms_norm_swiglu(x, {nw, 1e-6f}, a, a).has_value());
    ASSERT_TRUE(qmv_residual(x, a, res).has_value());
  } else {
    EXPECT_FALSE(rms_norm_qkv(x, {nw, 1e-6f}, a, a, a).has_value());
    EXPECT_FALSE(rms_norm_swiglu(x, {nw, 1e-6f}, a, a).has_value());
    EXPECT_FALSE(qmv_residual(x, a, res).has_value());
  }
}

}  // namespace
}  // namespace mlxrt::kernels::cuda
