// The L3 matrix-vector product of the 4-bit float modes (kernels/cuda/fp4_qmv.h) against float64 on
// the host, from MLX's own dequantization of the same codes and scales (mx::dequantize to float32,
// exact for E2M1 codes times E8M0 or E4M3 scales), within the bound float32 sums allow:
//   |y - ref| <= u_out |ref| + 2^-24 (32 + K / 16 + 16) sum_k |x_k w_k|
// (a group's chained products, the K / 32 group sums of a lane scaled and added, the warp's
// reduction). Every code and both scale formats' normal and subnormal bytes occur. A wrong code
// table, scale or index misses that by orders of magnitude. Runs on a CUDA GPU and on the CPU's SIMT
// runtime (kernel_backend.h).
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <mlx/ops.h>
#include <mlx/random.h>
#include <mlx/transforms.h>

#include "kernel_backend.h"
#include "mlxrt/kernels/cuda/fp4_qmv.h"
#include "reference.h"

namespace mlxrt::kernels::cuda {
namespace {

using kernel_tests::half_ulp;
using kernel_tests::host;
using kernel_tests::Keys;

struct Case {
  int n, k, rows;
  std::string mode;  // "mxfp4" (group 32) or "nvfp4" (group 16)
  mx::Dtype x_type;
};

int group_of(const std::string& mode) { return mode == "mxfp4" ? 32 : 16; }

std::string describe(const Case& c, QmvTiling t, bool misaligned) {
  std::ostringstream s;
  s << c.mode << " N " << c.n << " K " << c.k << " rows " << c.rows << " x " << c.x_type << " tiling "
    << t.rows_per_warp << "x" << t.warps_per_block << (misaligned ? " misaligned x" : "");
  return s.str();
}

// Scale bytes MLX would not write but must still decode as the formats say: E8M0 around 2^0
// (118-135, 2^-9 to 2^8), E4M3 of either exponent range (subnormal bytes 1-7 included), never NaN.
mx::array random_scales(Keys& keys, int n, int groups, const std::string& mode) {
  if (mode == "mxfp4")
    return mx::astype(mx::random::randint(118, 136, {n, groups}, mx::int32, keys.next()), mx::uint8);
  auto b = mx::random::randint(1, 0x7F, {n, groups}, mx::int32, keys.next());  // 1..126: positive, not NaN
  return mx::astype(b, mx::uint8);
}

void check(const Case& c, int seed, QmvTiling tiling = {}, bool misaligned = false) {
  Keys keys(seed);
  const int gs = group_of(c.mode);
  const auto w = mx::random::bits({c.n, c.k / 8}, 4, keys.next());
  const auto scales = random_scales(keys, c.n, c.k / gs, c.mode);
  auto x = mx::astype(mx::random::normal({c.rows * c.k + 1}, mx::float32, keys.next()), c.x_type);
  x = misaligned ? mx::slice(x, {1}, {1 + c.rows * c.k}) : mx::slice(x, {0}, {c.rows * c.k});
  x = mx::reshape(x, {1, c.rows, c.k});
  mx::eval({w, scales, x});
  const auto what = describe(c, tiling, misaligned);
  ASSERT_TRUE(fp4_qmv_operands_fit(x, w, scales, gs, 4, c.mode)) << what;
  auto y = kernel_tests::run(fp4_qmv_launch(x, w, scales, gs, c.mode, tiling))[0];
  mx::eval(y);
  ASSERT_EQ(y.dtype(), c.x_type) << what;
  ASSERT_EQ(y.shape(), (mx::Shape{1, c.rows, c.n})) << what;

  const auto dense = mx::dequantize(w, scales, std::nullopt, gs, 4, c.mode, std::nullopt, mx::float32);
  const auto p = kernel_tests::float64_products(host(x), c.rows, host(dense), c.n, 32.0 + double(c.k) / 16.0 + 16.0);
  const double u_out = half_ulp(c.x_type);
  kernel_tests::expect_close(what, host(y), [&](size_t i) { return p.ref[i]; },
                             [&](size_t i) { return u_out * std::abs(p.ref[i]) + p.bound[i]; });
}

class Fp4Qmv : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(kernel_tests::use_kernel_device()) << "these tests need a CUDA device"; }
};

TEST_F(Fp4Qmv, MxFp4WithinFloat32Bound) {
  int seed = 1;
  for (const auto& c : {Case{1024, 2048, 1, "mxfp4", mx::bfloat16}, Case{333, 4096, 1, "mxfp4", mx::bfloat16},
                        Case{257, 1024, 8, "mxfp4", mx::float32}, Case{130, 96, 3, "mxfp4", mx::float16}})
    check(c, seed++);
}

TEST_F(Fp4Qmv, NvFp4WithinFloat32Bound) {
  int seed = 20;
  for (const auto& c : {Case{1024, 2048, 1, "nvfp4", mx::bfloat16}, Case{200, 3072, 2, "nvfp4", mx::float16},
                        Case{129, 512, 8, "nvfp4", mx::float32}, Case{64, 32, 5, "nvfp4", mx::bfloat16}})
    check(c, seed++);
}

TEST_F(Fp4Qmv, EveryTilingAndUnalignedInput) {
  int seed = 40;
  for (QmvTiling t : {QmvTiling{1, 1}, QmvTiling{3, 2}, QmvTiling{8, 8}}) {
    check({517, 1536, 3, "mxfp4", mx::bfloat16}, seed++, t);
    check({131, 1024, 2, "nvfp4", mx::bfloat16}, seed++, t);
  }
  check({91, 512, 1, "mxfp4", mx::float16}, seed++, {}, true);
  check({91, 512, 4, "nvfp4", mx::bfloat16}, seed++, {}, true);
}

TEST_F(Fp4Qmv, RefusesWhatItDoesNotCompute) {
  const auto w = mx::zeros({64, 64}, mx::uint32);  // K = 512
  const auto s32 = mx::zeros({64, 16}, mx::uint8), s16 = mx::zeros({64, 32}, mx::uint8);
  const auto x = mx::ones({1, 512}, mx::bfloat16);
  EXPECT_TRUE(fp4_qmv_operands_fit(x, w, s32, 32, 4, "mxfp4"));
  EXPECT_TRUE(fp4_qmv_operands_fit(x, w, s16, 16, 4, "nvfp4"));
  EXPECT_FALSE(fp4_qmv_operands_fit(x, w, s32, 32, 4, "affine"));
  EXPECT_FALSE(fp4_qmv_operands_fit(x, w, s16, 16, 4, "mxfp4"));    // mxfp4's groups are 32
  EXPECT_FALSE(fp4_qmv_operands_fit(x, w, s32, 32, 8, "mxfp4"));    // mxfp8
  EXPECT_FALSE(fp4_qmv_operands_fit(x, w, mx::zeros({64, 16}, mx::bfloat16), 32, 4, "mxfp4"));  // scales' type
  EXPECT_FALSE(fp4_qmv_operands_fit(mx::ones({9, 512}, mx::bfloat16), w, s32, 32, 4, "mxfp4"));  // 9 rows
  EXPECT_FALSE(fp4_qmv_operands_fit(mx::ones({1, 256}, mx::bfloat16), w, s32, 32, 4, "mxfp4"));  // K differs
  EXPECT_FALSE(fp4_qmv_operands_fit(mx::ones({1, 16}, mx::bfloat16), mx::zeros({4, 2}, mx::uint32),
                                    mx::zeros({4, 1}, mx::uint8), 16, 4, "nvfp4"));  // K not a multiple of 32
  EXPECT_THROW(fp4_qmv_launch(x, w, s32, 32, "nvfp4"), std::invalid_argument);
  EXPECT_THROW(fp4_qmv_launch(x, w, s32, 32, "mxfp4", QmvTiling{9, 1}), std::invalid_argument);
  // Off unless MLXRT_CUDA_L3_FP4=1 (unset in the tests' environment).
  EXPECT_FALSE(fp4_qmv_preferred(mx::ones({1, 4096}, mx::bfloat16), mx::zeros({2048, 512}, mx::uint32)));
}

// The model's function: on a CUDA GPU the same launch through CachedKernel, the same bytes;
// elsewhere declined (the model then runs MLX's node).
TEST_F(Fp4Qmv, TheModelsFunctionRunsTheLaunchOnlyOnAGpu) {
  Keys keys(9);
  const auto w = mx::random::bits({96, 64}, 4, keys.next());  // K = 512
  const auto s = mx::astype(mx::random::randint(120, 130, {96, 16}, mx::int32, keys.next()), mx::uint8);
  const auto x = mx::astype(mx::random::normal({1, 2, 512}, mx::float32, keys.next()), mx::bfloat16);
  mx::eval({w, s, x});
  if (kernel_tests::kernels_on_gpu()) {
    ASSERT_TRUE(fp4_qmv_applies(x, w, s, 32, 4, "mxfp4"));
    const auto launched = kernel_tests::run(fp4_qmv_launch(x, w, s, 32, "mxfp4"))[0];
    EXPECT_TRUE(mx::array_equal(fp4_qmv(x, w, s, 32, "mxfp4"), launched).item<bool>());
  } else {
    EXPECT_TRUE(fp4_qmv_operands_fit(x, w, s, 32, 4, "mxfp4"));
    EXPECT_FALSE(fp4_qmv_applies(x, w, s, 32, 4, "mxfp4"));
    EXPECT_THROW(fp4_qmv(x, w, s, 32, "mxfp4"), std::invalid_argument);
  }
}

}  // namespace
}  // namespace mlxrt::kernels::cuda
