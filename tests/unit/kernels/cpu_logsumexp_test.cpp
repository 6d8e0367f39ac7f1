// Our CPU logsumexp (kernels/cpu/logsumexp.h) against MLX's own, byte for byte: float32, bfloat16
// and float16 rows of many lengths (the tail of eight included), scales that send exp below -88,
// special values (NaN, infinities, signed zeros, subnormals), rows whose maximum is a zero, and one
// row and many (the worker threads). Every case also checks the log-probabilities x - logsumexp(x)
// (log_probs_last_axis, our one node for float32 and bfloat16) against MLX's subtraction.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <mlx/mlx.h>
#include <mlx/primitives.h>

#include "mlxrt/kernels/cpu/logsumexp.h"
#include "mlxrt/kernels/cpu/matmul.h"
#include "matmul_case.h"

namespace mx = mlx::core;
using mlxrt::kernels::cpu::CpuKernels;
using mlxrt::kernels::cpu::log_probs_last_axis;
using mlxrt::kernels::cpu::logsumexp_last_axis;
using mlxrt::kernels::test::bytes_of;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::shared_ptr<CpuKernels> kernels_or_skip() {
  auto kernels = CpuKernels::create(2);
  if (!kernels || !kernels->fma()) return nullptr;
  return kernels;
}

std::string describe(int rows, int n, mx::Dtype t, float scale, const char* what) {
  return std::to_string(rows) + "x" + std::to_string(n) + " " + (t == mx::float32 ? "f32" : t == mx::bfloat16 ? "bf16" : "f16") +
         " scale " + std::to_string(scale) + " " + what;
}

void expect_same(const std::shared_ptr<CpuKernels>& kernels, const mx::array& x, const std::string& what) {
  auto ours = logsumexp_last_axis(kernels, x);
  auto theirs = mx::logsumexp(x, -1, true);
  ASSERT_STREQ(ours.primitive().name(), "LogSumExpRows") << what;
  ASSERT_EQ(ours.shape(), theirs.shape()) << what;
  ASSERT_EQ(ours.dtype(), theirs.dtype()) << what;
  EXPECT_EQ(bytes_of(ours), bytes_of(theirs)) << what;
  auto probs = log_probs_last_axis(kernels, x);
  auto their_probs = mx::subtract(x, mx::logsumexp(x, -1, true));
  ASSERT_STREQ(probs.primitive().name(), x.dtype() == mx::float16 ? "Subtract" : "LogProbsRows") << what;
  ASSERT_EQ(probs.shape(), their_probs.shape()) << what;
  ASSERT_EQ(probs.dtype(), their_probs.dtype()) << what;
  EXPECT_EQ(bytes_of(probs), bytes_of(their_probs)) << what << " (log-probabilities)";
}

mx::array random_rows(int rows, int n, float scale, mx::Dtype t, uint64_t seed) {
  return mx::astype(mx::multiply(mx::random::normal({rows, n}, mx::float32, 0.0f, 1.0f, mx::random::key(seed)),
                                 mx::array(scale)),
                    t);
}

mx::array rows_of(const std::vector<float>& v, int rows, mx::Dtype t) {
  return mx::astype(mx::array(v.data(), {rows, static_cast<int>(v.size()) / rows}, mx::float32), t);
}

}  // namespace

TEST(CpuLogSumExp, EqualsMlxBytesOnRandomRows) {
  auto kernels = kernels_or_skip();
  if (!kernels) GTEST_SKIP() << "no AVX2 + FMA + F16C here: MLX's logsumexp runs";
  uint64_t seed = 1;
  for (auto t : {mx::float32, mx::bfloat16, mx::float16})
    for (int n : {1, 7, 8, 9, 31, 64, 513, 1000, 4099, 151936})
      for (float scale : {0.01f, 1.0f, 4.0f, 30.0f, 300.0f})
        for (int rows : {1, 5}) {
          if (n == 151936 && rows == 5 && scale != 4.0f) continue;
          expect_same(kernels, random_rows(rows, n, scale, t, seed++), describe(rows, n, t, scale, "random"));
        }
}

TEST(CpuLogSumExp, EqualsMlxBytesOnSpecialValues) {
  auto kernels = kernels_or_skip();
  if (!kernels) GTEST_SKIP() << "no AVX2 + FMA + F16C here: MLX's logsumexp runs";
  const std::vector<std::vector<float>> rows = {
      {1.0f, kNaN, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f},          // a NaN
      {-kNaN, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, kNaN},         // two of two signs
      {kNaN, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, -kNaN},
      {1.0f, 2.0f, -kNaN, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f},
      {-kNaN, -kNaN, 2.0f, 3.0f, -kInf, kInf, 6.0f, 7.0f, 8.0f, 9.0f},
      {1.0f, kInf, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f},          // +inf: the maximum
      {-kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf},  // all -inf
      {-kInf, -1.0f, -kInf, -2.0f, -kInf, -3.0f, -kInf, -4.0f, -kInf, -5.0f},
      {-0.0f, -1.0f, 0.0f, -2.0f, -3.0f, -4.0f, -5.0f, -6.0f, -7.0f, -8.0f},  // maximum -0 first
      {0.0f, -1.0f, -0.0f, -2.0f, -3.0f, -4.0f, -5.0f, -6.0f, -7.0f, -8.0f},  // maximum +0 first
      {-0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f},
      {1e-40f, -3e-39f, 1e-45f, 0.0f, -1e-44f, 2e-38f, -2e-38f, 5e-39f, 1e-41f, -1e-42f},  // subnormals
      {3.0e38f, -3.0e38f, 1.0f, 2.0f, 3.0e38f, 0.0f, -1.0f, 1e30f, -1e30f, 5.0f},
      {100.0f, 11.0f, 12.0f, 13.0f, 14.0f, 15.0f, 16.0f, 17.0f, 18.0f, 99.9f},  // exp below -88
      {-87.9f, 0.1f, -88.0f, -88.1f, -0.5f, 0.5f, -43.7f, -44.0f, -60.0f, 0.25f},
  };
  for (auto t : {mx::float32, mx::bfloat16, mx::float16}) {
    std::vector<float> all;
    for (const auto& r : rows) all.insert(all.end(), r.begin(), r.end());
    expect_same(kernels, rows_of(all, static_cast<int>(rows.size()), t), describe(static_cast<int>(rows.size()), 10, t, 1.0f, "special rows"));
    for (size_t i = 0; i < rows.size(); ++i)
      expect_same(kernels, rows_of(rows[i], 1, t), describe(1, 10, t, 1.0f, ("special row " + std::to_string(i)).c_str()));
    // Special values scattered through long rows (the vector path's maximum and exponentials).
    auto x = random_rows(4, 3001, 5.0f, mx::float32, 99);
    mx::eval(x);
    std::vector<float> v(x.size());
    std::memcpy(v.data(), x.data<float>(), v.size() * 4);
    const float special[] = {-0.0f, -kInf, 1e-40f, -3e-39f, 6.0e4f};
    for (size_t i = 5; i < v.size(); i += 211) v[i] = special[(i / 211) % 5];
    expect_same(kernels, rows_of(v, 4, t), describe(4, 3001, t, 5.0f, "with special values"));
  }
}

TEST(CpuLogSumExp, EqualsMlxBytesOnStridedAndHigherRankInputs) {
  auto kernels = kernels_or_skip();
  if (!kernels) GTEST_SKIP() << "no AVX2 + FMA + F16C here: MLX's logsumexp runs";
  auto x = random_rows(6, 300, 3.0f, mx::bfloat16, 7);
  expect_same(kernels, mx::transpose(mx::reshape(x, {6, 20, 15}), {0, 2, 1}), "a transposed [6, 15, 20] view");
  expect_same(kernels, mx::slice(x, {0, 3}, {6, 290}), "a sliced view");
  expect_same(kernels, mx::reshape(x, {2, 3, 300}), "[2, 3, 300]");
  // The generation step's call on [1, V]: every axis is the last one's (mlx-lm's keepdims=True).
  auto one = random_rows(1, 151936, 4.0f, mx::bfloat16, 8);
  auto ours = logsumexp_last_axis(kernels, one);
  EXPECT_EQ(bytes_of(ours), bytes_of(mx::logsumexp(one, true)));
  EXPECT_EQ(bytes_of(log_probs_last_axis(kernels, one)), bytes_of(mx::subtract(one, mx::logsumexp(one, true))));
  const auto flat = mx::reshape(one, {151936});
  EXPECT_EQ(bytes_of(log_probs_last_axis(kernels, flat)), bytes_of(mx::subtract(flat, mx::logsumexp(flat, -1, true))));
}

TEST(CpuLogSumExp, LeavesMlxsNodeWithoutKernelsOrForOtherTypes) {
  auto x = random_rows(2, 100, 1.0f, mx::float32, 3);
  EXPECT_STREQ(logsumexp_last_axis(nullptr, x).primitive().name(), "LogSumExp");
  EXPECT_STREQ(log_probs_last_axis(nullptr, x).primitive().name(), "Subtract");
  auto kernels = kernels_or_skip();
  if (!kernels) GTEST_SKIP() << "no AVX2 + FMA + F16C here: MLX's logsumexp runs";
  auto ints = mx::astype(x, mx::int32);  // MLX casts to float32 first: ours takes the cast
  EXPECT_EQ(bytes_of(logsumexp_last_axis(kernels, ints)), bytes_of(mx::logsumexp(ints, -1, true)));
  EXPECT_STREQ(log_probs_last_axis(kernels, ints).primitive().name(), "Subtract") << "a cast input: MLX's subtract";
}
