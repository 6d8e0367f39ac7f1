// Our CPU categorical draws (kernels/cpu/categorical.h), one row's and a batch's, against MLX's own,
// draw for draw: float32, bfloat16 and float16 rows of many lengths and temperatures, many keys,
// masked rows (-inf, as top-k and top-p leave them), infinite and NaN logits, strided and
// higher-rank inputs, the batch draw's approximate logarithm against the exact one, and MLX's graph
// kept where ours does not apply.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <mlx/mlx.h>
#include <mlx/primitives.h>

#include "mlxrt/kernels/cpu/categorical.h"
#include "mlxrt/kernels/cpu/categorical_args.h"
#include "mlxrt/kernels/cpu/matmul.h"
#include "matmul_case.h"

namespace mx = mlx::core;
using mlxrt::kernels::cpu::categorical_last_axis;
using mlxrt::kernels::test::bytes_of;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

bool ours_here() { return mlxrt::kernels::cpu::own_kernels_here(/*fma=*/true); }

// Ours (the node `node`: InverseCdfDraw for one row, GumbelDraw for a batch) against MLX's draw.
void expect_same(const mx::array& logits, const mx::array& key, const std::string& what,
                 const char* node = "InverseCdfDraw") {
  auto ours = categorical_last_axis(logits, key);
  auto theirs = mx::random::categorical(logits, -1, key);
  ASSERT_STREQ(ours.primitive().name(), node) << what;
  ASSERT_EQ(ours.shape(), theirs.shape()) << what;
  ASSERT_EQ(ours.dtype(), theirs.dtype()) << what;
  EXPECT_EQ(bytes_of(ours), bytes_of(theirs)) << what;
}

mx::array row_of(const std::vector<float>& v, mx::Dtype t) {
  return mx::astype(mx::array(v.data(), {1, static_cast<int>(v.size())}, mx::float32), t);
}

const char* type_name(mx::Dtype t) { return t == mx::float32 ? "f32" : t == mx::bfloat16 ? "bf16" : "f16"; }

}  // namespace

TEST(CpuCategorical, EqualsMlxOnRandomRows) {
  if (!ours_here()) GTEST_SKIP() << "no AVX2 + FMA + F16C here: MLX's categorical runs";
  uint64_t seed = 1;
  for (auto t : {mx::float32, mx::bfloat16, mx::float16})
    for (int n : {1, 2, 7, 8, 9, 63, 1000, 4099, 151936})
      for (float scale : {0.01f, 1.0f, 4.0f, 30.0f}) {
        // Log-probabilities as the sampler sees them (logits minus their logsumexp), at a temperature.
        auto x = mx::multiply(mx::random::normal({1, n}, mx::float32, 0.0f, 1.0f, mx::random::key(seed++)), mx::array(scale));
        x = mx::astype(mx::subtract(x, mx::logsumexp(x, -1, true)), t);
        const int draws = n > 10000 ? 4 : 24;
        for (int d = 0; d < draws; ++d)
          expect_same(x, mx::random::key(seed * 1000 + d),
                      std::to_string(n) + " " + type_name(t) + " scale " + std::to_string(scale) + " draw " +
                          std::to_string(d));
      }
}

TEST(CpuCategorical, EqualsMlxOnSpecialValues) {
  if (!ours_here()) GTEST_SKIP() << "no AVX2 + FMA + F16C here: MLX's categorical runs";
  const std::vector<std::vector<float>> rows = {
      {-kInf, -1.0f, -kInf, -2.0f, -kInf, -0.5f, -kInf, -kInf, -kInf, -3.0f, -kInf},  // masked, as top-k leaves it
      {-kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf},        // every word masked
      {-1.0f, kInf, -2.0f, kInf, -3.0f, -4.0f, kInf, -5.0f, -6.0f, -7.0f},            // infinite maxima
      {kNaN, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f},
      {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f, -kNaN},
      {-0.0f, -1.0f, 0.0f, -2.0f, -3.0f, -4.0f, -5.0f, -6.0f, -7.0f, -8.0f},
      {-100.0f, -100.0f, -100.0f, -100.0f, -100.0f, -100.0f, -100.0f, -100.0f, -100.0f},  // every weight 1
      {0.0f, -80.0f, -87.9f, -88.0f, -88.1f, -90.0f, -1000.0f, -1e-40f, -3e-39f},         // exp's edges
      {1e30f, -1e30f, 3e38f, -3e38f, 2e38f, 0.0f, 1.0f, 3e38f},
  };
  for (auto t : {mx::float32, mx::bfloat16, mx::float16})
    for (size_t r = 0; r < rows.size(); ++r)
      for (int d = 0; d < 40; ++d)
        expect_same(row_of(rows[r], t), mx::random::key(100 * r + d),
                    std::string("special row ") + std::to_string(r) + " " + type_name(t) + " draw " + std::to_string(d));
}

TEST(CpuCategorical, EqualsMlxOnStridedAndHigherRankInputs) {
  if (!ours_here()) GTEST_SKIP() << "no AVX2 + FMA + F16C here: MLX's categorical runs";
  auto batch = mx::astype(mx::random::normal({4, 3000}, mx::float32, 0.0f, 2.0f, mx::random::key(5)), mx::bfloat16);
  for (int d = 0; d < 8; ++d) {
    auto key = mx::random::key(50 + d);
    expect_same(mx::slice(batch, {2, 0}, {3, 3000}), key, "a row of a batch");
    expect_same(mx::slice(batch, {1, 7}, {2, 2990}), key, "a sliced row");
    expect_same(mx::reshape(mx::slice(batch, {0, 0}, {1, 3000}), {1, 1, 3000}), key, "[1, 1, 3000]");
    expect_same(mx::transpose(mx::slice(mx::reshape(batch, {4, 3000, 1}), {3, 0, 0}, {4, 3000, 1}), {0, 2, 1}), key,
                "a transposed view");
  }
}

TEST(CpuCategorical, FollowsMlxsKeySequence) {
  if (!ours_here()) GTEST_SKIP() << "no AVX2 + FMA + F16C here: MLX's categorical runs";
  // The default key sequence, as a draw without a key uses it: the same draws, one after another.
  auto x = mx::astype(mx::random::normal({1, 5000}, mx::float32, 0.0f, 1.0f, mx::random::key(9)), mx::float16);
  mx::random::seed(77);
  std::vector<mx::array> ours, theirs;
  for (int d = 0; d < 5; ++d) ours.push_back(categorical_last_axis(x, mx::random::KeySequence::default_().next()));
  mx::random::seed(77);
  for (int d = 0; d < 5; ++d) theirs.push_back(mx::random::categorical(x, -1));
  for (int d = 0; d < 5; ++d) EXPECT_EQ(bytes_of(ours[d]), bytes_of(theirs[d])) << "draw " << d;
}

TEST(CpuCategorical, LeavesMlxsGraphWhereOursDoesNotApply) {
  auto key = mx::random::key(3);
  auto ints = mx::array({3, 9, 9, 1}, {1, 4}, mx::int32);
  EXPECT_STRNE(categorical_last_axis(ints, key).primitive().name(), "InverseCdfDraw");
  setenv("MLXRT_CPU_KERNELS", "mlx", 1);
  auto row = mx::random::normal({1, 50}, mx::float32, 0.0f, 1.0f, mx::random::key(4));
  EXPECT_STRNE(categorical_last_axis(row, key).primitive().name(), "InverseCdfDraw");
  auto batch = mx::random::normal({3, 50}, mx::float32, 0.0f, 1.0f, mx::random::key(4));
  EXPECT_STRNE(categorical_last_axis(batch, key).primitive().name(), "GumbelDraw");
  unsetenv("MLXRT_CPU_KERNELS");
}

namespace {

void expect_same_gumbel(const mx::array& logits, const mx::array& key, const std::string& what) {
  expect_same(logits, key, what, "GumbelDraw");
}

}  // namespace

TEST(CpuCategorical, GumbelDrawEqualsMlxOnBatches) {
  if (!ours_here()) GTEST_SKIP() << "no AVX2 + FMA + F16C here: MLX's categorical runs";
  uint64_t seed = 7;
  for (auto t : {mx::float32, mx::bfloat16, mx::float16})
    for (int rows : {2, 3, 8})
      for (int n : {1, 7, 9, 1000, 4099})
        for (float scale : {0.01f, 1.0f, 8.0f}) {
          auto x = mx::multiply(mx::random::normal({rows, n}, mx::float32, 0.0f, 1.0f, mx::random::key(seed++)),
                                mx::array(scale));
          x = mx::astype(mx::subtract(x, mx::logsumexp(x, -1, true)), t);
          for (int d = 0; d < 3; ++d)
            expect_same_gumbel(x, mx::random::key(seed * 100 + d),
                               std::to_string(rows) + "x" + std::to_string(n) + " " + type_name(t) + " scale " +
                                   std::to_string(scale));
        }
  // A server's batch of Qwen3's vocabulary, and a row without a row axis.
  auto big = mx::astype(mx::random::normal({4, 151936}, mx::float32, 0.0f, 2.0f, mx::random::key(3)), mx::bfloat16);
  for (int d = 0; d < 3; ++d) expect_same_gumbel(big, mx::random::key(40 + d), "4x151936 bf16");
  auto flat = mx::random::normal({5000}, mx::float32, 0.0f, 1.0f, mx::random::key(4));
  for (int d = 0; d < 5; ++d) expect_same_gumbel(flat, mx::random::key(60 + d), "[5000]");
}

TEST(CpuCategorical, GumbelDrawEqualsMlxOnSpecialValuesAndViews) {
  if (!ours_here()) GTEST_SKIP() << "no AVX2 + FMA + F16C here: MLX's categorical runs";
  const std::vector<float> rows = {
      -kInf, -1.0f, -kInf, -2.0f, -kInf, -0.5f, -kInf, -kInf, -kInf, -3.0f,  // masked words
      -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf,  // every word masked
      -1.0f, kInf, -2.0f, kInf, -3.0f, -4.0f, kInf, -5.0f, -6.0f, -7.0f,     // +inf
      kNaN, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f,            // NaNs
      1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f, -kNaN,
      2.0f, 2.0f, 2.0f, 2.0f, 2.0f, 2.0f, 2.0f, 2.0f, 2.0f, 2.0f,            // one value
      1e30f, -1e30f, 3e38f, -3e38f, 2e38f, 0.0f, 1.0f, 3e38f, -0.0f, 1e-40f,  // large and tiny
  };
  for (auto t : {mx::float32, mx::bfloat16, mx::float16}) {
    auto x = mx::astype(mx::array(rows.data(), {7, 10}, mx::float32), t);
    for (int d = 0; d < 40; ++d) expect_same_gumbel(x, mx::random::key(500 + d), std::string("special rows ") + type_name(t));
  }
  auto batch = mx::astype(mx::random::normal({6, 3000}, mx::float32, 0.0f, 2.0f, mx::random::key(5)), mx::bfloat16);
  for (int d = 0; d < 4; ++d) {
    auto key = mx::random::key(70 + d);
    expect_same_gumbel(mx::slice(batch, {1, 7}, {5, 2990}), key, "a sliced view");
    expect_same_gumbel(mx::reshape(batch, {2, 3, 3000}), key, "[2, 3, 3000]");
    expect_same_gumbel(mx::transpose(mx::reshape(batch, {6, 30, 100}), {0, 2, 1}), key, "a transposed view");
  }
}

// The Gumbel sums' slack rests on the approximate logarithm's error: pinned here against the exact
// logarithm (double precision) over the floats the draw meets, u in [2^-32, 1) and -log(u) in
// [2^-24, 23), every 61st float (MLXRT_EXHAUSTIVE=1: every one), beside the C library's logf's.
TEST(CpuCategorical, GumbelSlackCoversTheLogarithmsError) {
  if (!ours_here()) GTEST_SKIP() << "no AVX2 + FMA + F16C here: MLX's categorical runs";
  const char* exhaustive = std::getenv("MLXRT_EXHAUSTIVE");
  const uint32_t stride = exhaustive && std::string(exhaustive) == "1" ? 1 : 61;
  double worst_ours = 0, worst_libc = 0;  // in units in the last place of the float result
  auto sweep = [&](float from, float to) {
    uint32_t lo, hi;
    std::memcpy(&lo, &from, 4);
    std::memcpy(&hi, &to, 4);
    std::vector<float> x, y(4096);
    x.reserve(4096);
    auto flush = [&] {
#if defined(MLXRT_CPU_X86_KERNELS)
      mlxrt::kernels::cpu::log_approx_avx2(x.data(), static_cast<long long>(x.size()), y.data());
#endif
      for (size_t i = 0; i < x.size(); ++i) {
        const double exact = std::log(static_cast<double>(x[i]));
        const float f = static_cast<float>(exact);
        const double ulp = std::fabs(static_cast<double>(std::nextafter(f, 2 * f) - f));
        if (ulp == 0) continue;  // log(1) = 0
        worst_ours = std::max(worst_ours, std::fabs(y[i] - exact) / ulp);
        worst_libc = std::max(worst_libc, std::fabs(std::log(x[i]) - exact) / ulp);
      }
      x.clear();
    };
    for (uint64_t b = lo; b < hi; b += stride) {
      float v;
      const auto b32 = static_cast<uint32_t>(b);
      std::memcpy(&v, &b32, 4);
      x.push_back(v);
      if (x.size() == 4096) flush();
    }
    flush();
  };
  sweep(2.3283064e-10f, 1.0f);  // u
  sweep(5.9604645e-08f, 23.0f);  // -log(u)
  EXPECT_LE(worst_libc, 1.0) << "the C library's logf is further from the logarithm than assumed";
  EXPECT_LE(worst_ours, 5.0) << "the approximate logarithm is further from the exact one than assumed";
  // The error of a sum, in the worst case (|g| <= 16.7: one unit in the last place <= 2^-19):
  // the inner logarithms differ by <= 6 units of theirs (5 + 1), so -log(u) by a factor within
  // 6 * 2^-23, which moves the outer logarithm by <= 7.2e-7, and the outer ones by <= 6 units more;
  // the sum's rounding adds half a unit of the sum's own (kGumbelSlackPerUnit covers 8).
  const double worst_gumbel = 6 * std::ldexp(1.0, -19) + 7.2e-7;
  EXPECT_GE(mlxrt::kernels::cpu::kGumbelSlack, 10 * worst_gumbel);
  std::printf("approximate log: %.3f ulp, libc logf: %.3f ulp (every %u-th float)\n", worst_ours, worst_libc, stride);
}
