// BatchRotatingKVCache keeps its rows' offsets and left padding on the host as well as in arrays
// (so that reading them does not wait for the step in flight). Through every operation the batch
// generator uses, the host copies must hold the arrays' values exactly.
#include <gtest/gtest.h>
#include <mlx/ops.h>
#include <mlx/random.h>

#include "mlxrt/cache/batch_rotating_kv_cache.h"
#include "mlxrt/cache/batch_rows.h"
#include "mlxrt/cache/rotating_kv_cache.h"

namespace mlxrt::cache {
namespace {

mx::array kv(int rows, int length, int seed) {
  return mx::astype(mx::random::normal({rows, 2, length, 8}, mx::float32, 0, 1, mx::random::key(seed)),
                    mx::bfloat16);
}

void feed(Cache& c, int rows, int length, int seed) {
  auto x = kv(rows, length, seed);
  c.update_and_fetch(x, mx::negative(x));
}

// state() ends with the offset and left padding arrays.
void expect_host_matches(const BatchRotatingKVCache& c, const char* after) {
  const auto state = c.state();
  ASSERT_GE(state.size(), 2u);
  EXPECT_EQ(c.offsets(), batch_rows::to_ints(state[state.size() - 2])) << "offsets after " << after;
  EXPECT_EQ(c.host_left_padding(), batch_rows::to_ints(state.back())) << "left padding after " << after;
}

TEST(BatchRotatingHost, RightPaddedPrefillThenDecodePastTheWindow) {
  BatchRotatingKVCache c(6, {1, 0, 2});
  expect_host_matches(c, "construction");
  c.prepare(std::nullopt, {3, 5, 2}, std::vector<int>{2, 0, 3});
  feed(c, 3, 5, 1);
  expect_host_matches(c, "the right-padded prefill chunk");
  c.finalize();
  expect_host_matches(c, "finalize");
  for (int step = 0; step < 9; ++step) {  // the ring wraps (window 6)
    feed(c, 3, 1, 10 + step);
    expect_host_matches(c, "a decode step");
  }
  c.filter({2, 0});
  expect_host_matches(c, "filter");
  feed(c, 2, 1, 30);
  expect_host_matches(c, "a decode step after filter");
}

TEST(BatchRotatingHost, ChunkedPrefillWithRollsThenTrim) {
  BatchRotatingKVCache c(12, {0, 0});
  c.prepare(std::vector<int>{2, 0}, {4, 6}, std::vector<int>{2, 0});
  expect_host_matches(c, "prepare with left padding");
  feed(c, 2, 4, 2);
  feed(c, 2, 3, 3);  // a second chunk: the concatenating path rolls the padded row
  expect_host_matches(c, "a second prefill chunk");
  c.finalize();
  feed(c, 2, 1, 4);
  ASSERT_TRUE(c.is_trimmable());
  c.trim(2);
  expect_host_matches(c, "trim");
}

TEST(BatchRotatingHost, MergeExtendAndExtract) {
  RotatingKVCache a(6), b(6);
  feed(a, 1, 4, 5);
  feed(b, 1, 7, 6);  // past the window: its ring has wrapped
  auto merged = BatchRotatingKVCache::merge({&a, &b});
  expect_host_matches(*merged, "merge");

  BatchRotatingKVCache c(6, {0});
  c.prepare(std::nullopt, {3}, std::nullopt);
  feed(c, 1, 3, 7);
  for (int step = 0; step < 5; ++step) feed(c, 1, 1, 20 + step);
  c.extend(*merged);
  expect_host_matches(c, "extend");
  feed(c, 3, 1, 40);
  expect_host_matches(c, "a decode step after extend");

  // extract reads the host copies: each row comes out as it went in (its last positions, its offset).
  for (int row = 0; row < 3; ++row) {
    auto single = c.extract(row);
    EXPECT_EQ(single->offset(), c.offsets()[row]);
  }
}

TEST(BatchRotatingHost, EmptySidesExtend) {
  BatchRotatingKVCache c(4, {1, 0}), d(4, {0});
  c.extend(d);
  expect_host_matches(c, "extending an empty batch by an empty batch");
}

}  // namespace
}  // namespace mlxrt::cache
