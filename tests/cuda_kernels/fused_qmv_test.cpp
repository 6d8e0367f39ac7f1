// The fused L3 CUDA kernels of a decoding step (kernels/cuda/fused_qmv.h) against float64 on the
// host. x is drawn from {±0.5, ±1, ±2}, whose squares sum exactly in float32 in any order, so the
// kernels' RMSNorm gives exactly the bytes of mx.fast.rms_norm (the same rsqrt of the same sum);
// the products then get affine_qmv's float32 bound (tests/cuda_kernels/affine_qmv_test.cpp):
//   |p - ref| <= u_out |ref| + 2^-24 (3 V + K / V + 16) sum_k |x_k| (|s_k| 2^bits + |b_k|),
// and SwiGLU and the residual add the roundings fused_qmv.h names, each bounded in the check. A
// wrong row, matrix or lane is off by orders of magnitude. Runs on a CUDA GPU and on the CPU's SIMT
// runtime (kernel_backend.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>
#include <mlx/fast.h>
#include <mlx/ops.h>
#include <mlx/random.h>
#include <mlx/transforms.h>

#include "kernel_backend.h"
#include "mlxrt/kernels/cuda/fused_qmv.h"

namespace mlxrt::kernels::cuda {
namespace {

std::vector<double> host(const mx::array& a) {
  auto f = mx::astype(a, mx::float32);
  mx::eval(f);
  return {f.data<float>(), f.data<float>() + f.size()};
}

double half_ulp(mx::Dtype t) { return t == mx::bfloat16 ? std::ldexp(1.0, -8) : t == mx::float16 ? std::ldexp(1.0, -11) : 0.0; }

class Keys {
 public:
  explicit Keys(int seed) : key_(mx::random::key(seed)) {}
  mx::array next() {
    auto parts = mx::random::split(key_);
    key_ = parts.first;
    return parts.second;
  }

 private:
  mx::array key_;
};

// bits 0: a dense matrix of `params`' type (QmvMatrix::dense).
QmvMatrix random_matrix(Keys& keys, int n, int k, int group_size, int bits, mx::Dtype params) {
  if (bits == 0) {
    auto w = mx::astype(mx::multiply(mx::random::normal({n, k}, mx::float32, keys.next()), mx::array(0.05f)), params);
    mx::eval(w);
    return QmvMatrix::dense(w);
  }
  auto w = mx::random::bits({n, k * bits / 32}, 4, keys.next());
  auto s = mx::astype(mx::multiply(mx::random::normal({n, k / group_size}, mx::float32, keys.next()), mx::array(0.02f)), params);
  auto b = mx::astype(mx::multiply(mx::random::normal({n, k / group_size}, mx::float32, keys.next()), mx::array(0.1f)), params);
  mx::eval({w, s, b});
  return {w, s, b, group_size, bits};
}

// x [1, rows, k] with values in {±0.5, ±1, ±2}.
mx::array exact_square_x(Keys& keys, int rows, int k, mx::Dtype t) {
  auto mag = mx::power(mx::array(2.0f), mx::astype(mx::random::randint(-1, 2, {1, rows, k}, mx::int32, keys.next()), mx::float32));
  auto sign = mx::where(mx::random::bernoulli(mx::array(0.5f), {1, rows, k}, keys.next()), mx::array(1.0f), mx::array(-1.0f));
  auto x = mx::astype(mx::multiply(mag, sign), t);
  mx::eval(x);
  return x;
}

// Float64 products of the M rows of x with every row of m, and each one's magnitude bound (the
// float32 part of the tolerance).
struct Products {
  std::vector<double> ref, bound;  // [rows, n]
};

// A dense matrix's products: a lane's K / V chained products (V values a 16-byte load) and the
// warp's reduction, 2^-24 (K / V + 16) sum_k |x_k w_k| (tests/cuda_kernels/affine_qmv_test.cpp).
Products dense_products(const std::vector<double>& x, int rows, const QmvMatrix& m) {
  const int n = m.w.shape(0), k = static_cast<int>(x.size()) / rows;
  const auto w = host(m.w);
  const double sums = double(k) / (16.0 / mx::size_of(m.w.dtype())) + 16.0;
  Products p{std::vector<double>(size_t(rows) * n), std::vector<double>(size_t(rows) * n)};
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (int i = 0; i < k; ++i) {
        const double v = x[size_t(r) * k + i] * w[size_t(j) * k + i];
        ref += v;
        mag += std::abs(v);
      }
      p.ref[size_t(r) * n + j] = ref;
      p.bound[size_t(r) * n + j] = std::ldexp(sums * mag, -24);
    }
  return p;
}

Products products(const std::vector<double>& x, int rows, const QmvMatrix& m) {
  if (m.is_dense()) return dense_products(x, rows, m);
  const int n = m.w.shape(0), k = static_cast<int>(x.size()) / rows, groups = k / m.group_size;
  const auto s = host(m.scales), b = host(m.biases);
  mx::eval(m.w);
  const uint32_t* w = m.w.data<uint32_t>();
  const int per_word = 32 / m.bits, words = k / per_word, per_load = 128 / m.bits;
  const uint32_t mask = (1u << m.bits) - 1u;
  const double lift = std::ldexp(1.0, m.bits), sums = 3.0 * per_load + double(k) / per_load + 16.0;
  Products p{std::vector<double>(size_t(rows) * n), std::vector<double>(size_t(rows) * n)};
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (int i = 0; i < k; ++i) {
        const uint32_t q = (w[size_t(j) * words + i / per_word] >> (m.bits * (i % per_word))) & mask;
        const double sc = s[size_t(j) * groups + i / m.group_size], bi = b[size_t(j) * groups + i / m.group_size];
        const double xv = x[size_t(r) * k + i];
        ref += xv * (sc * q + bi);
        mag += std::abs(xv) * (std::abs(sc) * lift + std::abs(bi));
      }
      p.ref[size_t(r) * n + j] = ref;
      p.bound[size_t(r) * n + j] = std::ldexp(sums * mag, -24);
    }
  return p;
}

// Every element of got within tol(i) of want(i); reports the first few that are not.
template <class Want, class Tol>
void expect_close(const std::string& what, const std::vector<double>& got, Want want, Tol tol) {
  size_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = want(i), t = tol(i), err = std::abs(got[i] - w);
    if (!(err <= t) && bad++ < 5) ADD_FAILURE() << what << ": [" << i << "] = " << got[i] << ", float64 " << w << ", tolerance " << t;
    if (t > 0) worst = std::max(worst, err / t);
  }
  EXPECT_EQ(bad, 0u) << what;
  std::printf("%s: largest error / tolerance %.3g\n", what.c_str(), worst);
}

struct Case {
  int n, k, rows, group_size, bits;
  mx::Dtype x_type;
};

std::string describe(const char* kernel, const Case& c) {
  std::ostringstream s;
  s << kernel << " N " << c.n << " K " << c.k << " rows " << c.rows << " g" << c.group_size << " " << c.bits << "-bit "
    << c.x_type;
  return s.str();
}

class FusedQmv : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(kernel_tests::use_kernel_device()) << "these tests need a CUDA device";
  }
};

TEST_F(FusedQmv, RmsNormQkvIsTheNormThenThreeProducts) {
  const Case cases[] = {{512, 1024, 1, 64, 4, mx::bfloat16}, {333, 2048, 3, 128, 4, mx::float16},
                        {256, 512, 4, 32, 8, mx::float32},  {1024, 4096, 1, 64, 8, mx::bfloat16},
                        {1024, 4096, 1, 0, 0, mx::bfloat16}, {300, 1024, 3, 0, 0, mx::float16},
                        {128, 576, 2, 0, 0, mx::float32}};
  int seed = 1;
  for (const auto& c : cases) {
    Keys keys(seed++);
    const auto x = exact_square_x(keys, c.rows, c.k, c.x_type);
    const auto nw = mx::astype(mx::random::normal({c.k}, mx::float32, keys.next()), c.x_type);
    const float eps = 1e-6f;
    // The three matrices of a GQA layer: q the widest, k and v a quarter (at least one block).
    const QmvMatrix q = random_matrix(keys, c.n, c.k, c.group_size, c.bits, c.x_type);
    const QmvMatrix k = random_matrix(keys, std::max(1, c.n / 4), c.k, c.group_size, c.bits, c.x_type);
    const QmvMatrix v = random_matrix(keys, std::max(1, c.n / 4) + 3, c.k, c.group_size, c.bits, c.x_type);
    const auto launch = rms_norm_qkv_launch(x, {nw, eps}, q, k, v);
    ASSERT_TRUE(launch.has_value()) << describe("qkv", c);
    const auto ys = kernel_tests::run(*launch);
    const auto xn = host(mx::fast::rms_norm(x, nw, eps));  // exact: see the file's comment
    const double u = half_ulp(c.x_type);
    const QmvMatrix* mats[] = {&q, &k, &v};
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(ys[i].shape(), (mx::Shape{1, c.rows, mats[i]->w.shape(0)}));
      ASSERT_EQ(ys[i].dtype(), c.x_type);
      const auto p = products(xn, c.rows, *mats[i]);
      expect_close(describe("qkv", c) + " output " + std::to_string(i), host(ys[i]),
                   [&](size_t j) { return p.ref[j]; }, [&](size_t j) { return u * std::abs(p.ref[j]) + p.bound[j]; });
    }
  }
}

TEST_F(FusedQmv, RmsNormSwigluIsSiluOfGateTimesUp) {
  const Case cases[] = {{1536, 1024, 1, 64, 4, mx::bfloat16}, {777, 512, 2, 32, 8, mx::float16},
                        {300, 2048, 4, 128, 4, mx::float32},  {3072, 1024, 1, 0, 0, mx::bfloat16},
                        {500, 2048, 2, 0, 0, mx::float16}};
  int seed = 50;
  for (const auto& c : cases) {
    Keys keys(seed++);
    const auto x = exact_square_x(keys, c.rows, c.k, c.x_type);
    const auto nw = mx::astype(mx::random::normal({c.k}, mx::float32, keys.next()), c.x_type);
    const QmvMatrix gate = random_matrix(keys, c.n, c.k, c.group_size, c.bits, c.x_type);
    const QmvMatrix up = random_matrix(keys, c.n, c.k, c.group_size, c.bits, c.x_type);
    const auto launch = rms_norm_swiglu_launch(x, {nw, 1e-5f}, gate, up);
    ASSERT_TRUE(launch.has_value()) << describe("swiglu", c);
    const auto y = kernel_tests::run(*launch)[0];
    ASSERT_EQ(y.shape(), (mx::Shape{1, c.rows, c.n}));
    const auto xn = host(mx::fast::rms_norm(x, nw, 1e-5f));
    const auto g = products(xn, c.rows, gate), v = products(xn, c.rows, up);
    const double u = half_ulp(c.x_type);
    auto silu = [](double a) { return a / (1.0 + std::exp(-a)); };
    // Each product off by its bound and its rounding to the output type; |silu'| <= 1.1; then the
    // sigmoid, silu and the product each rounded once more.
    expect_close(
        describe("swiglu", c), host(y), [&](size_t j) { return silu(g.ref[j]) * v.ref[j]; },
        [&](size_t j) {
          const double eg = u * std::abs(g.ref[j]) + g.bound[j], ev = u * std::abs(v.ref[j]) + v.bound[j];
          const double s = std::abs(silu(g.ref[j]));
          return 1.1 * eg * (std::abs(v.ref[j]) + ev) + s * ev + 4 * u * (s + 1.1 * eg) * (std::abs(v.ref[j]) + ev) + 1e-30;
        });
  }
}

TEST_F(FusedQmv, QmvResidualAddsTheRoundedProduct) {
  const Case cases[] = {{1024, 3072, 1, 64, 4, mx::bfloat16}, {513, 1024, 3, 128, 8, mx::float16},
                        {200, 4096, 4, 32, 4, mx::float32},   {1024, 3072, 1, 0, 0, mx::bfloat16},
                        {77, 1000, 3, 0, 0, mx::float32}};
  int seed = 90;
  for (const auto& c : cases) {
    Keys keys(seed++);
    const auto x = mx::astype(mx::random::normal({1, c.rows, c.k}, mx::float32, keys.next()), c.x_type);
    const auto res = mx::astype(mx::random::normal({1, c.rows, c.n}, mx::float32, keys.next()), c.x_type);
    const QmvMatrix m = random_matrix(keys, c.n, c.k, c.group_size, c.bits, c.x_type);
    const auto launch = qmv_residual_launch(x, m, res);
    ASSERT_TRUE(launch.has_value()) << describe("residual", c);
    const auto y = kernel_tests::run(*launch)[0];
    ASSERT_EQ(y.shape(), res.shape());
    const auto p = products(host(x), c.rows, m);
    const auto r = host(res);
    const double u = half_ulp(c.x_type);
    expect_close(
        describe("residual", c), host(y), [&](size_t j) { return r[j] + p.ref[j]; },
        [&](size_t j) { return u * std::abs(p.ref[j]) + p.bound[j] + u * (std::abs(r[j] + p.ref[j]) + p.bound[j]); });
  }
}

TEST_F(FusedQmv, DeclinesWhatItDoesNotFuse) {
  Keys keys(7);
  const QmvMatrix a = random_matrix(keys, 128, 512, 64, 4, mx::bfloat16);
  const QmvMatrix eight = random_matrix(keys, 128, 512, 64, 8, mx::bfloat16);
  const auto nw = mx::ones({512}, mx::bfloat16);
  const auto x = mx::ones({1, 1, 512}, mx::bfloat16);
  EXPECT_TRUE(rms_norm_qkv_launch(x, {nw, 1e-6f}, a, a, a).has_value());
  EXPECT_FALSE(rms_norm_qkv_launch(x, {nw, 1e-6f}, a, eight, a).has_value());                    // mixed bits
  const QmvMatrix dense = random_matrix(keys, 128, 512, 0, 0, mx::bfloat16);
  EXPECT_TRUE(rms_norm_qkv_launch(x, {nw, 1e-6f}, dense, dense, dense).has_value());
  EXPECT_FALSE(rms_norm_qkv_launch(x, {nw, 1e-6f}, dense, a, dense).has_value());               // dense with quantized
  EXPECT_FALSE(qmv_residual_launch(mx::ones({1, 1, 512}, mx::float32), random_matrix(keys, 64, 512, 0, 0, mx::bfloat16),
                            mx::ones({1, 1, 64}, mx::float32)));                          // dense of another type
  EXPECT_FALSE(rms_norm_qkv_launch(mx::ones({1, 5, 512}, mx::bfloat16), {nw, 1e-6f}, a, a, a));  // 5 rows
  EXPECT_FALSE(rms_norm_qkv_launch(x, {mx::ones({512}, mx::float32), 1e-6f}, a, a, a));         // norm dtype
  EXPECT_FALSE(rms_norm_swiglu_launch(x, {nw, 1e-6f}, a, random_matrix(keys, 64, 512, 64, 4, mx::bfloat16)));  // shapes
  EXPECT_FALSE(qmv_residual_launch(x, a, mx::ones({1, 1, 64}, mx::bfloat16)));                   // residual shape
  EXPECT_FALSE(qmv_residual_launch(x, a, mx::ones({1, 1, 128}, mx::float32)));                   // residual dtype
}

// The model's functions: the launch through CachedKernel on a CUDA GPU, declined elsewhere.
TEST_F(FusedQmv, TheModelsFunctionsRunTheLaunchOnlyOnAGpu) {
  Keys keys(8);
  const QmvMatrix a = random_matrix(keys, 128, 512, 64, 4, mx::bfloat16);
  const auto nw = mx::ones({512}, mx::bfloat16);
  const auto x = exact_square_x(keys, 1, 512, mx::bfloat16);
  const auto res = mx::ones({1, 1, 128}, mx::bfloat16);
  if (kernel_tests::kernels_on_gpu()) {
    const auto qkv = rms_norm_qkv(x, {nw, 1e-6f}, a, a, a);
    ASSERT_TRUE(qkv.has_value());
    const auto launched = kernel_tests::run(*rms_norm_qkv_launch(x, {nw, 1e-6f}, a, a, a));
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(mx::array_equal((*qkv)[i], launched[i]).item<bool>());
    ASSERT_TRUE(rms_norm_swiglu(x, {nw, 1e-6f}, a, a).has_value());
    ASSERT_TRUE(qmv_residual(x, a, res).has_value());
  } else {
    EXPECT_FALSE(rms_norm_qkv(x, {nw, 1e-6f}, a, a, a).has_value());
    EXPECT_FALSE(rms_norm_swiglu(x, {nw, 1e-6f}, a, a).has_value());
    EXPECT_FALSE(qmv_residual(x, a, res).has_value());
  }
}

}  // namespace
}  // namespace mlxrt::kernels::cuda
