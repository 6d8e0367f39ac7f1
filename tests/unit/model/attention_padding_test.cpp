// The padded prefill attention of model/nn/attention.cpp (issue 14): the length it pads to, and
// what the KV cache hands it. Whether the padded attention keeps the bytes is a device question
// (bench/gpu/shape_cost.py bytes); on this CPU build the attention never pads.
#include <gtest/gtest.h>

#include <mlx/device.h>
#include <mlx/fast.h>
#include <mlx/ops.h>
#include <mlx/random.h>

#include "mlxrt/cache/batch_kv_cache.h"
#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/model/nn/attention.h"

namespace mx = mlx::core;
using mlxrt::model::nn::padded_attention_length;

TEST(PaddedAttention, RoundsUpToTheCacheStepWithinTheBuffer) {
  EXPECT_EQ(padded_attention_length(1, 256), 256);
  EXPECT_EQ(padded_attention_length(5, 256), 256);
  EXPECT_EQ(padded_attention_length(255, 256), 256);
  EXPECT_EQ(padded_attention_length(256, 256), 256);
  EXPECT_EQ(padded_attention_length(257, 512), 512);
  EXPECT_EQ(padded_attention_length(511, 1024), 512);  // never past the step, however large the buffer
  EXPECT_EQ(padded_attention_length(2048 + 300, 2304 + 256), 2560);
  EXPECT_EQ(padded_attention_length(300, 256), 300);   // a buffer too short: unpadded
}

TEST(PaddedAttention, QueriesUnderAMaskAtAnyOffsetPadToFewCounts) {
  using mlxrt::model::nn::padded_query_count;
  EXPECT_EQ(padded_query_count(2), 16);
  EXPECT_EQ(padded_query_count(16), 16);
  EXPECT_EQ(padded_query_count(17), 32);
  EXPECT_EQ(padded_query_count(100), 128);
  EXPECT_EQ(padded_query_count(256), 256);
  EXPECT_EQ(padded_query_count(257), 512);
  EXPECT_EQ(padded_query_count(600), 768);  // past 256: the cache step, as the keys
  // Never fewer than asked, and the same count for every length of a bucket.
  for (int n = 2; n <= 1024; ++n) {
    const int p = padded_query_count(n);
    EXPECT_GE(p, n);
    EXPECT_EQ(padded_query_count(p), p);
  }
}

TEST(PaddedAttention, RowsUnderAMaskPadToPowersOfTwo) {
  using mlxrt::model::nn::padded_row_count;
  EXPECT_EQ(padded_row_count(1), 1);
  EXPECT_EQ(padded_row_count(2), 2);
  EXPECT_EQ(padded_row_count(3), 4);
  EXPECT_EQ(padded_row_count(5), 8);
  EXPECT_EQ(padded_row_count(29), 32);
  EXPECT_EQ(padded_row_count(32), 32);
  EXPECT_EQ(padded_row_count(33), 64);
  for (int n = 1; n <= 300; ++n) {
    const int p = padded_row_count(n);
    EXPECT_GE(p, n);
    EXPECT_LT(p, 2 * n);
    EXPECT_EQ(padded_row_count(p), p);
  }
}

TEST(PaddedAttention, KVCacheHandsOverItsBuffers) {
  mlxrt::cache::KVCache cache;
  auto k = mx::random::normal({1, 2, 5, 8}, mx::bfloat16);
  auto v = mx::random::normal({1, 2, 5, 8}, mx::bfloat16);
  auto kv = std::get<mlxrt::cache::PlainKV>(cache.update_and_fetch(k, v));
  EXPECT_EQ(kv.keys.shape(2), 5);
  ASSERT_TRUE(kv.keys_buffer && kv.values_buffer);
  EXPECT_EQ(kv.keys_buffer->shape(2), 256);
  EXPECT_EQ(kv.values_buffer->shape(2), 256);
  // The prefix is the buffer's first rows.
  auto head = mx::slice(*kv.keys_buffer, {0, 0, 0, 0}, {1, 2, 5, 8});
  EXPECT_TRUE(mx::array_equal(head, kv.keys).item<bool>());
}

TEST(PaddedAttention, OnTheCpuTheAttentionIsTheUnpaddedOne) {
  mlxrt::cache::KVCache cache;
  auto q = mx::random::normal({1, 4, 7, 32}, mx::bfloat16);
  auto k = mx::random::normal({1, 2, 7, 32}, mx::bfloat16);
  auto v = mx::random::normal({1, 2, 7, 32}, mx::bfloat16);
  auto kv = std::get<mlxrt::cache::PlainKV>(cache.update_and_fetch(k, v));
  auto got = mlxrt::model::nn::scaled_dot_product_attention(q, kv, 0.125f, mlxrt::cache::AttentionMask::causal());
  auto want = mx::fast::scaled_dot_product_attention(q, kv.keys, kv.values, 0.125f, "causal");
  EXPECT_EQ(got.shape(), want.shape());
  EXPECT_TRUE(mx::array_equal(got, want).item<bool>());
}

TEST(PaddedAttention, NeverOnTheCpu) {
  // The default device of this build is the CPU: padding (and the warm-up that relies on it) is off.
  if (mx::default_device() != mx::Device::cpu) GTEST_SKIP() << "a GPU build";
  EXPECT_FALSE(mlxrt::model::nn::prefill_attention_padded());
}

TEST(PaddedAttention, BatchKVCacheHandsOverItsBuffers) {
  // The batched path's cache gives its buffers as KVCache does, so its prefill pads on CUDA too.
  mlxrt::cache::BatchKVCache cache({0, 2});
  auto k = mx::random::normal({2, 2, 5, 8}, mx::bfloat16);
  auto v = mx::random::normal({2, 2, 5, 8}, mx::bfloat16);
  auto kv = std::get<mlxrt::cache::PlainKV>(cache.update_and_fetch(k, v));
  EXPECT_EQ(kv.keys.shape(2), 5);
  ASSERT_TRUE(kv.keys_buffer && kv.values_buffer);
  EXPECT_EQ(kv.keys_buffer->shape(2), 256);
  auto head = mx::slice(*kv.values_buffer, {0, 0, 0, 0}, {2, 2, 5, 8});
  EXPECT_TRUE(mx::array_equal(head, kv.values).item<bool>());
}

namespace {
mx::array corner(const mx::array& a, int rows, int cols) {
  mx::Shape stop = a.shape();
  stop[a.ndim() - 2] = rows;
  stop[a.ndim() - 1] = cols;
  return mx::slice(a, mx::Shape(a.ndim(), 0), stop);
}
}  // namespace

TEST(PaddedAttention, WidenedMaskKeepsTheRealEntriesAndMasksTheRest) {
  using mlxrt::model::nn::padded_attention_mask;
  // The batched path's mask: rows left-padded by 0 and 2, 3 queries at offset 2 (5 keys).
  auto mask = mlxrt::cache::create_causal_mask(3, 2, std::nullopt, mx::array({0, 2}));
  ASSERT_EQ(mask.shape(), (mx::Shape{2, 1, 3, 5}));
  auto wide = padded_attention_mask(mask, 3, 5, 7, 9);
  ASSERT_TRUE(wide);
  EXPECT_EQ(wide->shape(), (mx::Shape{2, 1, 7, 9}));
  EXPECT_EQ(wide->dtype(), mx::bool_);
  EXPECT_TRUE(mx::array_equal(corner(*wide, 3, 5), mask).item<bool>());
  // Everything added is masked: the sum of the widened mask is the original's.
  EXPECT_EQ(mx::sum(mx::astype(*wide, mx::int32)).item<int>(), mx::sum(mx::astype(mask, mx::int32)).item<int>());

  // An additive mask is widened with -inf.
  auto additive = mx::where(mask, mx::array(0.0f, mx::bfloat16), mx::array(-1e4f, mx::bfloat16));
  auto wide_add = padded_attention_mask(additive, 3, 5, 7, 9);
  ASSERT_TRUE(wide_add);
  EXPECT_EQ(wide_add->dtype(), mx::bfloat16);
  EXPECT_TRUE(mx::array_equal(corner(*wide_add, 3, 5), additive).item<bool>());
  auto added = mx::slice(*wide_add, {0, 0, 0, 5}, {2, 1, 7, 9});
  EXPECT_TRUE(mx::all(mx::isneginf(added)).item<bool>());

  // One mask row for every query: only the keys are widened.
  auto keys_only = padded_attention_mask(mx::ones({2, 1, 1, 5}, mx::bool_), 3, 5, 7, 9);
  ASSERT_TRUE(keys_only);
  EXPECT_EQ(keys_only->shape(), (mx::Shape{2, 1, 1, 9}));
  // A mask that is not [..., L or 1, Tk] is left alone.
  EXPECT_FALSE(padded_attention_mask(mx::ones({2, 1, 3, 4}, mx::bool_), 3, 5, 7, 9));
  EXPECT_FALSE(padded_attention_mask(mx::ones({5}, mx::bool_), 3, 5, 7, 9));
}

TEST(PaddedAttention, WidenedMaskAttendsAsTheOriginal) {
  // The padded attention's real rows under the widened mask against the plain attention: the
  // argument the CUDA path rests on, here with the CPU's attention (which never pads).
  const int B = 2, H = 4, Hkv = 2, L = 6, offset = 3, Tk = offset + L, Tp = 16, D = 32;
  auto q = mx::random::normal({B, H, L, D}, mx::float32);
  auto kb = mx::random::normal({B, Hkv, Tp, D}, mx::float32);
  auto vb = mx::random::normal({B, Hkv, Tp, D}, mx::float32);
  auto mask = mlxrt::cache::create_causal_mask(L, offset, std::nullopt, mx::array({0, 4}));
  auto plain = mx::fast::scaled_dot_product_attention(q, corner(kb, Tk, D), corner(vb, Tk, D), 0.2f, "array", mask);
  auto wide = mlxrt::model::nn::padded_attention_mask(mask, L, Tk, L + Tp - Tk, Tp);
  ASSERT_TRUE(wide);
  auto qp = mx::concatenate({q, mx::zeros({B, H, Tp - Tk, D}, mx::float32)}, 2);
  auto padded = corner(mx::fast::scaled_dot_product_attention(qp, kb, vb, 0.2f, "array", *wide), L, D);
  // Row 1's first query sees no key (its left padding): what a query that sees nothing gets is the
  // backend's (the CPU's softmax spreads it evenly over every key it is given, so it differs with
  // the key count). Every query that sees a key attends to the same keys with the same weights:
  // equal to float32 rounding here, not to the byte, because the CPU's unfused softmax and product
  // with the values run over the longer rows in another order (why the CPU never pads; on CUDA,
  // cuDNN's tiles keep the bytes: bench/gpu/shape_cost.py bytes --op-mask-rows).
  auto sees = mx::expand_dims(mx::any(mask, -1), -1);  // [B, 1, L, 1]
  ASSERT_FALSE(mx::all(sees).item<bool>());
  EXPECT_TRUE(mx::allclose(mx::where(sees, plain, mx::array(0.0f)), mx::where(sees, padded, mx::array(0.0f)), 1e-5,
                           1e-6)
                  .item<bool>());
  // A mask that let a real row see a padded key would not be close: the check can fail.
  auto leaky = mx::pad(mask, {2, 3}, {0, 0}, {Tp - Tk, Tp - Tk}, mx::array(true));
  auto leaked = corner(mx::fast::scaled_dot_product_attention(qp, kb, vb, 0.2f, "array", leaky), L, D);
  EXPECT_FALSE(mx::allclose(mx::where(sees, plain, mx::array(0.0f)), mx::where(sees, leaked, mx::array(0.0f)), 1e-5,
                            1e-6)
                   .item<bool>());
}
