// CachedKernel (kernels/cuda/cached_kernel.h): a repeated launch reuses its primitive and still
// computes each call's own inputs; a launch that differs in anything the primitive holds gets its
// own. Needs a CUDA device.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <mlx/backend/cuda/cuda.h>
#include <mlx/fast.h>
#include <mlx/fast_primitives.h>
#include <mlx/ops.h>
#include <mlx/transforms.h>
#include <mlx/version.h>

#include "mlxrt/kernels/cuda/cached_kernel.h"
#include "mlxrt/kernels/cuda/mlx_kernel_cache.h"

namespace mlxrt::kernels::cuda {
namespace {

constexpr const char* kScale = R"(
  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) out[i] = static_cast<T>(static_cast<float>(inp[i]) * S);
)";

std::vector<float> host(const mx::array& a) {
  auto f = mx::astype(a, mx::float32);
  mx::eval(f);
  return {f.data<float>(), f.data<float>() + f.size()};
}

TEST(CachedKernel, RepeatedLaunchesShareOnePrimitive) {
  if (!mx::cu::is_available()) GTEST_SKIP() << "needs a CUDA device";
  const CachedKernel kernel(KernelSpec{"mlxrt_test_scale", {"inp"}, {"out"}, kScale, ""});
  auto launch = [&](const mx::array& x, int s, std::tuple<int, int, int> grid = {64, 1, 1}) {
    return kernel({x}, {x.shape()}, {x.dtype()}, grid, {32, 1, 1},
                  {{"T", x.dtype()}, {"N", static_cast<int>(x.size())}, {"S", s}}, std::nullopt, false, {})[0];
  };
  const auto a = mx::arange(0.0f, 50.0f, 1.0f), b = mx::multiply(mx::arange(0.0f, 50.0f, 1.0f), mx::array(-1.0f));
  auto ya = launch(a, 3), yb = launch(b, 3);
  EXPECT_EQ(ya.primitive_ptr().get(), yb.primitive_ptr().get()) << "the same launch builds one primitive";
  auto yc = launch(a, 5);
  auto yd = launch(mx::astype(a, mx::bfloat16), 3);
  auto ye = launch(a, 3, {96, 1, 1});
  for (const auto& other : {yc, yd, ye})
    EXPECT_NE(ya.primitive_ptr().get(), other.primitive_ptr().get()) << "a template value, a type or a grid differs";
  // Both nodes sharing the primitive in one graph, each with its own inputs.
  const auto sum = mx::add(ya, yb);
  const auto got_a = host(ya), got_b = host(yb), got_c = host(yc);
  const auto got_d = host(yd), got_e = host(ye), got_sum = host(sum);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(got_a[i], 3.0f * i);
    EXPECT_EQ(got_b[i], -3.0f * i);
    EXPECT_EQ(got_c[i], 5.0f * i);
    EXPECT_EQ(got_d[i], 3.0f * i);
    EXPECT_EQ(got_e[i], 3.0f * i);
    EXPECT_EQ(got_sum[i], 0.0f);
  }
  // After evaluation the graph is detached; the cache still gives the next call a working node.
  EXPECT_EQ(host(launch(b, 3))[7], -21.0f);
}

// The self-compiled route (MLXRT_CUDA_SELF_COMPILE=1): a new primitive's kernel is compiled by
// mlxrt and written into MLX's kernel cache under MLX's module name; MLX loads it from there and
// launches it with its own arguments (the shape the body reads included).
constexpr const char* kScaleByShape = R"(
  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < inp_shape[0] * inp_shape[1]) out[i] = static_cast<T>(static_cast<float>(inp[i]) * S);
)";

TEST(CachedKernel, SelfCompiledKernelIsWhereMlxLooksAndComputesTheSame) {
  if (!mx::cu::is_available()) GTEST_SKIP() << "needs a CUDA device";
  const char* before = std::getenv("MLXRT_CUDA_SELF_COMPILE");
  setenv("MLXRT_CUDA_SELF_COMPILE", "1", 1);
  // A source no earlier run has cached: the kernel's text carries this process's id.
  const std::string body = std::string(kScaleByShape) + "  // " + std::to_string(::getpid()) + "\n";
  const CachedKernel kernel(KernelSpec{"mlxrt_test_scale_by_shape", {"inp"}, {"out"}, body, ""});
  EXPECT_TRUE(kernel.self_compiled()) << "NVRTC or the CUDA headers were not found (see stderr)";
  auto launch = [&](const mx::array& x, int s) {
    return kernel({x}, {x.shape()}, {x.dtype()}, {static_cast<int>(x.size()), 1, 1}, {32, 1, 1},
                  {{"T", x.dtype()}, {"S", s}}, std::nullopt, false, {})[0];
  };
  const auto a = mx::reshape(mx::arange(0.0f, 60.0f, 1.0f), {6, 10});
  auto ya = launch(a, 3), yb = launch(mx::astype(a, mx::bfloat16), 2);
  for (const auto* y : {&ya, &yb}) {
    const auto state = static_cast<const mx::fast::CustomKernel&>(y->primitive()).state();
    const auto module = mlx_custom_kernel_module(std::get<0>(state), std::get<1>(state));
    EXPECT_TRUE(std::filesystem::exists(mlx_module_path(mlx_ptx_cache_dir(mx::version()), module))) << module;
  }
  const auto got_a = host(ya), got_b = host(yb);
  for (int i = 0; i < 60; ++i) {
    EXPECT_EQ(got_a[i], 3.0f * i);
    EXPECT_EQ(got_b[i], 2.0f * i);
  }
  if (before) setenv("MLXRT_CUDA_SELF_COMPILE", before, 1);
  else unsetenv("MLXRT_CUDA_SELF_COMPILE");
}

}  // namespace
}  // namespace mlxrt::kernels::cuda
