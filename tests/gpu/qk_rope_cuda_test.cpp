// The L3 q/k norms + RoPE kernel (kernels/cuda/qk_rope.h) against MLX's own nodes: per-head
// mx.fast.rms_norm, the transpose to [B, heads, L, D], mx.fast.rope, run on the CPU (the reference)
// and on the GPU (the L1 path, whose bytes the kernel is meant to give). q and k are drawn from
// {±0.5, ±1, ±2}, whose squares sum exactly in float32 in any order, so the kernel's norm gives
// MLX's bytes. Each rotated output may differ from the CPU's by one rounding of the output type
// plus what the CPU's own cos, sin and frequencies change (relative float32 errors of the angle,
// at most a few ulps of position x frequency, times the head's largest value). A wrong head, row,
// position or pair is off by far more. How many outputs equal MLX's GPU bytes is printed; MLX's
// CUDA RoPE is off its CPU RoPE in one of these cases (a partial rotation of two rows of two
// positions at their own offsets), which is printed too. Needs a CUDA device.
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

namespace mlxrt::kernels::cuda {
namespace {

// In row-major order: MLX keeps a transposed array's layout through astype (the reference's RoPE
// output is [B, L, heads, D] in memory, [B, heads, L, D] in shape).
std::vector<double> host(const mx::array& a) {
  auto f = mx::contiguous(mx::astype(a, mx::float32));
  mx::eval(f);
  return {f.data<float>(), f.data<float>() + f.size()};
}

double ulp(mx::Dtype t) { return t == mx::bfloat16 ? std::ldexp(1.0, -7) : t == mx::float16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -23); }

// [B, L, n] with values in {±0.5, ±1, ±2}.
mx::array exact_square(mx::array key, int b, int l, int n, mx::Dtype t) {
  auto keys = mx::random::split(key);
  auto mag = mx::power(mx::array(2.0f), mx::astype(mx::random::randint(-1, 2, {b, l, n}, mx::int32, keys.first), mx::float32));
  auto sign = mx::where(mx::random::bernoulli(mx::array(0.5f), {b, l, n}, keys.second), mx::array(1.0f), mx::array(-1.0f));
  auto x = mx::astype(mx::multiply(mag, sign), t);
  mx::eval(x);
  return x;
}

struct Case {
  mx::Dtype dtype;
  int heads, kv_heads, head_dim, rot;
  int batch, length;
  bool norm, traditional, freqs;
  std::vector<int> offsets;  // one, or one per batch row
};

// MLX's nodes as the decoder runs them at L1 (split_projected, then rope_and_update_cache's RoPE)
// on device d.
mx::array reference(const mx::array& x, int heads, const std::optional<RmsNormIn>& norm, const RopeIn& rope,
                    const mx::array& offset, int single_offset, bool per_row, mx::Device d) {
  const int b = x.shape(0), l = x.shape(1);
  auto h = mx::reshape(x, {b, l, heads, -1}, d);
  if (norm) h = mx::fast::rms_norm(h, norm->weight, norm->eps, d);
  h = mx::transpose(h, {0, 2, 1, 3}, d);
  if (per_row) return mx::fast::rope(h, rope.dims, rope.traditional, rope.base, rope.scale, offset, rope.freqs, d);
  return mx::fast::rope(h, rope.dims, rope.traditional, rope.base, rope.scale, single_offset, rope.freqs, d);
}

// Outputs of `a` off `ref` (the CPU's) beyond the bound the header derives; the first one in `first`.
size_t off_bound(const std::vector<double>& a, const std::vector<double>& ref, mx::Dtype t, int head_dim,
                 int max_position, std::string& first) {
  size_t n = 0;
  for (size_t head = 0; head < a.size() / head_dim; ++head) {
    double largest = 0;
    for (int i = 0; i < head_dim; ++i) largest = std::max(largest, std::fabs(ref[head * head_dim + i]));
    const double angle = std::ldexp(1.0, -22) + std::ldexp(static_cast<double>(max_position), -21);
    for (int i = 0; i < head_dim; ++i) {
      const size_t at = head * head_dim + i;
      if (std::fabs(a[at] - ref[at]) <= ulp(t) * std::fabs(ref[at]) + angle * largest) continue;
      if (n++ == 0)
        first = "at " + std::to_string(at) + ": " + std::to_string(a[at]) + " against " + std::to_string(ref[at]);
    }
  }
  return n;
}

void check(const std::string& what, const mx::array& got, const mx::array& cpu, const mx::array& gpu, mx::Dtype t,
           int head_dim, int max_position) {
  ASSERT_EQ(got.shape(), cpu.shape()) << what;
  ASSERT_EQ(got.dtype(), t) << what;
  const auto g = host(got), c = host(cpu), m = host(gpu);
  std::string first;
  EXPECT_EQ(off_bound(g, c, t, head_dim, max_position, first), 0u) << what << ", against MLX's CPU " << first;
  size_t equal = 0;
  for (size_t i = 0; i < g.size(); ++i) equal += g[i] == m[i];
  std::printf("%s: %zu of %zu equal to MLX's GPU bytes\n", what.c_str(), equal, g.size());
  std::string mlx_first;
  if (const size_t n = off_bound(m, c, t, head_dim, max_position, mlx_first))
    std::printf("%s: MLX's CUDA RoPE itself is off its CPU RoPE at %zu of %zu (first %s)\n", what.c_str(), n,
                m.size(), mlx_first.c_str());
}

std::string label(const Case& c, const char* part) {
  char text[200];
  std::snprintf(text, sizeof text, "%s %s heads %d/%d of %d rot %d rows %dx%d%s%s%s offsets %zu", part,
                c.dtype == mx::bfloat16 ? "bfloat16" : c.dtype == mx::float16 ? "float16" : "float32", c.heads,
                c.kv_heads, c.head_dim, c.rot, c.batch, c.length, c.norm ? " norm" : "",
                c.traditional ? " traditional" : "", c.freqs ? " freqs" : "", c.offsets.size());
  return text;
}

void run(const Case& c) {
  auto key = mx::random::key(c.heads * 131 + c.head_dim * 7 + c.batch * 3 + c.length);
  auto next = [&key] {
    auto parts = mx::random::split(key);
    key = parts.first;
    return parts.second;
  };
  const auto q = exact_square(next(), c.batch, c.length, c.heads * c.head_dim, c.dtype);
  const auto k = exact_square(next(), c.batch, c.length, c.kv_heads * c.head_dim, c.dtype);
  std::optional<RmsNormIn> q_norm, k_norm;
  if (c.norm) {
    // Weights of the type, near 1 as a trained norm's (any value: the product is rounded once).
    auto qw = mx::astype(mx::add(mx::array(1.0f), mx::multiply(mx::random::normal({c.head_dim}, mx::float32, next()),
                                                                mx::array(0.1f))), c.dtype);
    auto kw = mx::astype(mx::add(mx::array(1.0f), mx::multiply(mx::random::normal({c.head_dim}, mx::float32, next()),
                                                                mx::array(0.1f))), c.dtype);
    mx::eval({qw, kw});
    q_norm = RmsNormIn{qw, 1e-6f};
    k_norm = RmsNormIn{kw, 1e-5f};
  }
  RopeIn rope{c.rot, c.traditional, std::nullopt, 1.0f, std::nullopt};
  if (c.freqs) {
    // llama3-style frequencies: base^(2i / dims), some stretched.
    auto i = mx::astype(mx::arange(0, c.rot, 2), mx::float32);
    auto f = mx::power(mx::array(500000.0f), mx::divide(i, mx::array(static_cast<float>(c.rot))));
    f = mx::where(mx::greater(i, mx::array(c.rot / 2.0f)), mx::multiply(f, mx::array(8.0f)), f);
    mx::eval(f);
    rope.freqs = f;
  } else {
    rope.base = 1000000.0f;
  }
  const bool per_row = c.offsets.size() > 1;
  const auto offset = per_row ? mx::array(c.offsets.data(), {static_cast<int>(c.offsets.size())}, mx::int32)
                              : mx::array(c.offsets[0], mx::int32);
  auto got = qk_norm_rope(q, k, c.heads, c.kv_heads, q_norm, k_norm, rope, offset);
  ASSERT_TRUE(got.has_value()) << label(c, "declined");
  const int max_position = *std::max_element(c.offsets.begin(), c.offsets.end()) + c.length;
  for (const bool queries : {true, false}) {
    const auto& x = queries ? q : k;
    const int heads = queries ? c.heads : c.kv_heads;
    const auto& norm = queries ? q_norm : k_norm;
    check(label(c, queries ? "queries" : "keys"), queries ? got->first : got->second,
          reference(x, heads, norm, rope, offset, c.offsets[0], per_row, mx::Device::cpu),
          reference(x, heads, norm, rope, offset, c.offsets[0], per_row, mx::Device::gpu), c.dtype, c.head_dim,
          max_position);
  }
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
  // Left-padded rows start below zero, as mlx-lm's BatchKVCache offsets do.
  run({mx::float16, 32, 8, 64, 64, 4, 1, false, true, false, {0, 5, 100, 3000}});
  run({mx::bfloat16, 16, 4, 128, 64, 2, 2, true, false, false, {7, -2}});
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
