// The padded prefill attention of model/nn/attention.cpp (issue 14): the length it pads to, and
// what the KV cache hands it. Whether the padded attention keeps the bytes is a device question
// (bench/gpu/shape_cost.py bytes); on this CPU build the attention never pads.
#include <gtest/gtest.h>

#include <mlx/device.h>
#include <mlx/fast.h>
#include <mlx/ops.h>
#include <mlx/random.h>

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
