// The L3 q/k norms + RoPE kernel (kernels/cuda/qk_rope.h) on the CPU's SIMT runtime, against the
// formula it implements, element by element: which head, row, position and pair each output comes
// from. (tests/gpu/qk_rope_cuda_test.cpp holds it to MLX's own GPU nodes; MLX's CPU RoPE rounds its
// cosines and products to 16 bits, so it is no reference here.)
// q and k are drawn from {±0.5, ±1, ±2}, whose squares sum exactly in float32 in any order, so the
// normalised row is determined exactly (the same float32 operations in the same order). The
// rotation is then checked against float64 products of the rounded row with the cosine and sine of
// the float32 angle the formula defines: within half an ulp of the output type plus 2^-22 of the
// pair's magnitude (the device's float32 cosine, sine and products). A wrong head, row, position,
// pair or frequency is off by far more.
#include <bit>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <mlx/ops.h>
#include <mlx/random.h>
#include <mlx/transforms.h>

#include "kernel_backend.h"
#include "mlxrt/kernels/cuda/qk_rope.h"
#include "qk_rope_case.h"

namespace mlxrt::kernels::cuda {
namespace {

std::vector<float> host(const mx::array& a) {
  auto f = mx::contiguous(mx::astype(a, mx::float32));
  mx::eval(f);
  return {f.data<float>(), f.data<float>() + f.size()};
}

// x rounded to t (float32 arithmetic's result stored in the kernel's type).
float round_to(float x, mx::Dtype t) {
  auto a = mx::astype(mx::astype(mx::array(x), t), mx::float32);
  mx::eval(a);
  return a.item<float>();
}

double half_ulp(mx::Dtype t) {
  return t == mx::bfloat16 ? std::ldexp(1.0, -8) : t == mx::float16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -24);
}

using Case = kernel_tests::QkRopeCase;

// What the kernel must write for x ([B, L, nh * D]) into [B, nh, L, D].
std::vector<double> expected(const Case& c, const std::vector<float>& x, int nh, const std::vector<float>* weight,
                             float eps, const std::vector<float>& freqs, float log2_base, std::vector<double>& bound) {
  const int D = c.head_dim, half = c.rot / 2;
  std::vector<double> out(x.size());
  bound.assign(x.size(), 0.0);
  std::vector<float> row(D);
  for (int b = 0; b < c.batch; ++b)
    for (int l = 0; l < c.length; ++l)
      for (int h = 0; h < nh; ++h) {
        const float* src = &x[((size_t(b) * c.length + l) * nh + h) * D];
        if (weight) {
          float ss = 0.0f;  // exact in any order (see the file's comment)
          for (int i = 0; i < D; ++i) ss += src[i] * src[i];
          const float rs = 1.0f / std::sqrt(ss / static_cast<float>(D) + eps);
          for (int i = 0; i < D; ++i) row[i] = round_to((*weight)[i] * round_to(src[i] * rs, c.dtype), c.dtype);
        } else {
          for (int i = 0; i < D; ++i) row[i] = src[i];
        }
        const int pos = c.offsets[c.offsets.size() > 1 ? b : 0] + l;
        double* dst = &out[((size_t(b) * nh + h) * c.length + l) * D];
        double* tol = &bound[((size_t(b) * nh + h) * c.length + l) * D];
        for (int j = 0; j < half; ++j) {
          const float inv = c.freqs ? static_cast<float>(1.0 / freqs[j])
                                    : std::exp2(-(static_cast<float>(j) / static_cast<float>(half)) * log2_base);
          const float theta = static_cast<float>(pos) * inv;
          const int i1 = c.traditional ? 2 * j : j, i2 = c.traditional ? 2 * j + 1 : j + half;
          const double cs = std::cos(double(theta)), sn = std::sin(double(theta));
          dst[i1] = row[i1] * cs - row[i2] * sn;
          dst[i2] = row[i1] * sn + row[i2] * cs;
          const double mag = std::ldexp(std::fabs(row[i1]) + std::fabs(row[i2]), -22);
          tol[i1] = half_ulp(c.dtype) * std::fabs(dst[i1]) + mag;
          tol[i2] = half_ulp(c.dtype) * std::fabs(dst[i2]) + mag;
        }
        for (int i = c.rot; i < D; ++i) dst[i] = row[i];  // exact copies
      }
  return out;
}

void check(const std::string& what, const mx::array& got, const std::vector<double>& want,
           const std::vector<double>& bound) {
  const auto g = host(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::fabs(g[i] - want[i]);
    ASSERT_LE(err, bound[i]) << what << " at " << i << ": " << g[i] << " against " << want[i];
    if (bound[i] > 0) worst = std::max(worst, err / bound[i]);
  }
  std::printf("%s: largest error / bound %.3g\n", what.c_str(), worst);
}

void run(const Case& c) {
  const auto o = kernel_tests::qk_rope_operands(c);
  const auto launch = qk_norm_rope_launch(o.q, o.k, c.heads, c.kv_heads, o.q_norm, o.k_norm, o.rope, o.offset);
  const auto what = kernel_tests::qk_rope_label(c, "emulated");
  ASSERT_TRUE(launch.has_value()) << what << ": declined";
  const auto got = kernel_tests::run(*launch);
  ASSERT_EQ(got[0].shape(), (mx::Shape{c.batch, c.heads, c.length, c.head_dim}));
  ASSERT_EQ(got[1].shape(), (mx::Shape{c.batch, c.kv_heads, c.length, c.head_dim}));
  const float log2_base = o.rope.base ? std::log2(*o.rope.base) : 0.0f;
  const auto freqs = o.rope.freqs ? host(*o.rope.freqs) : std::vector<float>{};
  std::vector<float> qw, kw;
  if (c.norm) {
    qw = host(o.q_norm->weight);
    kw = host(o.k_norm->weight);
  }
  std::vector<double> bound;
  auto want = expected(c, host(o.q), c.heads, c.norm ? &qw : nullptr, o.q_norm ? o.q_norm->eps : 0.0f, freqs,
                       log2_base, bound);
  check(what + " queries", got[0], want, bound);
  want = expected(c, host(o.k), c.kv_heads, c.norm ? &kw : nullptr, o.k_norm ? o.k_norm->eps : 0.0f, freqs,
                  log2_base, bound);
  check(what + " keys", got[1], want, bound);
}

class QkNormRopeEmulated : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(kernel_tests::use_kernel_device()); }
};

TEST_F(QkNormRopeEmulated, QwenHeadsOneRow) {
  run({mx::bfloat16, 16, 8, 128, 128, 1, 1, true, false, false, {37}});
  run({mx::float16, 16, 8, 128, 128, 1, 1, true, false, false, {0}});
}

TEST_F(QkNormRopeEmulated, BatchRowsAtTheirOwnOffsets) {
  run({mx::float16, 8, 4, 64, 64, 4, 1, false, true, false, {0, 5, 100, 3000}});
  run({mx::bfloat16, 8, 4, 128, 64, 2, 2, true, false, false, {7, 1}});
  run({mx::bfloat16, 4, 2, 128, 128, 3, 1, true, false, true, {12, 900, 33}});
}

TEST_F(QkNormRopeEmulated, SeveralPositionsFreqsAndWideOrOddHeads) {
  run({mx::float32, 4, 2, 256, 256, 1, 3, true, false, true, {11}});
  run({mx::float32, 4, 2, 80, 40, 1, 4, false, false, false, {250}});
  run({mx::bfloat16, 4, 2, 256, 128, 1, 2, true, true, false, {1}});
}

TEST_F(QkNormRopeEmulated, DeclinesWhatItDoesNotCompute) {
  auto q = mx::zeros({1, 5, 4 * 64}, mx::bfloat16), k = mx::zeros({1, 5, 2 * 64}, mx::bfloat16);
  const RopeIn rope{64, false, 10000.0f, 1.0f, std::nullopt};
  const auto zero = mx::array(0, mx::int32);
  EXPECT_FALSE(qk_norm_rope_launch(q, k, 4, 2, std::nullopt, std::nullopt, rope, zero)) << "5 rows";
  q = mx::zeros({1, 1, 4 * 64}, mx::bfloat16), k = mx::zeros({1, 1, 2 * 64}, mx::bfloat16);
  EXPECT_TRUE(qk_norm_rope_launch(q, k, 4, 2, std::nullopt, std::nullopt, rope, zero));
  EXPECT_FALSE(qk_norm_rope(q, k, 4, 2, std::nullopt, std::nullopt, rope, zero)) << "not on a CUDA GPU";
  EXPECT_FALSE(qk_norm_rope_launch(q, k, 4, 2, std::nullopt, std::nullopt, {63, false, 10000.0f, 1.0f, std::nullopt},
                                   zero))
      << "odd rotation";
  const RmsNormIn wrong{mx::ones({64}, mx::float32), 1e-6f};
  EXPECT_FALSE(qk_norm_rope_launch(q, k, 4, 2, wrong, wrong, rope, zero)) << "norm weight of another type";
}

}  // namespace
}  // namespace mlxrt::kernels::cuda
