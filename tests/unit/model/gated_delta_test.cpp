// The gated delta recurrence's state-only prefix replay: for every prefix length n of a window, the
// state it returns is byte-for-byte the state a forward over those n positions leaves (what
// rolling back a rejected speculative window relies on).
#include <cstring>

#include <gtest/gtest.h>
#include <mlx/ops.h>
#include <mlx/random.h>
#include <mlx/transforms.h>

#include "mlxrt/model/nn/gated_delta.h"
#include "mlxrt/model/nn/gated_delta_cuda.h"

namespace mlxrt::model {
namespace {

namespace mx = mlx::core;

bool same_bytes(mx::array a, mx::array b) {
  mx::eval({a, b});
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  a = mx::contiguous(a);
  b = mx::contiguous(b);
  mx::eval({a, b});
  return std::memcmp(a.data<char>(), b.data<char>(), a.nbytes()) == 0;
}

mx::array prefix(const mx::array& x, int n) {
  mx::Shape start(x.ndim(), 0), stop = x.shape();
  stop[1] = n;
  return mx::slice(x, start, stop);
}

struct Window {
  mx::array q, k, v, a, b, A_log, dt_bias, state;
};

// B = 1, T positions, 2 key heads of 32, 4 value heads of 16, in the model's dtype; the state in
// float32, as the layers keep it.
Window random_window(int T, mx::Dtype dtype, int seed) {
  auto key = mx::random::key(seed);
  auto next = [&key]() {
    auto parts = mx::random::split(key);
    key = parts.first;
    return parts.second;
  };
  auto normal = [&](mx::Shape s, mx::Dtype t) { return mx::random::normal(s, t, next()); };
  auto [q, k] = nn::normalize_qk(normal({1, T, 2, 32}, dtype), normal({1, T, 2, 32}, dtype), 1 / std::sqrt(32.0), 1e-6);
  return {q,
          k,
          normal({1, T, 4, 16}, dtype),
          normal({1, T, 4}, dtype),
          normal({1, T, 4}, dtype),
          mx::log(mx::random::uniform(mx::array(1.0f), mx::array(16.0f), {4}, mx::float32, next())),
          mx::astype(mx::ones({4}), dtype),
          mx::multiply(normal({1, 4, 16, 32}, mx::float32), mx::array(0.1f))};
}

TEST(GatedDeltaReplay, StateAfterEveryPrefixEqualsTheForwardOverIt) {
  for (auto dtype : {mx::bfloat16, mx::float16, mx::float32}) {
    const int T = 6;
    auto w = random_window(T, dtype, 7);
    for (int n = 0; n <= T; ++n) {
      auto replayed = nn::gated_delta_replay_state(w.k, w.v, w.a, w.b, w.A_log, w.dt_bias, w.state, n);
      mx::array forward = w.state;
      if (n > 0)
        forward = nn::gated_delta_update(prefix(w.q, n), prefix(w.k, n), prefix(w.v, n), prefix(w.a, n),
                                         prefix(w.b, n), w.A_log, w.dt_bias, w.state)
                      .second;
      EXPECT_TRUE(same_bytes(replayed, forward)) << "n = " << n << " dtype " << dtype;
    }
  }
}

TEST(GatedDeltaReplay, StartsFromZerosWithoutAState) {
  auto w = random_window(3, mx::bfloat16, 11);
  auto replayed = nn::gated_delta_replay_state(w.k, w.v, w.a, w.b, w.A_log, w.dt_bias, std::nullopt, 2);
  auto forward = nn::gated_delta_update(prefix(w.q, 2), prefix(w.k, 2), prefix(w.v, 2), prefix(w.a, 2),
                                        prefix(w.b, 2), w.A_log, w.dt_bias, std::nullopt)
                     .second;
  EXPECT_TRUE(same_bytes(replayed, forward));
  EXPECT_EQ(replayed.dtype(), mx::float32);
}

TEST(GatedDeltaReplay, RefusesAPrefixOutsideTheWindow) {
  auto w = random_window(3, mx::bfloat16, 3);
  EXPECT_THROW(nn::gated_delta_replay_state(w.k, w.v, w.a, w.b, w.A_log, w.dt_bias, w.state, 4),
               std::invalid_argument);
  EXPECT_THROW(nn::gated_delta_replay_state(w.k, w.v, w.a, w.b, w.A_log, w.dt_bias, w.state, -1),
               std::invalid_argument);
}

TEST(FusedGatedDeltaKernels, AreNotUsedOffCuda) {
  // The fused kernels exist for CUDA only (tests/gpu proves their bytes there): on the CPU the
  // ops path runs, whatever the inputs.
  auto w = random_window(4, mx::bfloat16, 5);
  auto g = nn::compute_g(w.A_log, w.a, w.dt_bias);
  auto beta = mx::sigmoid(w.b);
  auto qr = mx::repeat(w.q, 2, -2), kr = mx::repeat(w.k, 2, -2);
  EXPECT_FALSE(nn::fused_gated_delta_applies(w.q, w.k, w.v, g, beta, w.state));
  EXPECT_FALSE(nn::fused_gated_delta_applies(qr, kr, w.v, g, beta, w.state));
  EXPECT_FALSE(nn::fused_conv_silu_applies(mx::zeros({1, 5, 8}, mx::bfloat16), mx::zeros({8, 4, 1}, mx::bfloat16)));
}

}  // namespace
}  // namespace mlxrt::model
