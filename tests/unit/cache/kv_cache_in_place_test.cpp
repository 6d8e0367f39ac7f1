// KVCache's in-place writes (begin_in_place_write / end_in_place_write), the cache side of the
// one-kernel decoder layer: the position and the buffers a kernel gets, their growth, and that a
// buffer anyone else may hold (a clone, the state read out, a prefill's views) is copied before a
// kernel writes into it. The "kernel" here writes the evaluated buffer from the host, as the CUDA
// kernel writes it on the device.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>
#include <mlx/ops.h>
#include <mlx/transforms.h>

#include "mlxrt/cache/kv_cache.h"

namespace mlxrt::cache {
namespace {

namespace mx = mlx::core;

constexpr int kHeads = 2, kDim = 4;
constexpr int kBarrierWords = 64;  // the kernel's barrier state (the cache keeps whatever size it is asked for)

// What the kernel does: keys and values of every head at `position` set to `value`.
void kernel_writes(KVCache::InPlaceWrite& w, float value) {
  mx::eval({w.keys, w.values, w.barrier});
  const int capacity = w.keys.shape(2);
  for (auto* a : {&w.keys, &w.values}) {
    float* data = a->data<float>();
    for (int h = 0; h < kHeads; ++h)
      for (int d = 0; d < kDim; ++d) data[(h * capacity + w.position) * kDim + d] = value;
  }
}

// keys[0, head, position, dim] as the cache's state reads it.
float key_at(const KVCache& c, int position) {
  auto kv = c.keys_and_values();
  auto k = mx::contiguous(kv->keys);
  mx::eval(k);
  return k.data<float>()[position * kDim];
}

mx::array next_barrier() { return mx::zeros({kBarrierWords}, mx::uint32); }

const mx::Shape kOne = {1, kHeads, 1, kDim};

TEST(KVCacheInPlace, AnEmptyCacheGetsBuffersOfItsOwnAndPositionsInTurn) {
  KVCache c;
  for (int i = 0; i < 3; ++i) {
    auto w = c.begin_in_place_write(kOne, mx::float32, kBarrierWords);
    ASSERT_TRUE(w.has_value());
    EXPECT_EQ(w->position, i);
    EXPECT_EQ(c.offset(), i + 1);
    EXPECT_EQ(w->keys.shape(), (mx::Shape{1, kHeads, KVCache::kStep, kDim}));
    EXPECT_EQ(w->barrier.dtype(), mx::uint32);
    kernel_writes(*w, 10.0f + i);
    c.end_in_place_write(next_barrier());
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(key_at(c, i), 10.0f + i);
  EXPECT_EQ(c.keys_and_values()->keys.shape(2), 3);
}

TEST(KVCacheInPlace, ThePositionsAfterAPrefillAndTheGrowthPastAStep) {
  KVCache c;
  auto prefill = mx::full({1, kHeads, KVCache::kStep - 1, kDim}, 1.0f);
  c.update_and_fetch(prefill, prefill);
  auto w = c.begin_in_place_write(kOne, mx::float32, kBarrierWords);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->position, KVCache::kStep - 1);
  EXPECT_EQ(w->keys.shape(2), KVCache::kStep);
  kernel_writes(*w, 7.0f);
  c.end_in_place_write(next_barrier());
  // Full: the next position grows the buffers by a step, keeping what they hold.
  w = c.begin_in_place_write(kOne, mx::float32, kBarrierWords);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->position, KVCache::kStep);
  EXPECT_EQ(w->keys.shape(2), 2 * KVCache::kStep);
  kernel_writes(*w, 8.0f);
  c.end_in_place_write(next_barrier());
  EXPECT_EQ(key_at(c, 0), 1.0f);
  EXPECT_EQ(key_at(c, KVCache::kStep - 1), 7.0f);
  EXPECT_EQ(key_at(c, KVCache::kStep), 8.0f);
}

TEST(KVCacheInPlace, AClonesBuffersAreNeverWrittenThrough) {
  KVCache c;
  auto w = c.begin_in_place_write(kOne, mx::float32, kBarrierWords);
  kernel_writes(*w, 1.0f);
  c.end_in_place_write(next_barrier());
  auto copy = c.clone();
  auto& clone = static_cast<KVCache&>(*copy);
  w = c.begin_in_place_write(kOne, mx::float32, kBarrierWords);
  ASSERT_TRUE(w.has_value());
  kernel_writes(*w, 2.0f);
  c.end_in_place_write(next_barrier());
  // The original wrote into a copy: the clone still has one position, and the buffer it had.
  EXPECT_EQ(clone.offset(), 1);
  auto theirs = clone.buffers()->keys;
  mx::eval(theirs);
  EXPECT_EQ(theirs.data<float>()[1 * kDim], 0.0f) << "the clone saw the original's write";
  EXPECT_EQ(key_at(c, 0), 1.0f);
  EXPECT_EQ(key_at(c, 1), 2.0f);
  // And the clone writes into a buffer of its own too.
  auto cw = clone.begin_in_place_write(kOne, mx::float32, kBarrierWords);
  ASSERT_TRUE(cw.has_value());
  EXPECT_EQ(cw->position, 1);
  kernel_writes(*cw, 3.0f);
  clone.end_in_place_write(next_barrier());
  EXPECT_EQ(key_at(clone, 1), 3.0f);
  EXPECT_EQ(key_at(c, 1), 2.0f);
}

TEST(KVCacheInPlace, StateReadOutIsNotWrittenThrough) {
  KVCache c;
  auto w = c.begin_in_place_write(kOne, mx::float32, kBarrierWords);
  kernel_writes(*w, 1.0f);
  c.end_in_place_write(next_barrier());
  auto saved = c.state();  // e.g. a prompt cache keeps these
  mx::eval(saved);
  EXPECT_EQ(c.trim(1), 1);  // the same position again
  w = c.begin_in_place_write(kOne, mx::float32, kBarrierWords);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->position, 0);
  kernel_writes(*w, 5.0f);
  c.end_in_place_write(next_barrier());
  EXPECT_EQ(saved[0].data<float>()[0], 1.0f) << "the saved state saw a later write";
  EXPECT_EQ(key_at(c, 0), 5.0f);
}

TEST(KVCacheInPlace, AnotherShapeOrTypeLeavesTheCacheAlone) {
  KVCache c;
  auto prefill = mx::ones({1, kHeads, 2, kDim});
  c.update_and_fetch(prefill, prefill);
  EXPECT_FALSE(c.begin_in_place_write({1, kHeads, 1, kDim}, mx::bfloat16, kBarrierWords).has_value());
  EXPECT_FALSE(c.begin_in_place_write({1, kHeads + 1, 1, kDim}, mx::float32, kBarrierWords).has_value());
  EXPECT_FALSE(c.begin_in_place_write({1, kHeads, 2, kDim}, mx::float32, kBarrierWords).has_value());  // two positions
  EXPECT_EQ(c.offset(), 2);
}

TEST(KVCacheInPlace, TheUsualUpdateContinuesAfterInPlaceWrites) {
  KVCache c;
  auto w = c.begin_in_place_write(kOne, mx::float32, kBarrierWords);
  kernel_writes(*w, 4.0f);
  c.end_in_place_write(next_barrier());
  auto more = mx::full({1, kHeads, 2, kDim}, 6.0f);
  auto kv = c.update_and_fetch(more, more);
  auto keys = mx::contiguous(std::get<PlainKV>(kv).keys);
  mx::eval(keys);
  EXPECT_EQ(keys.shape(2), 3);
  EXPECT_EQ(keys.data<float>()[0], 4.0f);
  EXPECT_EQ(keys.data<float>()[1 * kDim], 6.0f);
}

}  // namespace
}  // namespace mlxrt::cache
