// mlx-lm's top-p, top-k and min-p filters by our CPU kernels (kernels/cpu/sampling_masks.h) against the
// same compiled steps built from MLX's ops (MLXRT_CPU_KERNELS=mlx), byte for byte: float32,
// bfloat16 and float16 rows of many lengths, peaked and flat, with ties, masked words, NaNs and
// signed zeros, batches and strided views.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <mlx/mlx.h>
#include <mlx/primitives.h>

#include "mlxrt/generate/random_state.h"
#include "mlxrt/generate/sampler.h"
#include "mlxrt/kernels/cpu/matmul.h"
#include "mlxrt/kernels/cpu/sampling_masks.h"

namespace mx = mlx::core;
using mlxrt::generate::RandomState;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

bool ours_here() { return mlxrt::kernels::cpu::own_kernels_here(/*fma=*/true); }

std::vector<char> bytes_of(mx::array a) {
  a = mx::contiguous(a);
  mx::eval(a);
  const char* p = static_cast<const char*>(a.data<void>());
  return {p, p + a.nbytes()};
}

// The filter by ours and by MLX's ops, each through the sampler's compiled step.
template <class Filter>
void expect_same(const mx::array& x, Filter filter, const char* node, const std::string& what) {
  RandomState rng(0);
  auto ours = filter(x, rng);
  ASSERT_STREQ(ours.primitive().name(), node) << what;
  setenv("MLXRT_CPU_KERNELS", "mlx", 1);
  auto theirs = filter(x, rng);
  unsetenv("MLXRT_CPU_KERNELS");
  ASSERT_STRNE(theirs.primitive().name(), node) << what;
  ASSERT_EQ(ours.shape(), theirs.shape()) << what;
  ASSERT_EQ(ours.dtype(), theirs.dtype()) << what;
  EXPECT_EQ(bytes_of(ours), bytes_of(theirs)) << what;
}

void expect_same_top_p(const mx::array& x, double p, const std::string& what) {
  expect_same(x, [p](const mx::array& a, RandomState& r) { return mlxrt::generate::apply_top_p(a, p, r); }, "TopPRows",
              what + " top_p " + std::to_string(p));
}

void expect_same_top_k(const mx::array& x, int k, const std::string& what) {
  expect_same(x, [k](const mx::array& a, RandomState& r) { return mlxrt::generate::apply_top_k(a, k, r); }, "TopKRows",
              what + " top_k " + std::to_string(k));
}

void expect_same_min_p(const mx::array& x, double p, const std::string& what) {
  expect_same(x, [p](const mx::array& a, RandomState& r) { return mlxrt::generate::apply_min_p(a, p, 1, r); },
              "MinPRows", what + " min_p " + std::to_string(p));
}

const char* type_name(mx::Dtype t) { return t == mx::float32 ? "f32" : t == mx::bfloat16 ? "bf16" : "f16"; }

// Log-probabilities of `rows` rows: normal logits at a scale (large: peaked; small: flat), rounded to
// `step` where given (ties), minus their logsumexp, in type t.
mx::array logprobs(int rows, int n, float scale, float step, mx::Dtype t, uint64_t seed) {
  auto x = mx::multiply(mx::random::normal({rows, n}, mx::float32, 0.0f, 1.0f, mx::random::key(seed)), mx::array(scale));
  if (step > 0) x = mx::multiply(mx::round(mx::divide(x, mx::array(step))), mx::array(step));
  return mx::astype(mx::subtract(x, mx::logsumexp(x, -1, true)), t);
}

mx::array row_of(const std::vector<float>& v, mx::Dtype t) {
  return mx::astype(mx::array(v.data(), {1, static_cast<int>(v.size())}, mx::float32), t);
}

}  // namespace

TEST(SamplingMasks, TopPEqualsMlxOnRandomRows) {
  if (!ours_here()) GTEST_SKIP() << "no AVX2 + FMA + F16C here: MLX's sort runs";
  uint64_t seed = 1;
  for (auto t : {mx::float32, mx::bfloat16, mx::float16})
    for (int n : {2, 9, 1000, 151936})
      for (float scale : {0.3f, 3.0f, 12.0f})
        for (float step : {0.0f, 0.5f}) {
          if (n > 10000 && (scale != 3.0f || step != 0.0f)) continue;  // a vocabulary's length: one case
          auto x = logprobs(n > 10000 ? 1 : 3, n, scale, step, t, seed++);
          for (double p : {0.05, 0.5, 0.9, 0.95, 0.999})
            expect_same_top_p(x, p, std::to_string(n) + " " + type_name(t) + " scale " + std::to_string(scale) +
                                        " step " + std::to_string(step));
        }
}

TEST(SamplingMasks, TopKEqualsMlxOnRandomRows) {
  if (!ours_here()) GTEST_SKIP() << "no AVX2 + FMA + F16C here: MLX's partition runs";
  uint64_t seed = 100;
  for (auto t : {mx::float32, mx::bfloat16, mx::float16})
    for (int n : {2, 9, 1000, 151936})
      for (float step : {0.0f, 0.5f}) {
        auto x = logprobs(n > 10000 ? 1 : 3, n, 3.0f, step, t, seed++);
        for (int k : {1, 2, 5, 20, 40, n - 1})
          if (k > 0 && k < n) expect_same_top_k(x, k, std::to_string(n) + " " + type_name(t) + " step " + std::to_string(step));
      }
}

TEST(SamplingMasks, MinPEqualsMlxOnRandomRows) {
  if (!ours_here()) GTEST_SKIP() << "no AVX2 + FMA + F16C here: MLX's ops run";
  // Few shapes and values: MLX compiles its fused graph anew (a C++ compiler run) for each.
  uint64_t seed = 200;
  for (auto t : {mx::float32, mx::bfloat16, mx::float16})
    for (int n : {1, 1000, 151936}) {
      auto x = logprobs(n > 10000 ? 1 : 3, n, 3.0f, n == 1000 ? 0.5f : 0.0f, t, seed++);
      for (double p : {0.05, 1.0}) expect_same_min_p(x, p, std::to_string(n) + " " + type_name(t));
    }
}

// Rows whose values are every 16-bit value around their bound (largest + log(min_p)): the bound's two
// roundings (the constant to the type, then the sum) each decide which element is masked.
TEST(SamplingMasks, MinPRoundsItsBoundAsMlx) {
  if (!ours_here()) GTEST_SKIP() << "no AVX2 + FMA + F16C here: MLX's ops run";
  for (auto t : {mx::bfloat16, mx::float16})
    for (double p : {0.05, 0.3, 0.7}) {
      const int rows = 96, n = 65;
      std::vector<uint16_t> bits(static_cast<size_t>(rows * n));
      for (int r = 0; r < rows; ++r) {
        const float top = -0.25f - 0.125f * static_cast<float>(r);  // -0.25 down to -12.125
        const float bound = top + static_cast<float>(std::log(p));
        auto as_bits = [&](float v) {
          auto a = mx::view(mx::astype(mx::array(v), t), mx::uint16);
          mx::eval(a);
          return a.item<uint16_t>();
        };
        bits[static_cast<size_t>(r * n)] = as_bits(top);
        // Negative values: one more in the bits is one step further from zero.
        const uint16_t middle = as_bits(bound);
        for (int j = 1; j < n; ++j) bits[static_cast<size_t>(r * n + j)] = static_cast<uint16_t>(middle - 32 + j);
      }
      auto x = mx::view(mx::array(bits.data(), {rows, n}, mx::uint16), t);
      expect_same_min_p(x, p, std::string("bound's neighbours ") + type_name(t));
    }
}

TEST(SamplingMasks, EqualMlxOnSpecialValues) {
  if (!ours_here()) GTEST_SKIP() << "no AVX2 + FMA + F16C here: MLX's filters run";
  const std::vector<std::vector<float>> rows = {
      {-kInf, -1.0f, -kInf, -2.0f, -kInf, -0.5f, -kInf, -kInf, -kInf, -3.0f, -kInf},  // masked words
      {-kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf},        // every word masked
      {kNaN, -1.0f, -2.0f, -3.0f, kNaN, -0.5f, -4.0f, -5.0f, -6.0f, -7.0f},          // NaNs
      {kNaN, -kNaN, -2.0f, kNaN, kNaN, -1.0f, kNaN, kNaN, kNaN, kNaN},               // fewer values than k
      {-0.0f, 0.0f, -1.0f, -0.0f, 0.0f, -2.0f, -0.0f, -3.0f, 0.0f, -4.0f},          // signed zeros tie
      {-2.0f, -2.0f, -2.0f, -2.0f, -2.0f, -2.0f, -2.0f, -2.0f, -2.0f, -2.0f},       // one value
      {-0.1f, -90.0f, -87.9f, -88.0f, -88.1f, -200.0f, -3.0f, -1e-40f, -3e-39f, -kInf},  // exp's edges
      {-1.0f, kInf, -2.0f, kInf, -3.0f, -4.0f, -5.0f, -6.0f, -7.0f, -8.0f},         // +inf
  };
  for (auto t : {mx::float32, mx::bfloat16, mx::float16})
    for (size_t r = 0; r < rows.size(); ++r) {
      const std::string what = "special row " + std::to_string(r) + " " + type_name(t);
      for (double p : {0.1, 0.5, 0.9}) expect_same_top_p(row_of(rows[r], t), p, what);
      if (t != mx::float16) expect_same_min_p(row_of(rows[r], t), 0.05, what);
      for (int k : {1, 2, 3, 5, 8, 9}) expect_same_top_k(row_of(rows[r], t), k, what);
    }
}

TEST(SamplingMasks, EqualMlxOnBatchesAndViews) {
  if (!ours_here()) GTEST_SKIP() << "no AVX2 + FMA + F16C here: MLX's filters run";
  auto batch = logprobs(6, 3000, 2.0f, 0.25f, mx::bfloat16, 7);
  expect_same_top_p(batch, 0.9, "a batch of 6");
  expect_same_top_k(batch, 40, "a batch of 6");
  expect_same_top_p(mx::slice(batch, {1, 7}, {5, 2990}), 0.8, "a sliced view");
  expect_same_top_k(mx::slice(batch, {1, 7}, {5, 2990}), 30, "a sliced view");
  expect_same_top_p(mx::reshape(batch, {2, 3, 3000}), 0.7, "[2, 3, 3000]");
  expect_same_top_k(mx::reshape(batch, {2, 3, 3000}), 3, "[2, 3, 3000]");
  expect_same_min_p(batch, 0.05, "a batch of 6");
  expect_same_min_p(mx::slice(batch, {1, 7}, {5, 2990}), 0.1, "a sliced view");
}

TEST(SamplingMasks, LeaveMlxsGraphWhereOursDoesNotApply) {
  auto ints = mx::array({3, 9, 9, 1}, {1, 4}, mx::int32);
  EXPECT_FALSE(mlxrt::kernels::cpu::top_p_mask(ints, 0.9));
  auto x = logprobs(1, 50, 1.0f, 0.0f, mx::float32, 3);
  EXPECT_FALSE(mlxrt::kernels::cpu::top_p_mask(x, 1.0));
  EXPECT_FALSE(mlxrt::kernels::cpu::top_k_mask(x, 50));
  EXPECT_FALSE(mlxrt::kernels::cpu::min_p_mask(x, 0.1, 3));  // min_tokens_to_keep > 1: MLX's partition
  setenv("MLXRT_CPU_KERNELS", "mlx", 1);
  EXPECT_FALSE(mlxrt::kernels::cpu::top_p_mask(x, 0.9));
  EXPECT_FALSE(mlxrt::kernels::cpu::top_k_mask(x, 5));
  unsetenv("MLXRT_CPU_KERNELS");
}
