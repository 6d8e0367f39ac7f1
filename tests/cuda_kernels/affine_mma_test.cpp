// The L3 4-bit product on the tensor cores (kernels/cuda/affine_mma.h) against the same product in
// float64 on the host, from the packed words, scales and biases themselves. Not bit-exact by
// design (L3); each output is held to what its float32 sums allow:
//   |y - ref| <= u_out |ref| + 2^-22 (U + K / U + 8) sum_k |x_k| (|s_k| (2 B + 16) + |b_k|)
// where u_out is the output dtype's half ulp, U the values of a unit (64, or 32 at group size 32)
// and B the 16-bit float each value is lifted by (128 for bfloat16, 1024 for float16): a unit's
// products of x with B + q and its sum of x (B times it), each summed over U terms, then the K / U
// units and the warps' sums, each addition within 2^-23 of what it adds (the tensor core may
// truncate). A wrong slot, a row of x paired with another's values or an unwritten output misses
// that by orders of magnitude. Runs on a CUDA GPU and on the CPU's SIMT runtime (kernel_backend.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>
#include <mlx/ops.h>
#include <mlx/random.h>
#include <mlx/transforms.h>

#include "kernel_backend.h"
#include "reference.h"
#include "mlxrt/kernels/cuda/affine_mma.h"

namespace mlxrt::kernels::cuda {
namespace {

struct Case {
  int n, k, rows, group_size;
  mx::Dtype x_type, param_type;
};

std::string describe(const Case& c, MmaTiling t) {
  std::ostringstream s;
  s << "N " << c.n << " K " << c.k << " rows " << c.rows << " g" << c.group_size << " x " << c.x_type << " params "
    << c.param_type << " tiling " << t.warps_per_block << "w" << t.units_ahead << "a";
  return s.str();
}

using kernel_tests::half_ulp;
using kernel_tests::host;

// Random operands for `c` (reference.h's matrix): x [1, rows, K], optionally a view at an odd
// element offset (not 16-byte aligned).
QmvMatrix random_operands(const Case& c, int seed, mx::array& x, bool misaligned_x = false) {
  kernel_tests::Keys keys(seed);
  auto m = kernel_tests::random_matrix(keys, c.n, c.k, c.group_size, 4, c.param_type);
  x = mx::astype(mx::random::normal({c.rows * c.k + 1}, mx::float32, keys.next()), c.x_type);
  x = misaligned_x ? mx::slice(x, {1}, {1 + c.rows * c.k}) : mx::slice(x, {0}, {c.rows * c.k});
  x = mx::reshape(x, {1, c.rows, c.k});
  mx::eval(x);
  return m;
}

class AffineMma : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(kernel_tests::use_kernel_device()) << "these tests need a CUDA device"; }

  void check(const Case& c, int seed, MmaTiling tiling = {}, bool misaligned_x = false) {
    mx::array x = mx::array(0.0f);
    const auto [w, scales, biases, group_size, bits] = random_operands(c, seed, x, misaligned_x);
    const int groups = c.k / c.group_size;
    ASSERT_TRUE(affine_mma_operands_fit(x, w, scales, biases, c.group_size, 4)) << describe(c, tiling);
    auto y = kernel_tests::run(affine_mma_launch(x, w, scales, biases, c.group_size, 4, tiling))[0];
    mx::eval(y);
    const auto out_type = mx::promote_types(c.x_type, c.param_type);
    ASSERT_EQ(y.dtype(), out_type);
    ASSERT_EQ(y.shape(), (mx::Shape{c.rows, c.n}));

    // The float64 products (reference.h), and each one's magnitude sum_k |x_k| (|s_k| (2 B + 16) +
    // |b_k|) for this kernel's bound: x's absolute sums per group times the groups' weights.
    const auto ref = kernel_tests::products(host(x), c.rows, {w, scales, biases, group_size, bits}).ref;
    const float lift = c.x_type == mx::bfloat16 ? 128.0f : 1024.0f;
    const auto x_abs = mx::sum(mx::reshape(mx::abs(mx::astype(x, mx::float32)), {c.rows, groups, c.group_size}), -1);
    const auto weight = mx::add(mx::multiply(mx::abs(mx::astype(scales, mx::float32)), mx::array(2 * lift + 16)),
                                mx::abs(mx::astype(biases, mx::float32)));
    const auto mag = host(mx::matmul(x_abs, mx::transpose(weight)));  // [rows, N]
    const double unit = c.group_size == 32 ? 32 : 64;
    const double sums = unit + c.k / unit + 8;
    kernel_tests::expect_close(
        describe(c, tiling), host(y), [&](size_t i) { return ref[i]; },
        [&](size_t i) { return half_ulp(out_type) * std::abs(ref[i]) + std::ldexp(sums * mag[i], -22); });
  }
};

TEST_F(AffineMma, WithinFloat32Bound) {
  // A tail of rows of w (N not a multiple of 16), every group size, both 16-bit types of x, float32
  // parameters, and rows of x filling 1, 2 and 4 tiles of 8 (some padded).
  const Case cases[] = {{64, 512, 1, 64, mx::bfloat16, mx::bfloat16},  {37, 256, 3, 32, mx::bfloat16, mx::bfloat16},
                        {50, 384, 9, 128, mx::float16, mx::float16},   {32, 128, 20, 64, mx::bfloat16, mx::float32},
                        {16, 256, 8, 32, mx::float16, mx::bfloat16}};
  int seed = 1;
  for (const auto& c : cases) check(c, seed++);
}

TEST_F(AffineMma, EveryTilingAndUnalignedInput) {
  const Case c{40, 640, 2, 64, mx::bfloat16, mx::bfloat16};  // 10 units: warps and rounds stop early
  int seed = 100;
  for (MmaTiling t : {MmaTiling{1, 1}, MmaTiling{2, 8}, MmaTiling{8, 3}, MmaTiling{3, 2}}) check(c, seed++, t);
  check(c, seed++, {}, true);
  check({24, 96, 5, 32, mx::float16, mx::float16}, seed++, {}, true);
}

TEST_F(AffineMma, RefusesWhatItDoesNotCompute) {
  auto w = mx::zeros({64, 64}, mx::uint32);  // K = 512 at 4 bits
  auto s = mx::ones({64, 8}, mx::bfloat16);
  auto x = mx::ones({1, 512}, mx::bfloat16);
  EXPECT_TRUE(affine_mma_operands_fit(x, w, s, s, 64, 4));
  EXPECT_TRUE(affine_mma_operands_fit(mx::ones({127, 512}, mx::bfloat16), w, s, s, 64, 4));
  EXPECT_FALSE(affine_mma_operands_fit(mx::ones({128, 512}, mx::bfloat16), w, s, s, 64, 4));  // 128 rows
  EXPECT_FALSE(affine_mma_operands_fit(x, w, s, std::nullopt, 64, 4));                        // not affine
  EXPECT_FALSE(affine_mma_operands_fit(mx::ones({1, 512}, mx::float32), w, s, s, 64, 4));     // float32 x
  EXPECT_FALSE(affine_mma_operands_fit(mx::ones({1, 256}, mx::bfloat16), mx::zeros({64, 64}, mx::uint32), s, s,
                                       64, 8));  // 8 bits
  EXPECT_FALSE(affine_mma_operands_fit(mx::ones({1, 256}, mx::bfloat16), w, s, s, 64, 4));  // K differs
  EXPECT_THROW(affine_mma_launch(x, w, s, s, 64, 8), std::invalid_argument);
  EXPECT_THROW(affine_mma_launch(x, w, s, s, 64, 4, MmaTiling{9, 1}), std::invalid_argument);
  EXPECT_THROW(affine_mma_launch(x, w, s, s, 64, 4, MmaTiling{4, 9}), std::invalid_argument);
}

// The model's function: on a CUDA GPU the same launch through CachedKernel, the same bytes;
// elsewhere declined (the model then runs another product).
TEST_F(AffineMma, TheModelsFunctionRunsTheLaunchOnlyOnAGpu) {
  auto key = mx::random::key(9);
  auto w = mx::random::bits({96, 64}, 4, key);  // K = 512
  auto s = mx::astype(mx::multiply(mx::random::normal({96, 8}, mx::float32, key), mx::array(0.02f)), mx::bfloat16);
  auto x = mx::astype(mx::random::normal({2, 3, 512}, mx::float32, key), mx::bfloat16);
  mx::eval({w, s, x});
  if (kernel_tests::kernels_on_gpu()) {
    ASSERT_TRUE(affine_mma_applies(x, w, s, s, 64, 4));
    const auto launched = kernel_tests::run(affine_mma_launch(x, w, s, s, 64, 4))[0];
    const auto y = affine_mma(x, w, s, s, 64, 4);
    ASSERT_EQ(y.shape(), (mx::Shape{2, 3, 96}));
    EXPECT_TRUE(mx::array_equal(mx::reshape(y, {6, 96}), launched).item<bool>());
  } else {
    EXPECT_TRUE(affine_mma_operands_fit(x, w, s, s, 64, 4));
    EXPECT_FALSE(affine_mma_applies(x, w, s, s, 64, 4));
    EXPECT_THROW(affine_mma(x, w, s, s, 64, 4), std::invalid_argument);
  }
}

}  // namespace
}  // namespace mlxrt::kernels::cuda
