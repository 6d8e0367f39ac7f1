// The distributed split of a model without a distributed run: PipelineMixin's layer ranges and the
// _shard slices of mlx.nn.layers.distributed. The runs themselves are checked against mlx-lm by
// tests/parity/test_distributed.py.
#include <gtest/gtest.h>

#include <mlx/ops.h>

#include "mlxrt/model/parallel.h"
#include "mlxrt/util/errors.h"

namespace mx = mlx::core;
using namespace mlxrt;
using namespace mlxrt::model;

TEST(PipelineLayers, RankZeroRunsTheLastLayersAndLowRanksTakeTheExtra) {
  // 10 layers over 4 ranks: split [3, 3, 2, 2]; rank 3 runs layers 0-1, rank 0 layers 7-9.
  const LayerRange expected[] = {{7, 10}, {4, 7}, {2, 4}, {0, 2}};
  for (int r = 0; r < 4; ++r) {
    auto got = pipeline_layers(10, r, 4, "config.json");
    EXPECT_EQ(got.start, expected[r].start) << r;
    EXPECT_EQ(got.end, expected[r].end) << r;
  }
  auto half = pipeline_layers(3, 0, 2, "config.json");  // split [2, 1]
  EXPECT_EQ(half.start, 1);
  EXPECT_EQ(half.end, 3);
}

TEST(PipelineLayers, MoreRanksThanLayersIsAConfigError) {
  try {
    pipeline_layers(2, 0, 3, "config.json");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'num_hidden_layers' is 2, fewer than the 3 pipeline ranks"),
              std::string::npos);
  }
}

TEST(ShardTensor, KeepsThisRanksRowsOrColumns) {
  auto t = mx::reshape(mx::arange(24, mx::int32), {4, 6});
  auto rows = nn::shard_tensor(t, 0, 1, 2, "w");
  EXPECT_TRUE(mx::array_equal(rows, mx::slice(t, {2, 0}, {4, 6})).item<bool>());
  auto cols = nn::shard_tensor(t, -1, 2, 3, "w");
  EXPECT_TRUE(mx::array_equal(cols, mx::slice(t, {0, 4}, {4, 6})).item<bool>());
  auto stacked = nn::shard_tensor(mx::zeros({3, 4, 6}), 1, 0, 2, "experts");  // [E, out, in]: rows are axis 1
  EXPECT_EQ(stacked.shape(), (mx::Shape{3, 2, 6}));
}

TEST(ShardTensor, AnAxisThatDoesNotDivideNamesTheTensor) {
  try {
    nn::shard_tensor(mx::zeros({3, 4}), 0, 0, 2, "model.layers.0.self_attn.k_proj.weight");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.self_attn.k_proj.weight: its axis 0 of size 3 does not split "
                                         "evenly across 2 ranks"),
              std::string::npos);
  }
}
