#pragma once
// One block of x quantized as l3_qmm_args.h defines (two int8 levels), written once over a vector
// type of W float lanes (the instruction-set files' Vec512Vnni, Vec256Dot); included only by
// those files, compiled with -ffp-contract=off. Each value goes through the same IEEE operations
// as the scalar definition (tests/unit/kernels/cpu_l3_matmul_test.cpp): a maximum is exact in any
// order, and the integer sums are exact, so the bits are the scalar code's. It was a tenth of a
// 512-row prefill and 4% of a decode step in scalar code.

#include <cstdint>
#include <limits>

#include "mlxrt/kernels/cpu/l3_qmm_args.h"

namespace mlxrt::kernels::cpu::detail {

template <class V>
struct L3QuantizeBlock {
  using F = typename V::F;
  using I = typename V::I;
  static constexpr int W = V::kWidth;
  static constexpr int kVectors = kL3Block / W;

  // One level of v: d = max|v| / 127, q = nearbyint(v * (127 / max|v|)) clamped to ±127 (0 for a
  // NaN product; all 0 where max|v| is 0; d NaN where v holds a NaN); the q as int32 lanes and
  // their sum.
  static int level(const F (&v)[kVectors], I (&q)[kVectors], float& d) {
    F amax = V::abs(v[0]);
    bool nan = V::any_nan(v[0]);
    for (int c = 1; c < kVectors; ++c) {
      amax = V::max(amax, V::abs(v[c]));
      nan = nan || V::any_nan(v[c]);
    }
    float m = nan ? std::numeric_limits<float>::quiet_NaN() : V::hmax(amax);
    d = m / 127.0f;
    const F inverse = V::set1(m != 0.0f ? 127.0f / m : 0.0f);
    const F round = V::set1(12582912.0f);  // 1.5 · 2^23: nearest even without a call per value
    I sum = V::zeroi();
    for (int c = 0; c < kVectors; ++c) {
      const F y = V::mul(v[c], inverse);
      const F r = V::sub(V::add(y, round), round);
      q[c] = V::clamp127_to_int(r);
      sum = V::addi(sum, q[c]);
    }
    return V::hsumi(sum);
  }

  // The 32 floats at x: the levels' values (int8, in k order) into q1 and q2, their scales and
  // sums.
  static void run(const float* x, std::int8_t* q1, std::int8_t* q2, float* d, int* sums) {
    F v[kVectors], rest[kVectors];
    I q[kVectors];
    for (int c = 0; c < kVectors; ++c) v[c] = V::load(x + c * W);
    sums[0] = level(v, q, d[0]);
    const F d1 = V::set1(d[0]);
    for (int c = 0; c < kVectors; ++c) {
      V::store_i8(q1 + c * W, q[c]);
      rest[c] = V::sub(v[c], V::mul(d1, V::to_float(q[c])));
    }
    sums[1] = level(rest, q, d[1]);
    for (int c = 0; c < kVectors; ++c) V::store_i8(q2 + c * W, q[c]);
  }
};

}  // namespace mlxrt::kernels::cpu::detail
