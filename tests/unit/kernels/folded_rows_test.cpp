// L1's folded rows on CUDA (kernels/cuda/folded_rows.h): which products fold, and the fold itself.
// Whether the folded product keeps MLX's bytes is for a CUDA GPU to say: the batched parity tests
// (tests/generate/test_batch_generate.py, quantized fixtures) run there against mlx-lm.
#include <gtest/gtest.h>

#include <mlx/mlx.h>

#include "mlxrt/kernels/cuda/folded_rows.h"

namespace mx = mlx::core;
using mlxrt::kernels::cuda::fold_rows;
using mlxrt::kernels::cuda::quantized_rows_fold_exactly;
using mlxrt::kernels::cuda::rows_fold_by_shape;

namespace {

TEST(FoldedRows, FoldsABatchOfRowMatricesInAffineModeOnly) {
  const auto x = [](mx::Shape shape) { return mx::zeros(shape, mx::bfloat16); };
  EXPECT_TRUE(rows_fold_by_shape(x({8, 1, 64}), "affine")) << "a batched decoding step";
  EXPECT_TRUE(rows_fold_by_shape(x({4, 3, 64}), "affine")) << "a batched prefill chunk";
  EXPECT_TRUE(rows_fold_by_shape(x({2, 2, 1, 64}), "affine"));
  EXPECT_FALSE(rows_fold_by_shape(x({1, 1, 64}), "affine")) << "one row";
  EXPECT_FALSE(rows_fold_by_shape(x({1, 512, 64}), "affine")) << "already one matrix";
  EXPECT_FALSE(rows_fold_by_shape(x({8, 64}), "affine")) << "already two dimensions";
  EXPECT_FALSE(rows_fold_by_shape(x({0, 1, 64}), "affine")) << "empty";
  EXPECT_FALSE(rows_fold_by_shape(x({8, 1, 64}), "mxfp4")) << "another mode";
}

TEST(FoldedRows, LeavesTheCpuAsItIs) {
  // The CPU runs mlxrt's own kernel, which reads w once whatever the layout.
  mx::set_default_device(mx::Device::cpu);
  EXPECT_FALSE(quantized_rows_fold_exactly(mx::zeros({8, 1, 64}, mx::bfloat16), "affine"));
}

TEST(FoldedRows, OneProblemWhereXIsOneMatrixOrFolds) {
  using mlxrt::kernels::cuda::quantized_rows_as_one_problem;
  mx::set_default_device(mx::Device::cpu);
  EXPECT_TRUE(quantized_rows_as_one_problem(mx::zeros({32, 64}, mx::bfloat16), "affine"));
  EXPECT_TRUE(quantized_rows_as_one_problem(mx::zeros({1, 32, 64}, mx::bfloat16), "affine"));
  // Off CUDA nothing folds: a batch of row matrices stays B problems (the chunks' case on a GPU).
  EXPECT_FALSE(quantized_rows_as_one_problem(mx::zeros({32, 1, 64}, mx::bfloat16), "affine"));
}

TEST(FoldedRows, OnlyUnderTheMlxReleasesItsRuleWasReadFrom) {
  EXPECT_TRUE(mlxrt::kernels::cuda::fold_read_for("0.32.4"));
  EXPECT_TRUE(mlxrt::kernels::cuda::fold_read_for("0.32.0"));
  EXPECT_FALSE(mlxrt::kernels::cuda::fold_read_for("0.33.0"));
  EXPECT_FALSE(mlxrt::kernels::cuda::fold_read_for("0.3.2"));
  EXPECT_FALSE(mlxrt::kernels::cuda::fold_read_for(""));
  // The pinned MLX is one of them (versions.env), or the rule would never apply.
  EXPECT_TRUE(mlxrt::kernels::cuda::fold_read_for(mx::version()));
}

TEST(FoldedRows, FoldsTheLeadingDimensionsIntoRows) {
  const auto x = mx::reshape(mx::arange(2 * 3 * 1 * 4, mx::float32), {2, 3, 1, 4});
  const auto y = fold_rows(x);
  EXPECT_EQ(y.shape(), (mx::Shape{6, 4}));
  EXPECT_TRUE(mx::array_equal(mx::reshape(y, x.shape()), x).item<bool>());
}

}  // namespace
