// The L3 CUDA matrix-vector product (kernels/cuda/affine_qmv.h) against the same product in
// float64 on the host, from the packed words, scales and biases themselves, within the bound that
// float32 sums allow. Not bit-exact by design (L3), so each element gets its own tolerance:
//   |y - ref| <= u_out |ref| + 2^-24 (3 V + K / V + 16) sum_k |x_k| (|s_k| 2^bits + |b_k|)
// where u_out is the output dtype's half ulp (0 for float32) and V the values one lane reads per
// load: a chunk's sums (V terms each, the two of sum x f and sum x, scaled by 2^bits) and the K / V
// chunk sums of a lane, and the warp's reduction, each round at 2^-24 of what they add. A wrong
// index or an unwritten output misses that by orders of magnitude. Runs on a CUDA GPU
// (bench/gpu/run.sh kernels) and on the CPU's SIMT runtime (kernel_backend.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>
#include <mlx/ops.h>
#include <mlx/random.h>
#include <mlx/transforms.h>

#include "kernel_backend.h"
#include "mlxrt/kernels/cuda/affine_qmv.h"

namespace mlxrt::kernels::cuda {
namespace {

struct Case {
  int n, k, rows, group_size, bits;
  mx::Dtype x_type, param_type;
};

std::string describe(const Case& c, QmvTiling t) {
  std::ostringstream s;
  s << "N " << c.n << " K " << c.k << " rows " << c.rows << " g" << c.group_size << " " << c.bits << "-bit x "
    << c.x_type << " params " << c.param_type << " tiling " << t.rows_per_warp << "x" << t.warps_per_block;
  return s.str();
}

std::vector<float> host_floats(const mx::array& a) {
  auto f = mx::astype(a, mx::float32);
  mx::eval(f);
  return {f.data<float>(), f.data<float>() + f.size()};
}

double half_ulp(mx::Dtype t) { return t == mx::bfloat16 ? std::ldexp(1.0, -8) : t == mx::float16 ? std::ldexp(1.0, -11) : 0.0; }

struct Operands {
  mx::array w, scales, biases, x;
};

// Random operands for `c`, evaluated: x [1, rows, K], optionally a view at an odd element offset
// (so not 16-byte aligned).
Operands random_operands(const Case& c, int seed, bool misaligned_x = false) {
  auto key = mx::random::key(seed);
  auto next = [&key]() {
    auto parts = mx::random::split(key);
    key = parts.first;
    return parts.second;
  };
  const int groups = c.k / c.group_size;
  auto w = mx::random::bits({c.n, c.k * c.bits / 32}, 4, next());
  auto scales = mx::astype(mx::multiply(mx::random::normal({c.n, groups}, mx::float32, next()), mx::array(0.02f)),
                           c.param_type);
  auto biases = mx::astype(mx::multiply(mx::random::normal({c.n, groups}, mx::float32, next()), mx::array(0.1f)),
                           c.param_type);
  auto x = mx::astype(mx::random::normal({c.rows * c.k + 1}, mx::float32, next()), c.x_type);
  x = misaligned_x ? mx::slice(x, {1}, {1 + c.rows * c.k}) : mx::slice(x, {0}, {c.rows * c.k});
  x = mx::reshape(x, {1, c.rows, c.k});
  mx::eval({w, scales, biases, x});
  return {w, scales, biases, x};
}

class AffineQmv : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(kernel_tests::use_kernel_device()) << "these tests need a CUDA device";
  }

  // Random operands for `c`, the kernel's output, and the check of every element.
  void check(const Case& c, int seed, QmvTiling tiling = {}, bool misaligned_x = false) {
    const auto [w, scales, biases, x] = random_operands(c, seed, misaligned_x);
    const int groups = c.k / c.group_size;
    ASSERT_TRUE(affine_qmv_operands_fit(x, w, scales, biases, c.group_size, c.bits)) << describe(c, tiling);
    auto y = kernel_tests::run(affine_qmv_launch(x, w, scales, biases, c.group_size, c.bits, tiling))[0];
    mx::eval(y);
    const auto out_type = mx::promote_types(c.x_type, c.param_type);
    ASSERT_EQ(y.dtype(), out_type);
    ASSERT_EQ(y.shape(), (mx::Shape{1, c.rows, c.n}));

    const auto hy = host_floats(y), hx = host_floats(x), hs = host_floats(scales), hb = host_floats(biases);
    const uint32_t* hw = w.data<uint32_t>();
    const int per_word = 32 / c.bits, words = c.k / per_word, per_load = 128 / c.bits;
    const uint32_t mask = (1u << c.bits) - 1u;
    const double lift = std::ldexp(1.0, c.bits);
    const double sums = 3.0 * per_load + double(c.k) / per_load + 16.0;
    size_t bad = 0;
    double worst = 0;
    for (int n = 0; n < c.n; ++n) {
      for (int m = 0; m < c.rows; ++m) {
        double ref = 0, mag = 0;
        for (int k = 0; k < c.k; ++k) {
          const uint32_t q = (hw[static_cast<size_t>(n) * words + k / per_word] >> (c.bits * (k % per_word))) & mask;
          const double s = hs[static_cast<size_t>(n) * groups + k / c.group_size];
          const double b = hb[static_cast<size_t>(n) * groups + k / c.group_size];
          const double xv = hx[static_cast<size_t>(m) * c.k + k];
          ref += xv * (s * q + b);
          mag += std::abs(xv) * (std::abs(s) * lift + std::abs(b));
        }
        const double got = hy[static_cast<size_t>(m) * c.n + n];
        const double tol = half_ulp(out_type) * std::abs(ref) + std::ldexp(sums * mag, -24);
        const double err = std::abs(got - ref);
        if (!(err <= tol)) {  // a NaN fails
          if (bad++ < 5)
            ADD_FAILURE() << describe(c, tiling) << ": y[" << m << ", " << n << "] = " << got << ", float64 " << ref
                          << ", tolerance " << tol;
        }
        if (tol > 0) worst = std::max(worst, err / tol);
      }
    }
    EXPECT_EQ(bad, 0u) << describe(c, tiling);
    std::printf("%s: largest error / tolerance %.3g\n", describe(c, tiling).c_str(), worst);
  }
};

// dense_mv: y = x @ w.T for a dense w of x's type, against float64 within the float32 bound of a
// lane's K / V chained products (V values a 16-byte load) and the warp's reduction:
//   |y - ref| <= u_out |ref| + 2^-24 (K / V + 16) sum_k |x_k w_k|.
// w (and x) optionally a view at an odd element offset, so not 16-byte aligned: the kernel's
// element-wise path; K not a multiple of V: the last load's tail.
struct DenseCase {
  int n, k, rows;
  mx::Dtype type;
  bool misaligned = false;
};

void check_dense(const DenseCase& c, int seed, QmvTiling tiling = {}) {
  auto key = mx::random::key(seed);
  auto next = [&key]() {
    auto parts = mx::random::split(key);
    key = parts.first;
    return parts.second;
  };
  const int skip = c.misaligned ? 1 : 0;
  auto view = [&](int rows, float scale) {
    auto flat = mx::astype(mx::multiply(mx::random::normal({rows * c.k + 1}, mx::float32, next()), mx::array(scale)),
                           c.type);
    return mx::reshape(mx::slice(flat, {skip}, {skip + rows * c.k}), {rows, c.k});
  };
  auto w = view(c.n, 0.05f);
  auto x = mx::reshape(view(c.rows, 1.0f), {1, c.rows, c.k});
  mx::eval({w, x});
  std::ostringstream what;
  what << "dense N " << c.n << " K " << c.k << " rows " << c.rows << " " << c.type << (c.misaligned ? " misaligned" : "")
       << " tiling " << tiling.rows_per_warp << "x" << tiling.warps_per_block << (tiling.split_k ? " split-K" : "");
  ASSERT_TRUE(dense_mv_operands_fit(x, w)) << what.str();
  auto y = kernel_tests::run(dense_mv_launch(x, w, tiling))[0];
  mx::eval(y);
  ASSERT_EQ(y.dtype(), c.type);
  ASSERT_EQ(y.shape(), (mx::Shape{1, c.rows, c.n}));
  const auto hy = host_floats(y), hx = host_floats(x), hw = host_floats(w);
  const double per_load = 16.0 / mx::size_of(c.type);
  const double sums = double(c.k) / per_load + 16.0;
  size_t bad = 0;
  double worst = 0;
  for (int n = 0; n < c.n; ++n)
    for (int m = 0; m < c.rows; ++m) {
      double ref = 0, mag = 0;
      for (int k = 0; k < c.k; ++k) {
        const double p = double(hx[size_t(m) * c.k + k]) * hw[size_t(n) * c.k + k];
        ref += p;
        mag += std::abs(p);
      }
      const double got = hy[size_t(m) * c.n + n];
      const double tol = half_ulp(c.type) * std::abs(ref) + std::ldexp(sums * mag, -24);
      const double err = std::abs(got - ref);
      if (!(err <= tol) && bad++ < 5)
        ADD_FAILURE() << what.str() << ": y[" << m << ", " << n << "] = " << got << ", float64 " << ref << ", tolerance "
                      << tol;
      if (tol > 0) worst = std::max(worst, err / tol);
    }
  EXPECT_EQ(bad, 0u) << what.str();
  std::printf("%s: largest error / tolerance %.3g\n", what.str().c_str(), worst);
}

TEST_F(AffineQmv, DenseWithinFloat32Bound) {
  const DenseCase cases[] = {{4096, 4096, 1, mx::bfloat16}, {1000, 1024, 3, mx::float16},
                             {257, 2048, 8, mx::float32},   {333, 100, 2, mx::bfloat16},
                             {129, 1536, 1, mx::bfloat16, true}, {65, 77, 4, mx::float16, true},
                             {31, 260, 2, mx::float32, true}};
  int seed = 300;
  for (const auto& c : cases) check_dense(c, seed++);
  for (QmvTiling t : {QmvTiling{1, 1}, QmvTiling{3, 2}, QmvTiling{8, 8}, QmvTiling{2, 4, false, 3}})
    check_dense({517, 1024, 2, mx::bfloat16}, seed++, t);
  // The split-K variant (the block's warps share its rows): its cross-warp sum in shared memory.
  for (QmvTiling t : {QmvTiling{2, 4, true}, QmvTiling{1, 2, true}, QmvTiling{8, 4, true}, QmvTiling{3, 3, true}}) {
    check_dense({517, 1024, 2, mx::bfloat16}, seed++, t);
    check_dense({130, 4096, 8, mx::float16}, seed++, t);
    check_dense({67, 300, 3, mx::float32, true}, seed++, t);
  }
  EXPECT_THROW(dense_mv_launch(mx::ones({1, 64}, mx::bfloat16), mx::ones({8, 64}, mx::bfloat16), QmvTiling{2, 1, true}),
               std::invalid_argument);  // one warp: the M x R outputs need a thread each
  EXPECT_FALSE(dense_mv_operands_fit(mx::ones({1, 64}, mx::float32), mx::ones({8, 64}, mx::bfloat16)));  // types differ
  EXPECT_FALSE(dense_mv_operands_fit(mx::ones({9, 64}, mx::bfloat16), mx::ones({8, 64}, mx::bfloat16)));  // 9 rows
  EXPECT_FALSE(dense_mv_operands_fit(mx::ones({1, 32}, mx::bfloat16), mx::ones({8, 64}, mx::bfloat16)));  // K differs
  EXPECT_THROW(dense_mv_launch(mx::ones({1, 32}, mx::bfloat16), mx::ones({8, 64}, mx::bfloat16)), std::invalid_argument);
}

// affine_qmv_chunks: every output row is the one an 8-row affine_qmv launch gives that row (the
// chunk's rows, the last chunk padded with zero rows), byte for byte: the same warp's product.
TEST_F(AffineQmv, ChunksGiveEachRowItsEightRowLaunchsBytes) {
  int seed = 900;
  for (const auto& c : {Case{257, 1024, 8, 64, 4, mx::bfloat16, mx::bfloat16},
                        Case{130, 512, 13, 32, 4, mx::bfloat16, mx::bfloat16},
                        Case{64, 256, 24, 128, 8, mx::bfloat16, mx::bfloat16},
                        Case{1024, 128, 9, 64, 4, mx::bfloat16, mx::bfloat16}}) {
    const auto [w, scales, biases, x] = random_operands(c, seed++);
    ASSERT_TRUE(affine_qmv_chunks_operands_fit(x, w, scales, biases, c.group_size, c.bits));
    const int chunks = (c.rows + kQmvMaxRows - 1) / kQmvMaxRows;
    auto y = kernel_tests::run(affine_qmv_chunks_launch(x, w, scales, biases, c.group_size, c.bits))[0];
    mx::eval(y);
    ASSERT_EQ(y.shape(), (mx::Shape{chunks * kQmvMaxRows, c.n}));
    auto padded = mx::concatenate({mx::reshape(x, {c.rows, c.k}),
                                   mx::zeros({chunks * kQmvMaxRows - c.rows, c.k}, mx::bfloat16)}, 0);
    for (int chunk = 0; chunk < chunks; ++chunk) {
      auto rows = mx::slice(padded, {chunk * kQmvMaxRows, 0}, {(chunk + 1) * kQmvMaxRows, c.k});
      mx::eval(rows);
      auto one = kernel_tests::run(affine_qmv_launch(rows, w, scales, biases, c.group_size, c.bits))[0];
      auto part = mx::slice(y, {chunk * kQmvMaxRows, 0}, {(chunk + 1) * kQmvMaxRows, c.n});
      auto same = mx::array_equal(mx::view(one, mx::uint16), mx::view(part, mx::uint16));
      mx::eval(same);
      EXPECT_TRUE(same.item<bool>()) << "N " << c.n << " K " << c.k << " rows " << c.rows << " chunk " << chunk;
    }
  }
  const auto w = mx::zeros({64, 64 * 4 / 32}, mx::uint32);
  const auto s = mx::ones({64, 1}, mx::bfloat16);
  EXPECT_TRUE(affine_qmv_chunks_operands_fit(mx::ones({127, 64}, mx::bfloat16), w, s, s, 64, 4));
  EXPECT_FALSE(affine_qmv_chunks_operands_fit(mx::ones({128, 64}, mx::bfloat16), w, s, s, 64, 4));
  EXPECT_THROW(affine_qmv_chunks_launch(mx::ones({128, 64}, mx::bfloat16), w, s, s, 64, 4), std::invalid_argument);
}

TEST_F(AffineQmv, FourBitWithinFloat32Bound) {
  const Case cases[] = {{4096, 4096, 1, 64, 4, mx::bfloat16, mx::bfloat16}, {333, 4096, 1, 64, 4, mx::bfloat16, mx::bfloat16},
                        {256, 12288, 3, 128, 4, mx::float16, mx::float16},  {257, 1024, 8, 32, 4, mx::float32, mx::float32},
                        {130, 96, 2, 32, 4, mx::bfloat16, mx::bfloat16},    {200, 4096, 1, 64, 4, mx::float32, mx::bfloat16},
                        {77, 2048, 4, 128, 4, mx::bfloat16, mx::float32}};
  int seed = 1;
  for (const auto& c : cases) check(c, seed++);
}

TEST_F(AffineQmv, EightBitWithinFloat32Bound) {
  const Case cases[] = {{4096, 1024, 1, 64, 8, mx::bfloat16, mx::bfloat16}, {100, 2048, 5, 128, 8, mx::float16, mx::float16},
                        {65, 160, 8, 32, 8, mx::float32, mx::float32},      {129, 3072, 2, 64, 8, mx::bfloat16, mx::bfloat16}};
  int seed = 100;
  for (const auto& c : cases) check(c, seed++);
}

TEST_F(AffineQmv, EveryTilingAndUnalignedInput) {
  const Case c{517, 1536, 3, 64, 4, mx::bfloat16, mx::bfloat16};
  int seed = 200;
  // K 1536 at 4 bits: each lane's loop takes 2 steps, so depths 1, 3 and 4 (the ring) stop early.
  for (QmvTiling t : {QmvTiling{1, 1}, QmvTiling{2, 4}, QmvTiling{3, 2}, QmvTiling{8, 8}, QmvTiling{4, 8},
                      QmvTiling{1, 4, false, 1}, QmvTiling{2, 4, false, 3}, QmvTiling{3, 2, false, 4}})
    check(c, seed++, t);
  check(c, seed++, {}, true);
  check({91, 512, 1, 32, 8, mx::float16, mx::float16}, seed++, {}, true);
}

TEST_F(AffineQmv, RefusesWhatItDoesNotCompute) {
  auto w = mx::zeros({64, 64}, mx::uint32);  // K = 512 at 4 bits
  auto s = mx::ones({64, 8}, mx::bfloat16);
  auto x = mx::ones({1, 512}, mx::bfloat16);
  EXPECT_TRUE(affine_qmv_operands_fit(x, w, s, s, 64, 4));
  EXPECT_FALSE(affine_qmv_operands_fit(x, w, s, std::nullopt, 64, 4));                     // not affine
  EXPECT_FALSE(affine_qmv_operands_fit(mx::ones({9, 512}, mx::bfloat16), w, s, s, 64, 4));  // 9 rows
  EXPECT_FALSE(affine_qmv_operands_fit(x, w, s, s, 64, 3));                                 // 3 bits
  EXPECT_FALSE(affine_qmv_operands_fit(mx::ones({1, 256}, mx::bfloat16), w, s, s, 64, 4));  // K differs
  EXPECT_THROW(affine_qmv_launch(x, w, s, s, 64, 2), std::invalid_argument);
  EXPECT_THROW(affine_qmv_launch(x, w, s, s, 64, 4, QmvTiling{9, 1}), std::invalid_argument);  // rows per warp
  EXPECT_THROW(affine_qmv_launch(x, w, s, s, 64, 4, QmvTiling{1, 1, false, 5}), std::invalid_argument);  // depth
}

// The model's functions: on a CUDA GPU the same launch through CachedKernel, the same bytes;
// elsewhere declined (the model then runs MLX's nodes).
TEST_F(AffineQmv, TheModelsFunctionsRunTheLaunchOnlyOnAGpu) {
  auto key = mx::random::key(9);
  auto w = mx::random::bits({96, 64}, 4, key);  // K = 512 at 4 bits
  auto s = mx::astype(mx::multiply(mx::random::normal({96, 8}, mx::float32, key), mx::array(0.02f)), mx::bfloat16);
  auto x = mx::astype(mx::random::normal({1, 2, 512}, mx::float32, key), mx::bfloat16);
  auto dense = mx::astype(mx::random::normal({40, 512}, mx::float32, key), mx::bfloat16);
  mx::eval({w, s, x, dense});
  if (kernel_tests::kernels_on_gpu()) {
    ASSERT_TRUE(affine_qmv_applies(x, w, s, s, 64, 4));
    const auto launched = kernel_tests::run(affine_qmv_launch(x, w, s, s, 64, 4))[0];
    EXPECT_TRUE(mx::array_equal(affine_qmv(x, w, s, s, 64, 4), launched).item<bool>());
    ASSERT_TRUE(dense_mv_applies(x, dense));
    EXPECT_TRUE(mx::array_equal(dense_mv(x, dense), kernel_tests::run(dense_mv_launch(x, dense))[0]).item<bool>());
  } else {
    EXPECT_TRUE(affine_qmv_operands_fit(x, w, s, s, 64, 4));
    EXPECT_FALSE(affine_qmv_applies(x, w, s, s, 64, 4));
    EXPECT_THROW(affine_qmv(x, w, s, s, 64, 4), std::invalid_argument);
    EXPECT_FALSE(dense_mv_applies(x, dense));
    EXPECT_THROW(dense_mv(x, dense), std::invalid_argument);
  }
}

}  // namespace
}  // namespace mlxrt::kernels::cuda
