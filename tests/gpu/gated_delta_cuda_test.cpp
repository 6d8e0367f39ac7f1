// The fused CUDA kernels of the gated delta net (gated_delta_cuda.h) against the ops path they
// replace, byte for byte, on random data of Qwen3.5's dims and of odd ones. Needs a CUDA device:
// built as its own executable (not registered with CTest, which runs on CPU machines) and run by
// the GPU harness, bench/gpu/run.sh kernels. Without a CUDA device every test fails.
#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>
#include <mlx/backend/cuda/cuda.h>
#include <mlx/ops.h>
#include <mlx/random.h>
#include <mlx/transforms.h>

#include "mlxrt/model/nn/activations.h"
#include "mlxrt/model/nn/gated_delta.h"
#include "mlxrt/model/nn/gated_delta_cuda.h"

namespace mlxrt::model {
namespace {

namespace mx = mlx::core;

size_t differing(mx::array a, mx::array b) {
  EXPECT_EQ(a.dtype(), b.dtype());
  EXPECT_EQ(a.shape(), b.shape());
  const auto bits = mx::size_of(a.dtype()) == 2 ? mx::uint16 : mx::uint32;
  auto n = mx::sum(mx::not_equal(mx::view(a, bits), mx::view(b, bits)));
  return n.item<uint32_t>();
}

// Runs f with the ops path forced (the fused kernels off), as mlx-lm computes on CUDA.
template <typename F>
auto with_ops_path(F f) {
  setenv("MLXRT_GATED_DELTA_OPS", "1", 1);
  auto out = f();
  mx::eval(out.first, out.second);
  unsetenv("MLXRT_GATED_DELTA_OPS");
  return out;
}

struct Shape {
  int B, T, Hk, Hv, Dk, Dv;
};

class FusedGatedDelta : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(mx::cu::is_available()) << "these tests need a CUDA device";
    mx::set_default_device(mx::Device::gpu);
  }
};

TEST_F(FusedGatedDelta, StepBytesEqualTheOpsPath) {
  const Shape shapes[] = {{1, 1, 16, 32, 128, 128}, {1, 67, 16, 32, 128, 128}, {2, 9, 2, 4, 64, 32},
                          {3, 3, 4, 8, 96, 16},     {1, 5, 2, 4, 256, 128}};
  int seed = 1;
  for (auto dtype : {mx::bfloat16, mx::float16, mx::float32})
    for (const auto& s : shapes) {
      auto key = mx::random::key(seed++);
      auto next = [&key]() {
        auto parts = mx::random::split(key);
        key = parts.first;
        return parts.second;
      };
      auto [q, k] = nn::normalize_qk(mx::random::normal({s.B, s.T, s.Hk, s.Dk}, dtype, next()),
                                     mx::random::normal({s.B, s.T, s.Hk, s.Dk}, dtype, next()),
                                     1 / std::sqrt(static_cast<double>(s.Dk)), 1e-6);
      auto v = mx::random::normal({s.B, s.T, s.Hv, s.Dv}, dtype, next());
      auto a = mx::random::normal({s.B, s.T, s.Hv}, dtype, next());
      auto b = mx::random::normal({s.B, s.T, s.Hv}, dtype, next());
      auto A_log = mx::random::uniform(mx::array(0.0f), mx::array(2.0f), {s.Hv}, mx::float32, next());
      auto dt_bias = mx::random::normal({s.Hv}, dtype, next());
      auto state = mx::multiply(mx::random::normal({s.B, s.Hv, s.Dv, s.Dk}, mx::float32, next()), mx::array(0.1f));
      auto g = nn::compute_g(A_log, a, dt_bias);
      auto beta = mx::sigmoid(b);
      ASSERT_TRUE(nn::fused_gated_delta_applies(q, k, v, g, beta, state));
      auto fused = nn::gated_delta_ops(q, k, v, g, beta, state);
      auto ops = with_ops_path([&] { return nn::gated_delta_ops(q, k, v, g, beta, state); });
      EXPECT_EQ(differing(fused.first, ops.first), 0u) << "y, dtype " << dtype << " T " << s.T << " Dk " << s.Dk;
      EXPECT_EQ(differing(fused.second, ops.second), 0u) << "state, dtype " << dtype << " T " << s.T;
      // The state-only replay takes the same kernel for every prefix.
      for (int n : {1, s.T}) {
        auto replayed = nn::gated_delta_replay_state(k, v, a, b, A_log, dt_bias, state, n);
        auto replayed_ops = with_ops_path([&] {
          return std::pair{nn::gated_delta_replay_state(k, v, a, b, A_log, dt_bias, state, n), mx::array(0.0f)};
        });
        EXPECT_EQ(differing(replayed, replayed_ops.first), 0u) << "replay n " << n;
      }
    }
}

TEST_F(FusedGatedDelta, ConvSiluBytesEqualCuDnnAndTheCompiledSilu) {
  struct ConvShape {
    int B, T, C, K;
  };
  const ConvShape shapes[] = {{1, 1, 8192, 4}, {1, 600, 8192, 4}, {2, 33, 384, 4}, {1, 2048, 8192, 4}, {1, 7, 96, 3}};
  int seed = 100;
  for (auto dtype : {mx::bfloat16, mx::float16})
    for (const auto& s : shapes) {
      auto x = mx::astype(mx::multiply(mx::random::normal({s.B, s.T + s.K - 1, s.C}, mx::float32,
                                                          mx::random::key(seed++)),
                                       mx::array(2.0f)),
                          dtype);
      auto w = mx::astype(
          mx::multiply(mx::random::normal({s.C, s.K, 1}, mx::float32, mx::random::key(seed++)), mx::array(0.5f)),
          dtype);
      ASSERT_TRUE(nn::fused_conv_silu_applies(x, w));
      auto fused = nn::conv_silu_fused(x, w);
      auto ops = nn::silu(mx::conv1d(x, w, 1, 0, 1, s.C));
      EXPECT_EQ(differing(fused, ops), 0u) << "dtype " << dtype << " T " << s.T << " C " << s.C;
    }
}

TEST_F(FusedGatedDelta, OffWhenTheEnvironmentAsksForTheOpsPath) {
  auto q = mx::zeros({1, 2, 1, 128}, mx::bfloat16);
  auto v = mx::zeros({1, 2, 1, 128}, mx::bfloat16);
  auto g = mx::zeros({1, 2, 1}, mx::float32);
  auto state = mx::zeros({1, 1, 128, 128}, mx::float32);
  EXPECT_TRUE(nn::fused_gated_delta_applies(q, q, v, g, g, state));
  setenv("MLXRT_GATED_DELTA_OPS", "1", 1);
  EXPECT_FALSE(nn::fused_gated_delta_applies(q, q, v, g, g, state));
  unsetenv("MLXRT_GATED_DELTA_OPS");
  // float32 convolutions keep cuDNN (its float32 sums differ from an ascending loop).
  EXPECT_FALSE(nn::fused_conv_silu_applies(mx::zeros({1, 4, 8}, mx::float32), mx::zeros({8, 4, 1}, mx::float32)));
}

}  // namespace
}  // namespace mlxrt::model
