#pragma once
// What the tests in tests/cuda_kernels share: operands drawn from MLX's generator, float64
// products of x with a matrix (affine or dense) and each one's float32 bound, and the element-wise
// comparison. The bound of a product (tests/cuda_kernels/affine_qmv_test.cpp derives it):
//   |p - ref| <= 2^-24 (3 V + K / V + 16) sum_k |x_k| (|s_k| 2^bits + |b_k|)   (affine)
//   |p - ref| <= 2^-24 (K / V + 16) sum_k |x_k w_k|                           (dense)
// with V the values a 16-byte load holds; the output's rounding adds a half ulp of |ref|.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <mlx/ops.h>
#include <mlx/random.h>
#include <mlx/transforms.h>

#include "mlxrt/kernels/cuda/fused_qmv.h"

namespace mlxrt::kernels::cuda::kernel_tests {

inline std::vector<double> host(const mx::array& a) {
  auto f = mx::astype(a, mx::float32);
  mx::eval(f);
  return {f.data<float>(), f.data<float>() + f.size()};
}

inline double half_ulp(mx::Dtype t) { return t == mx::bfloat16 ? std::ldexp(1.0, -8) : t == mx::float16 ? std::ldexp(1.0, -11) : 0.0; }

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
inline QmvMatrix random_matrix(Keys& keys, int n, int k, int group_size, int bits, mx::Dtype params) {
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
inline mx::array exact_square_x(Keys& keys, int rows, int k, mx::Dtype t) {
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

// The float64 products of the rows of x with the n rows of w ([n, k] values), each one's bound
// 2^-24 sums sum_k |x_k w_k| (`sums`: the float32 roundings one output's sum goes through).
inline Products float64_products(const std::vector<double>& x, int rows, const std::vector<double>& w, int n,
                                 double sums) {
  const int k = static_cast<int>(x.size()) / rows;
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

// A dense matrix's products: a lane's K / V chained products (V values a 16-byte load) and the
// warp's reduction, 2^-24 (K / V + 16) sum_k |x_k w_k| (tests/cuda_kernels/affine_qmv_test.cpp).
inline Products dense_products(const std::vector<double>& x, int rows, const QmvMatrix& m) {
  const int k = static_cast<int>(x.size()) / rows;
  return float64_products(x, rows, host(m.w), m.w.shape(0), double(k) / (16.0 / mx::size_of(m.w.dtype())) + 16.0);
}

inline Products products(const std::vector<double>& x, int rows, const QmvMatrix& m) {
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

// The products of one row of x with the 4-bit rows of m as the int8 path computes them
// (DecoderLayerGrid::q8): each 32 values of x quantized as the kernel quantizes them (float32: d =
// max |x| / 127, q = round(x * (127 / max |x|)), ties to even), then sum over the groups of
// s sum(q_w d q_x) + b sum(x), in float64. The bound: the float32 roundings of the kernel's sums
// (each chunk's sum of x, s d, the product with the integer sum, the accumulation over a lane's
// chunks and the warp's reduction) over the terms' magnitudes.
inline Products q8_products(const std::vector<double>& x, const QmvMatrix& m) {
  const int n = m.w.shape(0), k = static_cast<int>(x.size()), groups = k / m.group_size;
  const auto s = host(m.scales), b = host(m.biases);
  mx::eval(m.w);
  const uint32_t* w = m.w.data<uint32_t>();
  const int words = k / 8;
  std::vector<double> xh(k);  // d q_x
  for (int c = 0; c < k / 32; ++c) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::abs(static_cast<float>(x[32 * c + j])));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f, d = amax / 127.0f;
    for (int j = 0; j < 32; ++j)
      xh[32 * c + j] = static_cast<double>(d) * std::nearbyint(static_cast<float>(x[32 * c + j]) * inv);
  }
  const double sums = 32.0 + double(k) / 32 + 16.0;
  Products p{std::vector<double>(n), std::vector<double>(n)};
  for (int j = 0; j < n; ++j) {
    double ref = 0, mag = 0;
    for (int i = 0; i < k; ++i) {
      const uint32_t q = (w[size_t(j) * words + i / 8] >> (4 * (i % 8))) & 15u;
      const double sc = s[size_t(j) * groups + i / m.group_size], bi = b[size_t(j) * groups + i / m.group_size];
      ref += sc * q * xh[i] + bi * x[i];
      mag += std::abs(sc) * 16 * std::abs(xh[i]) + std::abs(bi * x[i]);
    }
    p.ref[j] = ref;
    p.bound[j] = std::ldexp(sums * mag, -24);
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

}  // namespace mlxrt::kernels::cuda::kernel_tests
