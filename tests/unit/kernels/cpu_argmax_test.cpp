// Our CPU argmax (kernels/cpu/argmax.h) against MLX's own, value for value: float32, bfloat16 and
// float16 rows of many lengths, ties (the first wins), signed zeros, infinities and NaNs (the first
// one wins), strided and higher-rank inputs, and MLX's node kept where ours does not apply.
#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include <mlx/mlx.h>
#include <mlx/primitives.h>

#include "mlxrt/kernels/cpu/argmax.h"
#include "mlxrt/kernels/cpu/matmul.h"
#include "matmul_case.h"

namespace mx = mlx::core;
using mlxrt::kernels::cpu::argmax_last_axis;
using mlxrt::kernels::test::bytes_of;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

void expect_same(const mx::array& x, const std::string& what) {
  auto ours = argmax_last_axis(x);
  auto theirs = mx::argmax(x, -1);
  ASSERT_STREQ(ours.inputs()[0].primitive().name(), "ArgMaxRows") << what;
  ASSERT_EQ(ours.shape(), theirs.shape()) << what;
  ASSERT_EQ(ours.dtype(), theirs.dtype()) << what;
  EXPECT_EQ(bytes_of(ours), bytes_of(theirs)) << what;
}

mx::array rows_of(const std::vector<float>& v, int rows, mx::Dtype t) {
  return mx::astype(mx::array(v.data(), {rows, static_cast<int>(v.size()) / rows}, mx::float32), t);
}

const char* type_name(mx::Dtype t) { return t == mx::float32 ? "f32" : t == mx::bfloat16 ? "bf16" : "f16"; }

}  // namespace

TEST(CpuArgmax, EqualsMlxOnRandomRows) {
  if (!mlxrt::kernels::cpu::own_kernels_here()) GTEST_SKIP() << "no AVX2 + F16C here: MLX's argmax runs";
  uint64_t seed = 1;
  for (auto t : {mx::float32, mx::bfloat16, mx::float16})
    for (int n : {2, 7, 8, 9, 63, 1000, 4099, 151936})
      for (int rows : {1, 4}) {
        // Rounded to few values, so that rows hold ties of the largest.
        auto x = mx::round(mx::multiply(mx::random::normal({rows, n}, mx::float32, 0.0f, 1.0f, mx::random::key(seed++)),
                                        mx::array(3.0f)));
        expect_same(mx::astype(x, t), std::to_string(rows) + "x" + std::to_string(n) + " " + type_name(t));
      }
}

TEST(CpuArgmax, EqualsMlxOnSpecialValues) {
  if (!mlxrt::kernels::cpu::own_kernels_here()) GTEST_SKIP() << "no AVX2 + F16C here: MLX's argmax runs";
  const std::vector<std::vector<float>> rows = {
      {kNaN, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f},        // the first NaN wins
      {1.0f, kNaN, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, kNaN},
      {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f, -kNaN},
      {-kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf},
      {-kInf, -1.0f, kInf, -2.0f, kInf, -3.0f, -kInf, -4.0f, -kInf, -5.0f},
      {-0.0f, -1.0f, 0.0f, -2.0f, -3.0f, -4.0f, -5.0f, -6.0f, -7.0f, -8.0f},  // -0 first of the zeros
      {-1.0f, -1.0f, -3.0f, 0.0f, -0.0f, -4.0f, -5.0f, -6.0f, -7.0f, -8.0f},
      {kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, 1.0f},
      {1e-40f, -3e-39f, 1e-45f, 2e-38f, -1e-44f, 2e-38f, -2e-38f, 5e-39f, 1e-41f, -1e-42f},
      {5.0f, 5.0f, 5.0f, 5.0f, 5.0f, 5.0f, 5.0f, 5.0f, 5.0f, 5.0f},
  };
  for (auto t : {mx::float32, mx::bfloat16, mx::float16}) {
    std::vector<float> all;
    for (const auto& r : rows) all.insert(all.end(), r.begin(), r.end());
    expect_same(rows_of(all, static_cast<int>(rows.size()), t), std::string("special rows ") + type_name(t));
    // A long row with its largest value twice, past the first vector and in the tail.
    std::vector<float> longer(1003, -2.0f);
    longer[17] = kNaN;
    longer[500] = 7.0f;
    longer[1001] = 7.0f;
    expect_same(rows_of(longer, 1, t), std::string("a long row ") + type_name(t));
  }
}

TEST(CpuArgmax, EqualsMlxOnStridedAndHigherRankInputs) {
  if (!mlxrt::kernels::cpu::own_kernels_here()) GTEST_SKIP() << "no AVX2 + F16C here: MLX's argmax runs";
  auto x = mx::astype(mx::round(mx::random::normal({6, 300}, mx::float32, 0.0f, 2.0f, mx::random::key(5))), mx::bfloat16);
  expect_same(mx::transpose(mx::reshape(x, {6, 20, 15}), {0, 2, 1}), "a transposed [6, 15, 20] view");
  expect_same(mx::slice(x, {0, 3}, {6, 290}), "a sliced view");
  expect_same(mx::reshape(x, {2, 3, 300}), "[2, 3, 300]");
}

TEST(CpuArgmax, LeavesMlxsNodeWhereOursDoesNotApply) {
  auto ints = mx::array({3, 9, 9, 1}, {1, 4}, mx::int32);
  EXPECT_STREQ(argmax_last_axis(ints).inputs()[0].primitive().name(), "ArgReduce");
  EXPECT_EQ(bytes_of(argmax_last_axis(ints)), bytes_of(mx::argmax(ints, -1)));
  auto one = mx::array({2.0f, 3.0f}, {2, 1});  // a last axis of one element: zeros, no node
  EXPECT_EQ(bytes_of(argmax_last_axis(one)), bytes_of(mx::argmax(one, -1)));
  setenv("MLXRT_CPU_KERNELS", "mlx", 1);
  auto floats = mx::array({1.0f, 4.0f, 2.0f}, {1, 3});
  EXPECT_STREQ(argmax_last_axis(floats).inputs()[0].primitive().name(), "ArgReduce");
  unsetenv("MLXRT_CPU_KERNELS");
}
