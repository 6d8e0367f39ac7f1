// The server's warm-up runs a decoding step at every row count whose L3 kernels differ: each row
// count up to 8 (affine_qmv is one template instance per count) and each count of 8-row chunks
// (affine_qmv_chunks) up to --decode-concurrency, so no request's step compiles one.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "mlxrt/generate/prefill_warm_up.h"
#include "mlxrt/kernels/cuda/affine_qmv.h"

namespace mlxrt::generate {
namespace {

// What a product of `rows` rows launches: affine_qmv's row count, or the chunks' count (plus 8).
int kernel_instance(int rows) {
  return rows < kernels::cuda::kQmvMaxRows ? rows
                                           : kernels::cuda::kQmvMaxRows + (rows + kernels::cuda::kQmvMaxRows - 1) /
                                                                              kernels::cuda::kQmvMaxRows;
}

TEST(DecodeWarmUpRows, EveryKernelInstanceUpToTheDecodeConcurrency) {
  EXPECT_EQ(decode_warm_up_rows(32), (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 16, 24, 32}));
  EXPECT_EQ(decode_warm_up_rows(20), (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 16, 24}));
  EXPECT_EQ(decode_warm_up_rows(5), (std::vector<int>{1, 2, 3, 4, 5}));
  EXPECT_TRUE(decode_warm_up_rows(0).empty());
  for (int concurrency : {1, 7, 8, 9, 31, 32, 33, 64, 127}) {
    const auto warmed = decode_warm_up_rows(concurrency);
    std::vector<int> instances;
    for (int rows : warmed) instances.push_back(kernel_instance(rows));
    for (int rows = 1; rows <= concurrency; ++rows)
      EXPECT_NE(std::find(instances.begin(), instances.end(), kernel_instance(rows)), instances.end())
          << rows << " rows under --decode-concurrency " << concurrency;
  }
}

}  // namespace
}  // namespace mlxrt::generate
