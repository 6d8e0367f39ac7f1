// Row-exact pieces (--spec-exact, docs/exact-mode.md): how a linear layer's rows are split into
// calls, which matmuls keep a row's bytes on this device, and attention one query at a time. The
// CUDA rules (7 quantized rows per call, each query over its decoding step's KV buffer) run on a GPU
// only: bench/gpu/exact_run.sh checks them there.
#include <gtest/gtest.h>

#include <vector>

#include <mlx/fast.h>
#include <mlx/ops.h>
#include <mlx/random.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/model/nn/attention.h"
#include "mlxrt/model/nn/linear.h"

namespace mx = mlx::core;
using mlxrt::model::nn::each_row;

TEST(RowExact, EachRowSplitsIntoCallsOfAtMostPerCallRows) {
  auto x = mx::random::normal({1, 7, 16});
  std::vector<mx::Shape> calls;
  auto twice = [&calls](const mx::array& rows) {
    calls.push_back(rows.shape());
    return mx::multiply(rows, mx::array(2.0f));
  };
  auto y = each_row(x, twice, 3);
  ASSERT_TRUE(y);
  EXPECT_EQ(calls, (std::vector<mx::Shape>{{1, 3, 16}, {1, 3, 16}, {1, 1, 16}}));
  EXPECT_EQ(y->shape(), x.shape());
  EXPECT_TRUE(mx::array_equal(*y, mx::multiply(x, mx::array(2.0f))).item<bool>());

  // One row per call: each a decoding step's [1, 1, D]; rows of a batch are split the same way.
  calls.clear();
  auto batch = mx::random::normal({2, 3, 16});
  ASSERT_TRUE(each_row(batch, twice));
  EXPECT_EQ(calls, std::vector<mx::Shape>(6, mx::Shape{1, 1, 16}));

  // A layer whose output width differs from its input's.
  auto widen = [](const mx::array& rows) { return mx::concatenate({rows, rows}, -1); };
  auto wide = each_row(x, widen, 2);
  ASSERT_TRUE(wide);
  EXPECT_EQ(wide->shape(), (mx::Shape{1, 7, 32}));
  EXPECT_TRUE(mx::array_equal(*wide, widen(x)).item<bool>());
}

TEST(RowExact, OneCallTakesThemAllWhenTheyFit) {
  auto x = mx::random::normal({1, 7, 16});
  auto same = [](const mx::array& rows) { return rows; };
  EXPECT_FALSE(each_row(x, same, 7));
  EXPECT_FALSE(each_row(x, same, 64));
  EXPECT_FALSE(each_row(mx::random::normal({1, 1, 16}), same));
}

TEST(RowExact, RowInvariantMatmulsOnTheCpu) {
  using mlxrt::model::nn::Quantized;
  using mlxrt::model::nn::row_invariant_rows;
  // MLX's CPU quantized (affine) and bf16/fp16 matmuls keep a row's bytes for any M (0); float32
  // goes to the BLAS (one row per call).
  EXPECT_EQ(row_invariant_rows(mx::zeros({8, 16}, mx::bfloat16), std::nullopt), 0);
  EXPECT_EQ(row_invariant_rows(mx::zeros({8, 16}, mx::float16), std::nullopt), 0);
  EXPECT_EQ(row_invariant_rows(mx::zeros({8, 16}, mx::float32), std::nullopt), 1);
  Quantized q{mx::zeros({8, 1}, mx::bfloat16), mx::zeros({8, 1}, mx::bfloat16), {64, 4, "affine"}, nullptr,
              std::nullopt};
  EXPECT_EQ(row_invariant_rows(mx::zeros({8, 8}, mx::uint32), q), 0);
  q.spec.mode = "mxfp4";
  EXPECT_EQ(row_invariant_rows(mx::zeros({8, 8}, mx::uint32), q), 1);
}

TEST(RowExact, EachQueryAttendsAloneOverItsPrefix) {
  mlxrt::cache::KVCache cache;
  const int T = 300, L = 5;
  auto k = mx::random::normal({1, 2, T, 32}, mx::bfloat16);
  auto v = mx::random::normal({1, 2, T, 32}, mx::bfloat16);
  auto q = mx::random::normal({1, 4, L, 32}, mx::bfloat16);
  auto kv = cache.update_and_fetch(k, v);
  std::vector<int> seen;
  auto one = [&seen](const mx::array& query, const mlxrt::cache::CachedKV& prefix) {
    const auto& p = std::get<mlxrt::cache::PlainKV>(prefix);
    seen.push_back(p.keys.shape(2));
    return mx::fast::scaled_dot_product_attention(query, p.keys, p.values, 0.125f);
  };
  auto got = mlxrt::model::nn::attend_each_query(q, kv, mlxrt::cache::AttentionMask::causal(), one);
  // Causal, aligned at the end: the last query sees every key, each earlier one a key less.
  EXPECT_EQ(seen, (std::vector<int>{T - 4, T - 3, T - 2, T - 1, T}));
  ASSERT_EQ(got.shape(), q.shape());
  for (int l = 0; l < L; ++l) {
    const int keep = T - L + l + 1;
    auto want = mx::fast::scaled_dot_product_attention(mx::slice(q, {0, 0, l, 0}, {1, 4, l + 1, 32}),
                                                       mx::slice(k, {0, 0, 0, 0}, {1, 2, keep, 32}),
                                                       mx::slice(v, {0, 0, 0, 0}, {1, 2, keep, 32}), 0.125f);
    EXPECT_TRUE(mx::array_equal(mx::slice(got, {0, 0, l, 0}, {1, 4, l + 1, 32}), want).item<bool>()) << l;
  }
}
