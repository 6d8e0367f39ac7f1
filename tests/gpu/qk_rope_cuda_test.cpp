// The L3 q/k norms + RoPE kernel (kernels/cuda/qk_rope.h) against MLX's own nodes on the GPU, as
// the decoder runs them at L1: per-head mx.fast.rms_norm, the transpose to [B, heads, L, D],
// mx.fast.rope. q and k are drawn from {±0.5, ±1, ±2}, whose squares sum exactly in float32 in any
// order, so the kernel's norm gives MLX's bytes; the rotation is MLX's formula, so an output may
// differ from MLX's only by how the two products are contracted (an FMA or not): at most one
// rounding of the output type plus a float32 rounding of the larger product. (On the H200 all the
// outputs of these cases have been byte-equal to MLX's.) A wrong head, row, position or pair is off
// by far more.
// Positions stay >= 0: MLX's batched CUDA RoPE adds a row's offset to the position in unsigned
// arithmetic, so a negative position (a left-padded row's padding, which the mask hides) becomes
// a huge one there; this kernel rotates it by the negative angle, as MLX's CPU RoPE does.
// Needs a CUDA device.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <mlx/backend/cuda/cuda.h>
#include <mlx/fast.h>
#include <mlx/ops.h>
#include <mlx/random.h>
#include <mlx/transforms.h>

#include "mlxrt/kernels/cuda/qk_rope.h"
#include "qk_rope_case.h"

namespace mlxrt::kernels::cuda {
namespace {

// In row-major order: MLX keeps a transposed array's layout through astype (the reference's RoPE
// output is [B, L, heads, D] in memory, [B, heads, L, D] in shape).
std::vector<double> host(const mx::array& a) {
  auto f = mx::contiguous(mx::astype(a, mx::float32));
  mx::eval(f);
  return {f.data<float>(), f.data<float>() + f.size()};
}

double ulp(mx::Dtype t) {
  return t == mx::bfloat16 ? std::ldexp(1.0, -7) : t == mx::float16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -23);
}

using Case = kernel_tests::QkRopeCase;
using kernel_tests::qk_rope_label;

// MLX's nodes as the decoder runs them at L1: split_projected, then rope_and_update_cache's RoPE.
mx::array reference(const mx::array& x, int heads, const std::optional<RmsNormIn>& norm, const RopeIn& rope,
                    const mx::array& offset, int single_offset, bool per_row) {
  const int b = x.shape(0), l = x.shape(1);
  auto h = mx::reshape(x, {b, l, heads, -1});
  if (norm) h = mx::fast::rms_norm(h, norm->weight, norm->eps);
  h = mx::transpose(h, {0, 2, 1, 3});
  if (per_row) return mx::fast::rope(h, rope.dims, rope.traditional, rope.base, rope.scale, offset, rope.freqs);
  return mx::fast::rope(h, rope.dims, rope.traditional, rope.base, rope.scale, single_offset, rope.freqs);
}

void check(const std::string& what, const mx::array& got, const mx::array& want, mx::Dtype t, int head_dim) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), t) << what;
  const auto g = host(got), w = host(want);
  size_t equal = 0;
  double worst = 0;
  for (size_t head = 0; head < g.size() / head_dim; ++head) {
    double largest = 0;
    for (int i = 0; i < head_dim; ++i) largest = std::max(largest, std::fabs(w[head * head_dim + i]));
    for (int i = 0; i < head_dim; ++i) {
      const size_t at = head * head_dim + i;
      const double bound = ulp(t) * std::fabs(w[at]) + std::ldexp(largest, -22);
      const double err = std::fabs(g[at] - w[at]);
      equal += g[at] == w[at];
      worst = std::max(worst, bound > 0 ? err / bound : err);
      ASSERT_LE(err, bound) << what << " at " << at << ": " << g[at] << " against MLX's " << w[at];
    }
  }
  std::printf("%s: %zu of %zu equal to MLX's, largest error / bound %.3g\n", what.c_str(), equal, g.size(), worst);
}

void run(const Case& c) {
  const auto o = kernel_tests::qk_rope_operands(c);
  auto got = qk_norm_rope(o.q, o.k, c.heads, c.kv_heads, o.q_norm, o.k_norm, o.rope, o.offset);
  ASSERT_TRUE(got.has_value()) << qk_rope_label(c, "declined");
  check(qk_rope_label(c, "queries"), got->first,
        reference(o.q, c.heads, o.q_norm, o.rope, o.offset, c.offsets[0], o.per_row), c.dtype, c.head_dim);
  check(qk_rope_label(c, "keys"), got->second,
        reference(o.k, c.kv_heads, o.k_norm, o.rope, o.offset, c.offsets[0], o.per_row), c.dtype, c.head_dim);
}

bool have_gpu() { return mx::cu::is_available(); }

TEST(QkNormRope, QwenHeadsOneRow) {
  if (!have_gpu()) GTEST_SKIP() << "needs a CUDA device";
  run({mx::bfloat16, 16, 8, 128, 128, 1, 1, true, false, false, {37}});
  run({mx::bfloat16, 32, 8, 128, 128, 1, 1, true, false, false, {4095}});
  run({mx::float16, 16, 8, 128, 128, 1, 1, true, false, false, {0}});
}

TEST(QkNormRope, BatchRowsAtTheirOwnOffsets) {
  if (!have_gpu()) GTEST_SKIP() << "needs a CUDA device";
  run({mx::float16, 32, 8, 64, 64, 4, 1, false, true, false, {0, 5, 100, 3000}});
  run({mx::bfloat16, 16, 4, 128, 64, 2, 2, true, false, false, {7, 1}});
  run({mx::bfloat16, 16, 8, 128, 128, 3, 1, true, false, true, {12, 900, 33}});
}

TEST(QkNormRope, SeveralPositionsFreqsAndWideHeads) {
  if (!have_gpu()) GTEST_SKIP() << "needs a CUDA device";
  run({mx::float32, 8, 4, 256, 256, 1, 3, true, false, true, {11}});
  run({mx::float32, 8, 2, 80, 40, 1, 4, false, false, false, {250}});
  run({mx::bfloat16, 8, 4, 256, 128, 1, 2, true, true, false, {1}});
}

TEST(QkNormRope, DeclinesWhatItDoesNotCompute) {
  if (!have_gpu()) GTEST_SKIP() << "needs a CUDA device";
  auto q = mx::zeros({1, 5, 4 * 64}, mx::bfloat16), k = mx::zeros({1, 5, 2 * 64}, mx::bfloat16);
  const RopeIn rope{64, false, 10000.0f, 1.0f, std::nullopt};
  const auto zero = mx::array(0, mx::int32);
  EXPECT_FALSE(qk_norm_rope(q, k, 4, 2, std::nullopt, std::nullopt, rope, zero)) << "5 rows";
  q = mx::zeros({1, 1, 4 * 64}, mx::bfloat16), k = mx::zeros({1, 1, 2 * 64}, mx::bfloat16);
  EXPECT_TRUE(qk_norm_rope(q, k, 4, 2, std::nullopt, std::nullopt, rope, zero));
  EXPECT_FALSE(qk_norm_rope(q, k, 4, 2, std::nullopt, std::nullopt, {63, false, 10000.0f, 1.0f, std::nullopt}, zero))
      << "odd rotation";
  EXPECT_FALSE(qk_norm_rope(q, mx::zeros({1, 1, 2 * 64}, mx::float16), 4, 2, std::nullopt, std::nullopt, rope, zero))
      << "mixed types";
  const RmsNormIn wrong{mx::ones({64}, mx::float32), 1e-6f};
  EXPECT_FALSE(qk_norm_rope(q, k, 4, 2, wrong, wrong, rope, zero)) << "norm weight of another type";
  EXPECT_FALSE(qk_norm_rope(q, k, 4, 2, std::nullopt, std::nullopt, rope, mx::array({1, 2}, mx::int32)))
      << "two offsets for one row";
  EXPECT_FALSE(qk_norm_rope(q, k, 4, 2, std::nullopt, std::nullopt, rope, mx::array(0.0f))) << "float offset";
}

}  // namespace
}  // namespace mlxrt::kernels::cuda
