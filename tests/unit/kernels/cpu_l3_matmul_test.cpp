// The L3 quantized matmul against its definition (l3_qmm_args.h), written out here as scalar code:
// the same bits from the AVX-512 VNNI and the AVX2 kernels (on aarch64: NEON with and without the
// dot product), for every element type, bit width and group size, ragged shapes (a partial tile,
// blocks that do not fill a vector), any batch of rows
// (a row's output does not depend on the rows beside it) and thread count. And how far it is from
// L1 (MLX's quantized_matmul) on random data: near, which says the definition is the right one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <mlx/mlx.h>
#include <mlx/primitives.h>

#include "mlxrt/kernels/cpu/l3_fused.h"
#include "mlxrt/kernels/cpu/l3_matmul.h"
#include "mlxrt/kernels/cpu/l3_qmm_args.h"
#include "mlxrt/kernels/cpu/matmul.h"
#include "matmul_case.h"

namespace mx = mlx::core;
using mlxrt::kernels::cpu::CpuKernels;
using mlxrt::kernels::test::bytes_of;
using mlxrt::kernels::test::Case;
using mlxrt::kernels::test::describe;
using mlxrt::kernels::test::floats_of;

namespace {

// The definition, one output at a time, in float32 as rounded to the output type by MLX.
mx::array reference(const Case& c, const mx::array& x, const mx::array& w, const mx::array& scales,
                    const mx::array& biases, mx::Dtype out_type) {
  const auto xv = floats_of(x), sv = floats_of(scales), bv = floats_of(biases);
  auto wq = mx::contiguous(w);
  mx::eval(wq);
  const uint32_t* words = wq.data<uint32_t>();
  const int per_word = 32 / c.bits, words_per_row = c.k / per_word, blocks = c.k / 32, groups = c.k / c.group;
  std::vector<float> out(static_cast<size_t>(c.rows) * c.n);
  // One int8 level of 32 values: d and the levels; returns their sum.
  auto level = [](const float* v, int* q, float& d) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[i]));
    d = amax / 127.0f;
    const float inverse = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      q[i] = static_cast<int>(std::clamp(std::nearbyint(v[i] * inverse), -127.0f, 127.0f));
      sum += q[i];
    }
    return sum;
  };
  for (int r = 0; r < c.rows; ++r) {
    // x = d1 * x1 + d2 * x2 per block of 32.
    std::vector<int> x1(static_cast<size_t>(c.k)), x2(static_cast<size_t>(c.k));
    std::vector<float> d1(static_cast<size_t>(blocks)), d2(static_cast<size_t>(blocks));
    std::vector<int> sum1(static_cast<size_t>(blocks)), sum2(static_cast<size_t>(blocks));
    for (int b = 0; b < blocks; ++b) {
      const float* v = xv.data() + static_cast<size_t>(r) * c.k + b * 32;
      sum1[b] = level(v, x1.data() + b * 32, d1[b]);
      float rest[32];
      for (int i = 0; i < 32; ++i) {
        const float approx = d1[b] * static_cast<float>(x1[b * 32 + i]);
        rest[i] = v[i] - approx;
      }
      sum2[b] = level(rest, x2.data() + b * 32, d2[b]);
    }
    for (int n = 0; n < c.n; ++n) {
      float acc = 0.0f, bacc = 0.0f;
      for (int b = 0; b < blocks; ++b) {
        int i1 = 0, i2 = 0;
        for (int i = 0; i < 32; ++i) {
          const int kk = b * 32 + i;
          const uint32_t word = words[static_cast<size_t>(n) * words_per_row + kk / per_word];
          const int q = static_cast<int>((word >> ((kk % per_word) * c.bits)) & ((1u << c.bits) - 1u));
          i1 += q * x1[kk];
          i2 += q * x2[kk];
        }
        const float scale = sv[static_cast<size_t>(n) * groups + b * 32 / c.group];
        acc = std::fma(static_cast<float>(i1), scale * d1[b], acc);
        acc = std::fma(static_cast<float>(i2), scale * d2[b], acc);
      }
      for (int g = 0; g < groups; ++g) {
        float xs = 0.0f;
        for (int b = g * c.group / 32; b < (g + 1) * c.group / 32; ++b) {
          const float t1 = d1[b] * static_cast<float>(sum1[b]);
          xs = xs + t1;
          const float t2 = d2[b] * static_cast<float>(sum2[b]);
          xs = xs + t2;
        }
        bacc = std::fma(bv[static_cast<size_t>(n) * groups + g], xs, bacc);
      }
      out[static_cast<size_t>(r) * c.n + n] = acc + bacc;
    }
  }
  // float32 -> the output type: MLX's conversions (round to nearest even) are the definition's.
  return mx::astype(mx::array(out.data(), {c.rows, c.n}, mx::float32), out_type);
}

struct Inputs {
  mx::array x, w, scales, biases;
};

Inputs make_inputs(const Case& c, uint64_t seed) {
  auto w_float = mx::random::normal({c.n, c.k}, mx::float32, 0.0f, 0.05f, mx::random::key(seed + 1));
  auto q = mx::quantize(mx::astype(w_float, c.dtype), c.group, c.bits);
  auto x = mx::astype(mx::random::normal({c.rows, c.k}, mx::float32, 0.0f, 1.0f, mx::random::key(seed)), c.dtype);
  return {x, q[0], q[1], q[2]};
}

mx::array l3(const std::shared_ptr<CpuKernels>& kernels, const Case& c, const Inputs& in) {
  auto packed = mlxrt::kernels::cpu::l3_pack(kernels, in.w, in.scales, in.biases, c.group, c.bits, "affine");
  EXPECT_TRUE(packed.has_value()) << describe(c);
  return mlxrt::kernels::cpu::l3_quantized_matmul(kernels, in.x, *packed, c.n, c.k, c.group, c.bits, c.dtype);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (auto dtype : {mx::float32, mx::bfloat16, mx::float16})
    for (int bits : {4, 8})
      for (int group : {32, 64, 128}) {
        out.push_back({1, 64, group * 2, bits, group, dtype});
        out.push_back({3, 40, group * 3, bits, group, dtype});
        out.push_back({9, 130, group, bits, group, dtype});
      }
  return out;
}

TEST(L3QuantizedMatmul, MatchesItsDefinitionOnBothInstructionSets) {
  auto avx512 = CpuKernels::create(3, true, true);
  auto avx2 = CpuKernels::create(2, false, true);
  if (!avx2) GTEST_SKIP() << "no L3 kernels on this CPU (they need AVX2, FMA and F16C)";
  uint64_t seed = 11;
  for (const auto& c : cases()) {
    const auto in = make_inputs(c, seed++);
    const auto want = bytes_of(reference(c, in.x, in.w, in.scales, in.biases, c.dtype));
    EXPECT_EQ(bytes_of(l3(avx2, c, in)), want) << avx2->l3_instruction_set() << ", " << describe(c);
    if (avx512 && avx512->vnni()) {
      EXPECT_EQ(bytes_of(l3(avx512, c, in)), want) << avx512->l3_instruction_set() << ", " << describe(c);
    }
  }
}

TEST(L3QuantizedMatmul, ARowsOutputDoesNotDependOnTheBatch) {
  auto kernels = CpuKernels::create(2, true, true);
  if (!kernels) GTEST_SKIP() << "no L3 kernels on this CPU";
  const Case c{70, 72, 256, 4, 64, mx::bfloat16};  // more than one unit of rows, a partial tile
  const auto in = make_inputs(c, 5);
  const auto all = bytes_of(l3(kernels, c, in));
  const size_t row_bytes = static_cast<size_t>(c.n) * 2;
  for (int r : {0, 3, 4, 65, 69}) {
    Case one = c;
    one.rows = 1;
    Inputs single = in;
    single.x = mx::slice(in.x, {r, 0}, {r + 1, c.k});
    const auto got = bytes_of(l3(kernels, one, single));
    EXPECT_EQ(got, std::vector<char>(all.begin() + static_cast<long>(r * row_bytes),
                                     all.begin() + static_cast<long>((r + 1) * row_bytes)))
        << "row " << r;
  }
}

TEST(L3QuantizedMatmul, IsCloseToL1) {
  auto kernels = CpuKernels::create(2, true, true);
  if (!kernels) GTEST_SKIP() << "no L3 kernels on this CPU";
  for (int bits : {4, 8}) {
    const Case c{4, 256, 512, bits, 64, mx::float32};
    const auto in = make_inputs(c, 21);
    const auto ours = floats_of(l3(kernels, c, in));
    const auto l1 = floats_of(mx::quantized_matmul(in.x, in.w, in.scales, in.biases, true, c.group, c.bits, "affine"));
    double err = 0.0, norm = 0.0;
    for (size_t i = 0; i < ours.size(); ++i) {
      err += (ours[i] - l1[i]) * (ours[i] - l1[i]);
      norm += l1[i] * l1[i];
    }
    // Two int8 levels of x: a relative error of about 1/32000 per block, averaged down over k.
    EXPECT_LT(std::sqrt(err / norm), 2e-4) << "bits " << bits;
    EXPECT_GT(std::sqrt(err / norm), 0.0) << "bits " << bits << ": identical to L1, so L3 did not run";
  }
}

TEST(L3QuantizedMatmul, PacksOnlyWhatItComputes) {
  auto kernels = CpuKernels::create(1, true, true);
  if (!kernels) GTEST_SKIP() << "no L3 kernels on this CPU";
  auto q = mx::quantize(mx::zeros({16, 64}, mx::float32), 64, 2);
  EXPECT_FALSE(mlxrt::kernels::cpu::l3_pack(kernels, q[0], q[1], q[2], 64, 2, "affine").has_value()) << "2 bits";
  auto q4 = mx::quantize(mx::zeros({16, 64}, mx::float32), 64, 4);
  EXPECT_FALSE(mlxrt::kernels::cpu::l3_pack(kernels, q4[0], q4[1], std::nullopt, 64, 4, "affine").has_value())
      << "no biases";
  auto l1_only = CpuKernels::create(1, true, false);
  EXPECT_FALSE(mlxrt::kernels::cpu::l3_pack(l1_only, q4[0], q4[1], q4[2], 64, 4, "affine").has_value())
      << "kernels without l3";
  EXPECT_TRUE(mlxrt::kernels::cpu::l3_pack(kernels, q4[0], q4[1], q4[2], 64, 4, "affine").has_value());
}

}  // namespace

namespace {

double max_relative(const mx::array& got, const mx::array& want) {
  const auto g = floats_of(got), w = floats_of(want);
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < g.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(g[i]) - w[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(w[i])));
  }
  return err / std::max(scale, 1e-30);
}

// The generation step's log-probabilities at L3: MLX's within float rounding over a vocabulary-sized
// row (and a short one: the tail past the last vector), MLX's NaN and infinity rules, and not taken
// for other types or without L3.
TEST(L3FusedOps, LogSoftmaxIsMlxsWithinFloatRounding) {
  auto kernels = CpuKernels::create(1, true, true);
  if (!kernels) GTEST_SKIP() << "no L3 kernels on this CPU";
  for (int n : {49152, 13}) {
    auto x = mx::multiply(mx::random::normal({2, n}, mx::float32, 0.0f, 1.0f, mx::random::key(23)), mx::array(4.0f));
    auto ours = mlxrt::kernels::cpu::log_softmax(kernels, x);
    ASSERT_TRUE(ours.has_value());
    EXPECT_STREQ(ours->primitive().name(), "L3LogSoftmax");
    auto want = mx::subtract(x, mx::logsumexp(x, -1, true));
    EXPECT_LT(max_relative(*ours, want), 1e-5) << "n " << n;
  }
  auto special = mx::array({1.0f, NAN, 2.0f, -INFINITY, -INFINITY, -INFINITY, 0.5f, INFINITY, -INFINITY}, {3, 3});
  auto ours = mlxrt::kernels::cpu::log_softmax(kernels, special);
  ASSERT_TRUE(ours.has_value());
  auto want = mx::subtract(special, mx::logsumexp(special, -1, true));
  mx::eval(*ours, want);
  for (int i = 0; i < 9; ++i) {
    const float a = ours->data<float>()[i], b = want.data<float>()[i];
    EXPECT_TRUE((std::isnan(a) && std::isnan(b)) || a == b) << "element " << i << ": " << a << " against " << b;
  }
  EXPECT_FALSE(mlxrt::kernels::cpu::log_softmax(kernels, mx::zeros({1, 8}, mx::bfloat16)).has_value());
  EXPECT_FALSE(mlxrt::kernels::cpu::log_softmax(CpuKernels::create(1, true, false), mx::zeros({1, 8})).has_value());
}

// The fused L3 ops stand in for MLX's: close to them (float32 arithmetic, rounded once), never
// MLX's node, and not used without L3.
TEST(L3FusedOps, AttentionIsMlxsWithinFloatRounding) {
  auto kernels = CpuKernels::create(2, true, true);
  if (!kernels) GTEST_SKIP() << "no L3 kernels on this CPU";
  struct Shape {
    int hq, hkv, lq, lk, d;
    bool causal;
  };
  for (auto dtype : {mx::float32, mx::bfloat16, mx::float16})
    for (const Shape& s : {Shape{9, 3, 1, 37, 64, false}, Shape{4, 4, 21, 21, 128, true}, Shape{6, 2, 5, 70, 64, true}}) {
      auto key = mx::random::key(7);
      auto q = mx::astype(mx::random::normal({2, s.lq, s.hq, s.d}, mx::float32, 0.0f, 1.0f, key), dtype);
      q = mx::transpose(q, {0, 2, 1, 3});  // strided, as the projections' split heads are
      // Keys and values: the first lk positions of a longer cache buffer.
      auto k = mx::astype(mx::random::normal({2, s.hkv, s.lk + 9, s.d}, mx::float32, 0.0f, 1.0f, mx::random::key(8)), dtype);
      auto v = mx::astype(mx::random::normal({2, s.hkv, s.lk + 9, s.d}, mx::float32, 0.0f, 1.0f, mx::random::key(9)), dtype);
      k = mx::slice(k, {0, 0, 0, 0}, {2, s.hkv, s.lk, s.d});
      v = mx::slice(v, {0, 0, 0, 0}, {2, s.hkv, s.lk, s.d});
      const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
      auto ours = mlxrt::kernels::cpu::attention(kernels, q, k, v, scale, s.causal);
      ASSERT_TRUE(ours.has_value());
      EXPECT_STREQ(ours->primitive().name(), "L3Attention");
      auto want = mx::fast::scaled_dot_product_attention(mx::astype(q, mx::float32), mx::astype(k, mx::float32),
                                                         mx::astype(v, mx::float32), scale, s.causal ? "causal" : "");
      const double tolerance = dtype == mx::float32 ? 1e-5 : dtype == mx::float16 ? 2e-3 : 1e-2;
      EXPECT_LT(max_relative(*ours, want), tolerance) << "hq " << s.hq << " lq " << s.lq << " lk " << s.lk;
    }
  // float32 queries over a float16 cache (an L3 KV cache of a float32 model): the keys and values
  // read exactly, so only the float32 sums' order differs from MLX's over their float32 copies.
  for (const Shape& s : {Shape{9, 3, 1, 37, 64, false}, Shape{6, 2, 5, 70, 64, true}}) {
    auto q = mx::transpose(mx::random::normal({1, s.lq, s.hq, s.d}, mx::float32, 0.0f, 1.0f, mx::random::key(17)),
                           {0, 2, 1, 3});
    auto k = mx::astype(mx::random::normal({1, s.hkv, s.lk, s.d}, mx::float32, 0.0f, 1.0f, mx::random::key(18)), mx::float16);
    auto v = mx::astype(mx::random::normal({1, s.hkv, s.lk, s.d}, mx::float32, 0.0f, 1.0f, mx::random::key(19)), mx::float16);
    auto ours = mlxrt::kernels::cpu::attention(kernels, q, k, v, 0.125f, s.causal);
    ASSERT_TRUE(ours.has_value());
    EXPECT_EQ(ours->dtype(), mx::float32);
    auto want = mx::fast::scaled_dot_product_attention(q, mx::astype(k, mx::float32), mx::astype(v, mx::float32), 0.125f,
                                                       s.causal ? "causal" : "");
    EXPECT_LT(max_relative(*ours, want), 1e-5) << "float16 cache, hq " << s.hq << " lq " << s.lq;
  }
  EXPECT_FALSE(mlxrt::kernels::cpu::attention(kernels, mx::zeros({1, 2, 1, 64}, mx::bfloat16),
                                              mx::zeros({1, 2, 1, 64}, mx::float16), mx::zeros({1, 2, 1, 64}, mx::float16),
                                              1.0f, false)
                   .has_value())
      << "a float16 cache under queries of another type than float32";
  auto l1_only = CpuKernels::create(1, true, false);
  auto q = mx::zeros({1, 2, 1, 64});
  EXPECT_FALSE(mlxrt::kernels::cpu::attention(l1_only, q, q, q, 1.0f, false).has_value());
  EXPECT_FALSE(mlxrt::kernels::cpu::attention(kernels, mx::zeros({1, 2, 1, 60}), mx::zeros({1, 2, 1, 60}),
                                              mx::zeros({1, 2, 1, 60}), 1.0f, false)
                   .has_value())
      << "a head dimension that is not a multiple of 8";
}

TEST(L3FusedOps, RmsNormRopeAndSwigluAreMlxsWithinFloatRounding) {
  auto kernels = CpuKernels::create(2, true, true);
  if (!kernels) GTEST_SKIP() << "no L3 kernels on this CPU";
  for (auto dtype : {mx::float32, mx::bfloat16, mx::float16}) {
    auto x = mx::astype(mx::random::normal({3, 5, 96}, mx::float32, 0.0f, 2.0f, mx::random::key(3)), dtype);
    auto w = mx::astype(mx::random::normal({96}, mx::float32, 1.0f, 0.1f, mx::random::key(4)), dtype);
    auto ours = mlxrt::kernels::cpu::rms_norm(kernels, x, w, 1e-5f);
    EXPECT_STREQ(ours.primitive().name(), "L3RmsNorm");
    const double tolerance = dtype == mx::float32 ? 1e-5 : dtype == mx::float16 ? 2e-3 : 1.6e-2;
    EXPECT_LT(max_relative(ours, mx::fast::rms_norm(x, w, 1e-5f)), tolerance);
    auto heads = mx::transpose(mx::reshape(x, {3, 5, 3, 32}), {0, 2, 1, 3});
    for (bool traditional : {false, true}) {
      auto rope = mlxrt::kernels::cpu::rope(kernels, heads, 24, traditional, 10000.0f, 1.0f, 17, std::nullopt);
      EXPECT_STREQ(rope.primitive().name(), "L3Rope");
      auto want = mx::fast::rope(heads, 24, traditional, 10000.0f, 1.0f, 17);
      EXPECT_LT(max_relative(rope, want), tolerance) << "traditional " << traditional;
    }
    auto freqs = mx::array({1.0f, 3.0f, 9.0f, 27.0f, 81.0f, 243.0f});
    auto rope = mlxrt::kernels::cpu::rope(kernels, heads, 12, false, std::nullopt, 0.5f, 3, freqs);
    EXPECT_LT(max_relative(rope, mx::fast::rope(heads, 12, false, std::nullopt, 0.5f, 3, freqs)), tolerance);
  }
  for (auto dtype : {mx::float32, mx::bfloat16, mx::float16}) {
    // 3 x 7 x 13 elements: a tail that does not fill a vector; values far into both tails of exp.
    auto g = mx::astype(mx::random::normal({3, 7, 13}, mx::float32, 0.0f, 6.0f, mx::random::key(5)), dtype);
    auto u = mx::astype(mx::random::normal({3, 7, 13}, mx::float32, 0.0f, 1.0f, mx::random::key(6)), dtype);
    auto ours = mlxrt::kernels::cpu::swiglu(kernels, g, u);
    ASSERT_TRUE(ours.has_value());
    EXPECT_STREQ(ours->primitive().name(), "L3Swiglu");
    auto g32 = mx::astype(g, mx::float32);
    auto want = mx::multiply(mx::multiply(g32, mx::sigmoid(g32)), mx::astype(u, mx::float32));
    const double tolerance = dtype == mx::float32 ? 1e-5 : dtype == mx::float16 ? 2e-3 : 1.6e-2;
    EXPECT_LT(max_relative(*ours, want), tolerance);
  }
  auto l1_only = CpuKernels::create(1, true, false);
  EXPECT_FALSE(mlxrt::kernels::cpu::swiglu(l1_only, mx::ones({8}), mx::ones({8})).has_value());
  auto x = mx::ones({2, 8});
  EXPECT_STRNE(mlxrt::kernels::cpu::rms_norm(l1_only, x, mx::ones({8}), 1e-5f).primitive().name(), "L3RmsNorm");
}

}  // namespace

namespace {

// The experts' product computes each (token, expert) block as the plain L3 product of that
// expert's matrix computes it: the same bits, for sorted and unsorted indices.
TEST(L3QuantizedMatmul, GatheredExpertsAreEachExpertsProduct) {
  auto kernels = CpuKernels::create(2, true, true);
  if (!kernels) GTEST_SKIP() << "no L3 kernels on this CPU";
  const int experts = 5, n = 40, k = 128, tokens = 6, top = 2;
  for (int bits : {4, 8}) {
    auto w_float = mx::random::normal({experts, n, k}, mx::float32, 0.0f, 0.05f, mx::random::key(31));
    auto q = mx::quantize(mx::astype(w_float, mx::bfloat16), 64, bits);
    auto packed = mlxrt::kernels::cpu::l3_pack(kernels, q[0], q[1], q[2], 64, bits, "affine");
    ASSERT_TRUE(packed.has_value());
    auto x = mx::astype(mx::random::normal({tokens, 1, 1, k}, mx::float32, 0.0f, 1.0f, mx::random::key(32)), mx::bfloat16);
    auto indices = mx::array({0, 3, 4, 1, 2, 2, 3, 0, 1, 4, 4, 3}, {tokens, top}, mx::uint32);
    auto ours = mlxrt::kernels::cpu::l3_gather_qmm(kernels, x, q[0], q[1], q[2], *packed, indices, 64, bits, false);
    ASSERT_TRUE(ours.has_value());
    EXPECT_STREQ(ours->primitive().name(), "L3GatherQuantizedMatmul");
    ASSERT_EQ(ours->shape(), (mx::Shape{tokens, top, 1, n}));
    mx::eval(*ours, indices);
    const auto got = bytes_of(*ours);
    const auto* ids = indices.data<uint32_t>();
    for (int t = 0; t < tokens; ++t)
      for (int j = 0; j < top; ++j) {
        const int e = static_cast<int>(ids[t * top + j]);
        auto one = mlxrt::kernels::cpu::l3_pack(kernels, mx::squeeze(mx::slice(q[0], {e, 0, 0}, {e + 1, n, k * bits / 32}), 0),
                                                mx::squeeze(mx::slice(q[1], {e, 0, 0}, {e + 1, n, k / 64}), 0),
                                                mx::squeeze(mx::slice(q[2], {e, 0, 0}, {e + 1, n, k / 64}), 0), 64, bits, "affine");
        auto row = mx::reshape(mx::slice(x, {t, 0, 0, 0}, {t + 1, 1, 1, k}), {1, k});
        const auto want = bytes_of(mlxrt::kernels::cpu::l3_quantized_matmul(kernels, row, *one, n, k, 64, bits, mx::bfloat16));
        const size_t at = static_cast<size_t>(t * top + j) * n * 2;
        EXPECT_EQ(std::vector<char>(got.begin() + static_cast<long>(at), got.begin() + static_cast<long>(at + n * 2)), want)
            << "bits " << bits << " token " << t << " expert " << e;
      }
  }
}

#if defined(MLXRT_CPU_X86_KERNELS) || defined(MLXRT_CPU_NEON_KERNELS)
// x's quantization (the vectorised first step of the L3 matmul) on the blocks random data never
// gives: all zeros, a NaN, infinities, values that round to the clamp, tiny and huge magnitudes.
// The definition (l3_qmm_args.h) in scalar code: d NaN where the block holds a NaN, a value whose
// product is NaN quantized to 0.
TEST(L3QuantizedMatmul, QuantizesSpecialBlocksAsItsDefinition) {
  auto level = [](const float* v, int* q, float& d) {
    float amax = 0.0f;
    bool nan = false;
    for (int i = 0; i < 32; ++i) {
      amax = std::max(amax, std::fabs(v[i]));
      nan = nan || std::isnan(v[i]);
    }
    if (nan) amax = std::nanf("");
    d = amax / 127.0f;
    const float inverse = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      const float r = std::nearbyint(v[i] * inverse);
      q[i] = std::isnan(r) ? 0 : static_cast<int>(std::clamp(r, -127.0f, 127.0f));
      sum += q[i];
    }
    return sum;
  };
  std::vector<std::vector<float>> blocks;
  blocks.emplace_back(32, 0.0f);
  for (float special : {std::nanf(""), INFINITY, -INFINITY, 3.0e38f, 1.0e-40f, -0.0f}) {
    std::vector<float> b(32);
    for (int i = 0; i < 32; ++i) b[static_cast<size_t>(i)] = 0.37f * static_cast<float>(i - 13);
    b[7] = special;
    blocks.push_back(b);
  }
  std::vector<float> halves(32);  // values at ±(n + 0.5) / 127 of the largest: ties to even
  for (int i = 0; i < 32; ++i) halves[static_cast<size_t>(i)] = (i == 0 ? 127.0f : static_cast<float>(i) + 0.5f) * (i % 2 ? -1.0f : 1.0f);
  blocks.push_back(halves);
#if defined(MLXRT_CPU_X86_KERNELS)
  const auto functions = {mlxrt::kernels::cpu::l3_quantize_block_avx2, mlxrt::kernels::cpu::l3_quantize_block_avx512vnni};
#else
  const auto functions = {mlxrt::kernels::cpu::l3_quantize_block_neon};
#endif
  for (auto fn : functions) {
#if defined(MLXRT_CPU_X86_KERNELS)
    if (fn == mlxrt::kernels::cpu::l3_quantize_block_avx512vnni) {
      auto k = CpuKernels::create(1, true, true);
      if (!k || !k->vnni()) continue;
    } else if (!CpuKernels::create(1, false, true)) {
      GTEST_SKIP() << "no L3 kernels on this CPU";
    }
#endif
    for (size_t b = 0; b < blocks.size(); ++b) {
      const float* v = blocks[b].data();
      int q1[32], q2[32];
      float d1, d2;
      const int s1 = level(v, q1, d1);
      float rest[32];
      for (int i = 0; i < 32; ++i) rest[i] = v[i] - d1 * static_cast<float>(q1[i]);
      const int s2 = level(rest, q2, d2);
      std::int8_t g1[32], g2[32];
      float d[2];
      int sums[2];
      fn(v, g1, g2, d, sums);
      for (int i = 0; i < 32; ++i) {
        EXPECT_EQ(g1[i], q1[i]) << "block " << b << " value " << i;
        EXPECT_EQ(g2[i], q2[i]) << "block " << b << " value " << i;
      }
      EXPECT_EQ(std::memcmp(&d[0], &d1, 4) == 0 || (std::isnan(d[0]) && std::isnan(d1)), true) << "block " << b;
      EXPECT_EQ(std::memcmp(&d[1], &d2, 4) == 0 || (std::isnan(d[1]) && std::isnan(d2)), true) << "block " << b;
      EXPECT_EQ(sums[0], s1) << "block " << b;
      EXPECT_EQ(sums[1], s2) << "block " << b;
    }
  }
}
#endif

}  // namespace
