// Our CPU matmuls (affine quantized, gathered, bfloat16) against MLX's own, byte for byte:
// every element type, bit width and group size they take, ragged shapes, special values, strided
// inputs, every instruction set (AVX-512 and AVX2 on x86-64, NEON on aarch64) and several thread
// counts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <mlx/mlx.h>
#include <mlx/primitives.h>

#include "mlxrt/kernels/cpu/matmul.h"
#include "matmul_case.h"

namespace mx = mlx::core;
using mlxrt::kernels::cpu::CpuKernels;
using mlxrt::kernels::test::bytes_of;
using mlxrt::kernels::test::Case;
using mlxrt::kernels::test::describe;

namespace {

// Random x with some special values mixed in (signed zero, infinities, NaN, subnormals, large).
mx::array make_x(int rows, int k, mx::Dtype dtype, uint64_t seed, bool specials) {
  auto key = mx::random::key(seed);
  auto x = mx::random::normal({rows, k}, mx::float32, 0.0f, 1.0f, key);
  if (specials) {
    std::vector<float> v(static_cast<size_t>(rows) * k);
    mx::eval(x);
    std::memcpy(v.data(), x.data<float>(), v.size() * 4);
    const float special[] = {-0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::quiet_NaN(), 1e-40f, -3e-39f, 6.0e4f, 3.0e38f};
    for (size_t i = 0; i < v.size(); i += 97) v[i] = special[(i / 97) % 8];
    x = mx::array(v.data(), {rows, k}, mx::float32);
  }
  return mx::astype(x, dtype);
}

void expect_same_bytes(const Case& c, const std::shared_ptr<CpuKernels>& kernels, bool specials, uint64_t seed) {
  auto w_float = mx::random::normal({c.n, c.k}, mx::float32, 0.0f, 0.05f, mx::random::key(seed + 1));
  auto q = mx::quantize(mx::astype(w_float, c.dtype), c.group, c.bits);
  const auto& w = q[0];
  const auto& scales = q[1];
  const auto& biases = q[2];
  auto x = make_x(c.rows, c.k, c.dtype, seed, specials);
  auto ours = mlxrt::kernels::cpu::quantized_matmul(kernels, x, w, scales, biases, c.group, c.bits, "affine");
  auto theirs = mx::quantized_matmul(x, w, scales, biases, true, c.group, c.bits, "affine");
  ASSERT_STREQ(ours.primitive().name(), "AffineQuantizedMatmul") << describe(c);
  ASSERT_EQ(ours.shape(), theirs.shape()) << describe(c);
  ASSERT_EQ(ours.dtype(), theirs.dtype()) << describe(c);
  EXPECT_EQ(bytes_of(ours), bytes_of(theirs)) << describe(c) << (specials ? " with special values" : "");
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (auto dtype : {mx::float32, mx::bfloat16, mx::float16})
    for (int bits : {2, 4, 8})
      for (int group : {32, 64, 128}) {
        out.push_back({1, 64, group * 2, bits, group, dtype});
        out.push_back({3, 40, group * 3, bits, group, dtype});
        out.push_back({70, 130, group, bits, group, dtype});
      }
  return out;
}

TEST(AffineQmm, EqualsMlxBytesAvx512OrAvx2) {
  auto kernels = CpuKernels::create(2);
  if (!kernels) GTEST_SKIP() << "no CPU kernels of ours here (x86-64 without AVX2 + F16C): MLX's kernel runs";
  uint64_t seed = 1;
  for (const auto& c : cases()) {
    expect_same_bytes(c, kernels, false, seed++);
    expect_same_bytes(c, kernels, true, seed++);
  }
}

TEST(AffineQmm, EqualsMlxBytesAvx2) {
  auto kernels = CpuKernels::create(2, false);
  if (!kernels) GTEST_SKIP() << "no CPU kernels of ours here (x86-64 without AVX2 + F16C): MLX's kernel runs";
  if (std::string(kernels->instruction_set()) == "neon") GTEST_SKIP() << "aarch64: NEON only, tested above";
  ASSERT_STREQ(kernels->instruction_set(), "avx2");
  uint64_t seed = 1000;
  for (const auto& c : cases()) expect_same_bytes(c, kernels, true, seed++);
}

// Two NaNs of opposite sign meeting in one operation: x's NaN pairs at every position k (the sum's
// NaN against the product's), and an x NaN against a w NaN (scale inf times q 0) at every k. One
// row per position, so each row's sign says which operand MLX's compiled kernel kept there.
TEST(AffineQmm, NaNSignsAsMlxAtEveryPosition) {
  if (!CpuKernels::create(1)) GTEST_SKIP() << "no CPU kernels of ours here (x86-64 without AVX2 + F16C)";
  for (bool avx512 : {true, false}) {
  auto kernels = CpuKernels::create(2, avx512);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (auto dtype : {mx::float32, mx::float16})
    for (int bits : {2, 4, 8})
      for (int group : {32, 64, 128}) {
        const int k = 2 * group;
        const int per_word = 32 / bits;
        std::vector<float> pairs;  // row j: +NaN at j, -NaN at j + 1
        for (int j = 0; j + 1 < k; ++j)
          for (int i = 0; i < k; ++i) pairs.push_back(i == j ? nan : i == j + 1 ? -nan : 1.0f);
        auto zeros = mx::zeros({1, k * bits / 32}, mx::uint32);
        auto ones = mx::astype(mx::ones({1, k / group}), dtype);
        auto x = mx::astype(mx::array(pairs.data(), {k - 1, k}, mx::float32), dtype);
        Case c{k - 1, 1, k, bits, group, dtype};
        auto ours = mlxrt::kernels::cpu::quantized_matmul(kernels, x, zeros, ones, mx::zeros_like(ones), group, bits, "affine");
        auto theirs = mx::quantized_matmul(x, zeros, ones, mx::zeros_like(ones), true, group, bits, "affine");
        EXPECT_EQ(bytes_of(ours), bytes_of(theirs)) << "NaN pairs in x, " << describe(c);
        // Row j: q = 0 at j and 1 elsewhere, scale inf: w[j] is NaN; x[j] = +NaN.
        for (int j = 0; j < k; ++j) {
          std::vector<uint32_t> words(static_cast<size_t>(k / per_word), 0);
          for (int i = 0; i < k; ++i)
            if (i != j) words[static_cast<size_t>(i / per_word)] |= 1u << (bits * (i % per_word));
          auto w = mx::array(reinterpret_cast<const int32_t*>(words.data()), {1, k / per_word}, mx::int32);
          w = mx::view(w, mx::uint32);
          std::vector<float> row(static_cast<size_t>(k), 1.0f);
          row[static_cast<size_t>(j)] = nan;
          auto xr = mx::astype(mx::array(row.data(), {1, k}, mx::float32), dtype);
          auto scales = mx::astype(mx::full({1, k / group}, inf), dtype);
          auto biases = mx::astype(mx::zeros({1, k / group}), dtype);
          auto a = mlxrt::kernels::cpu::quantized_matmul(kernels, xr, w, scales, biases, group, bits, "affine");
          auto b = mx::quantized_matmul(xr, w, scales, biases, true, group, bits, "affine");
          EXPECT_EQ(bytes_of(a), bytes_of(b))
              << "NaN in x and w at " << j << ", " << describe(c) << " on " << kernels->instruction_set();
        }
      }
  }
}

TEST(AffineQmm, SameBytesForAnyThreadCount) {
  auto one = CpuKernels::create(1);
  if (!one) GTEST_SKIP() << "no CPU kernels of ours here (x86-64 without AVX2 + F16C)";
  auto three = CpuKernels::create(3);
  auto x = make_x(150, 256, mx::bfloat16, 7, false);
  auto q = mx::quantize(mx::astype(mx::random::normal({300, 256}, mx::float32, 0.0f, 0.05f, mx::random::key(8)),
                                   mx::bfloat16),
                        64, 4);
  auto a = mlxrt::kernels::cpu::quantized_matmul(one, x, q[0], q[1], q[2], 64, 4, "affine");
  auto b = mlxrt::kernels::cpu::quantized_matmul(three, x, q[0], q[1], q[2], 64, 4, "affine");
  EXPECT_EQ(bytes_of(a), bytes_of(b));
}

TEST(AffineQmm, StridedAndBatchedInputs) {
  auto kernels = CpuKernels::create(2);
  if (!kernels) GTEST_SKIP() << "no CPU kernels of ours here (x86-64 without AVX2 + F16C)";
  auto q = mx::quantize(mx::random::normal({96, 128}, mx::float32, 0.0f, 0.05f, mx::random::key(3)), 64, 4);
  // x as a transposed view (not row-contiguous) and as a 3-D batch.
  auto xt = mx::transpose(mx::random::normal({128, 5}, mx::float32, 0.0f, 1.0f, mx::random::key(4)));
  auto x3 = mx::random::normal({2, 3, 128}, mx::float32, 0.0f, 1.0f, mx::random::key(5));
  for (const auto& x : {xt, x3}) {
    auto ours = mlxrt::kernels::cpu::quantized_matmul(kernels, x, q[0], q[1], q[2], 64, 4, "affine");
    auto theirs = mx::quantized_matmul(x, q[0], q[1], q[2], true, 64, 4, "affine");
    EXPECT_EQ(ours.shape(), theirs.shape());
    EXPECT_EQ(bytes_of(ours), bytes_of(theirs));
  }
}

TEST(AffineQmm, LeavesMlxNodeWhereItCannotMatch) {
  auto kernels = CpuKernels::create(2);
  if (!kernels) GTEST_SKIP() << "no CPU kernels of ours here (x86-64 without AVX2 + F16C)";
  auto x = mx::random::normal({2, 128}, mx::float32, 0.0f, 1.0f, mx::random::key(6));
  auto q3 = mx::quantize(mx::random::normal({32, 128}, mx::float32, 0.0f, 0.05f, mx::random::key(7)), 64, 3);
  auto y3 = mlxrt::kernels::cpu::quantized_matmul(kernels, x, q3[0], q3[1], q3[2], 64, 3, "affine");
  EXPECT_STREQ(y3.primitive().name(), "QuantizedMatmul");
  auto none = mlxrt::kernels::cpu::quantized_matmul(nullptr, x, q3[0], q3[1], q3[2], 64, 3, "affine");
  EXPECT_STREQ(none.primitive().name(), "QuantizedMatmul");
  // Mixed input types promote as MLX promotes them (float32 x, bfloat16 scales: float32 out).
  auto qb = mx::quantize(mx::astype(mx::random::normal({32, 128}, mx::float32, 0.0f, 0.05f, mx::random::key(9)),
                                    mx::bfloat16),
                         64, 4);
  auto ours = mlxrt::kernels::cpu::quantized_matmul(kernels, x, qb[0], qb[1], qb[2], 64, 4, "affine");
  auto theirs = mx::quantized_matmul(x, qb[0], qb[1], qb[2], true, 64, 4, "affine");
  EXPECT_EQ(ours.dtype(), mx::float32);
  EXPECT_EQ(bytes_of(ours), bytes_of(theirs));
}

}  // namespace

namespace {

// The switch layers' expert matmul: gathered blocks of stacked experts, as mlx-lm's SwitchGLU
// calls it for a decode step (x [tokens, 1, 1, K], indices [tokens, top_k]) and for sorted pairs.
TEST(AffineGatherQmm, EqualsMlxBytes) {
  for (bool avx512 : {true, false}) {
    auto kernels = CpuKernels::create(2, avx512);
    if (!kernels) GTEST_SKIP() << "no CPU kernels of ours here (x86-64 without AVX2 + F16C)";
    for (auto dtype : {mx::float32, mx::bfloat16, mx::float16})
      for (int bits : {4, 8}) {
        const int experts = 6, n = 48, k = 128;
        auto q = mx::quantize(
            mx::astype(mx::random::normal({experts, n, k}, mx::float32, 0.0f, 0.05f, mx::random::key(bits)), dtype), 64,
            bits);
        auto x = make_x(5, k, dtype, 11, true);
        auto decode_x = mx::reshape(x, {5, 1, 1, k});
        auto idx = mx::array({0u, 3u, 5u, 1u, 1u, 2u, 4u, 0u, 5u, 2u}, {5, 2}, mx::uint32);
        auto ours = mlxrt::kernels::cpu::gather_qmm(kernels, decode_x, q[0], q[1], q[2], idx, 64, bits, "affine",
                                                    std::nullopt, false);
        auto theirs = mx::gather_qmm(decode_x, q[0], q[1], q[2], std::nullopt, idx, true, 64, bits, "affine");
        ASSERT_STREQ(ours.primitive().name(), "AffineGatherQuantizedMatmul");
        EXPECT_EQ(ours.shape(), theirs.shape());
        EXPECT_EQ(bytes_of(ours), bytes_of(theirs)) << "decode, bits " << bits;
        // Sorted pairs: x [pairs, 1, K] (rows of tokens repeated), one expert index per pair.
        auto pairs_x = mx::reshape(mx::take(x, mx::array({0, 0, 1, 2, 3, 4, 4}), 0), {7, 1, k});
        auto sorted = mx::array({0u, 1u, 1u, 2u, 3u, 5u, 5u}, {7}, mx::uint32);
        auto a = mlxrt::kernels::cpu::gather_qmm(kernels, pairs_x, q[0], q[1], q[2], sorted, 64, bits, "affine",
                                                 std::nullopt, true);
        auto b = mx::gather_qmm(pairs_x, q[0], q[1], q[2], std::nullopt, sorted, true, 64, bits, "affine", std::nullopt,
                                true);
        EXPECT_EQ(bytes_of(a), bytes_of(b)) << "sorted pairs, bits " << bits;
      }
  }
}

}  // namespace

namespace {

// x @ w.T and addmm(bias, x, w.T) in bfloat16 against MLX's simd_gemm: ragged shapes (odd k, n
// not a multiple of a vector, 1 to 70 rows), special values, both instruction sets.
TEST(Bf16Matmul, EqualsMlxBytes) {
  for (bool avx512 : {true, false}) {
    auto kernels = CpuKernels::create(2, avx512);
    if (!kernels) GTEST_SKIP() << "no CPU kernels of ours here (x86-64 without AVX2 + F16C)";
    uint64_t seed = 40;
    for (int rows : {1, 3, 4, 5, 70})
      for (int n : {16, 40, 130})
        for (int k : {1, 2, 33, 64, 129}) {
          auto x = make_x(rows, k, mx::bfloat16, seed++, rows == 70);
          auto w = mx::astype(mx::random::normal({n, k}, mx::float32, 0.0f, 0.1f, mx::random::key(seed++)), mx::bfloat16);
          auto bias = mx::astype(mx::random::normal({n}, mx::float32, 0.0f, 1.0f, mx::random::key(seed++)), mx::bfloat16);
          auto ours = mlxrt::kernels::cpu::matmul_transposed(kernels, x, w, std::nullopt);
          ASSERT_STREQ(ours.primitive().name(), "Bf16MatmulTransposed");
          EXPECT_EQ(bytes_of(ours), bytes_of(mx::matmul(x, mx::transpose(w))))
              << "matmul rows " << rows << " n " << n << " k " << k << " on " << kernels->instruction_set();
          auto ours_b = mlxrt::kernels::cpu::matmul_transposed(kernels, x, w, bias);
          EXPECT_EQ(bytes_of(ours_b), bytes_of(mx::addmm(bias, x, mx::transpose(w))))
              << "addmm rows " << rows << " n " << n << " k " << k << " on " << kernels->instruction_set();
        }
    // A 3-D x (batch of sequences), as a layer sees it.
    auto x3 = make_x(6, 64, mx::bfloat16, 99, false);
    x3 = mx::reshape(x3, {2, 3, 64});
    auto w = mx::astype(mx::random::normal({24, 64}, mx::float32, 0.0f, 0.1f, mx::random::key(100)), mx::bfloat16);
    EXPECT_EQ(bytes_of(mlxrt::kernels::cpu::matmul_transposed(kernels, x3, w, std::nullopt)),
              bytes_of(mx::matmul(x3, mx::transpose(w))));
  }
}

// A product of two bfloat16 values is exact in float unless it is below float's normal range: there a
// fused multiply-add (MLX's aarch64 build) and a multiply then an add (its x86-64 build) can round
// differently. Built so that they do, and the bfloat16 result shows it: the sum before the last
// product is odd in its last float bit and 2^-149 below a bfloat16 tie; the last product, 2^-150,
// rounds to 0 alone (tie to even) but lifts the fused sum onto the tie, which rounds up.
TEST(Bf16Matmul, SubnormalProductsRoundAsMlxs) {
  auto kernels = CpuKernels::create(1);
  if (!kernels) GTEST_SKIP() << "no CPU kernels of ours here (x86-64 without AVX2 + F16C)";
  const float xs[] = {std::ldexp(1.0f, -63), std::ldexp(1.0f, -66), std::ldexp(151.0f, -75), std::ldexp(1.0f, -75)};
  const float ws[] = {std::ldexp(1.0f, -63), std::ldexp(1.0f, -67), std::ldexp(217.0f, -74), std::ldexp(1.0f, -75)};
  for (int rows : {1, 5}) {  // the direct and the buffered paths
    std::vector<float> xv;
    for (int r = 0; r < rows; ++r) xv.insert(xv.end(), std::begin(xs), std::end(xs));
    auto x = mx::astype(mx::array(xv.data(), {rows, 4}, mx::float32), mx::bfloat16);
    auto w = mx::astype(mx::array(ws, {1, 4}, mx::float32), mx::bfloat16);
    auto ours = mlxrt::kernels::cpu::matmul_transposed(kernels, x, w, std::nullopt);
    ASSERT_STREQ(ours.primitive().name(), "Bf16MatmulTransposed");
    EXPECT_EQ(bytes_of(ours), bytes_of(mx::matmul(x, mx::transpose(w)))) << "rows " << rows << " on " << kernels->instruction_set();
  }
}

TEST(Bf16Matmul, OtherTypesKeepMlxNode) {
  auto kernels = CpuKernels::create(2);
  if (!kernels) GTEST_SKIP() << "no CPU kernels of ours here (x86-64 without AVX2 + F16C)";
  auto x = mx::ones({2, 8}, mx::float16);
  auto w = mx::ones({4, 8}, mx::float16);
  EXPECT_STREQ(mlxrt::kernels::cpu::matmul_transposed(kernels, x, w, std::nullopt).primitive().name(), "Matmul");
}

}  // namespace
