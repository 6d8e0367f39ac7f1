// The CPU runtime for CUDA kernels (simt.h, emulated_kernel.h) on small kernels written here: what
// threads, blocks, shared memory, barriers and shuffles compute, and the kernel bugs it names.
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mlx/ops.h>

#include "emulated_kernel.h"
#include "simt.h"

namespace mlxrt::cuda_emu {
namespace {

using kernels::cuda::KernelSpec;
using ::testing::HasSubstr;

std::vector<float> floats(const mx::array& a) { return {a.data<float>(), a.data<float>() + a.size()}; }
std::vector<int32_t> ints(const mx::array& a) { return {a.data<int32_t>(), a.data<int32_t>() + a.size()}; }

mx::array iota(int n) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0.0f);
  return mx::array(v.data(), {n}, mx::float32);
}

TEST(Simt, BlockSumThroughShufflesAndSharedMemory) {
  const KernelSpec spec{"block_sum", {"x"}, {"y"}, R"(
  __shared__ float part[32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float v = x[blockIdx.x * blockDim.x + tid];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (tid == 0) {
    float s = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) s += part[w];
    y[blockIdx.x] = s;
  }
)",
                        ""};
  auto y = emulated_launch(spec, {iota(3 * 128)}, {{3}}, {mx::float32}, {3 * 128, 1, 1}, {128, 1, 1}, {})[0];
  // Block b holds 128b .. 128b + 127: sums 8128 + 16384 b, exact in float32.
  EXPECT_THAT(floats(y), ::testing::ElementsAre(8128.0f, 24512.0f, 40896.0f));
}

TEST(Simt, ShuffleModesAndWidths) {
  const KernelSpec spec{"shuffles", {"x"}, {"y"}, R"(
  const int lane = threadIdx.x;
  const int v = lane;
  y[0 * 32 + lane] = __shfl_down_sync(0xffffffffu, v, 3);
  y[1 * 32 + lane] = __shfl_up_sync(0xffffffffu, v, 3);
  y[2 * 32 + lane] = __shfl_sync(0xffffffffu, v, 5);
  y[3 * 32 + lane] = __shfl_sync(0xffffffffu, v, 3, 16);
  y[4 * 32 + lane] = __shfl_xor_sync(0xffffffffu, v, 4, 8);
  y[5 * 32 + lane] = __shfl_down_sync(0xffffffffu, v, 2, 8);
)",
                        ""};
  auto y = ints(emulated_launch(spec, {mx::zeros({1})}, {{6 * 32}}, {mx::int32}, {32, 1, 1}, {32, 1, 1}, {})[0]);
  for (int lane = 0; lane < 32; ++lane) {
    SCOPED_TRACE(lane);
    EXPECT_EQ(y[0 * 32 + lane], lane + 3 < 32 ? lane + 3 : lane);  // past the warp: its own value
    EXPECT_EQ(y[1 * 32 + lane], lane >= 3 ? lane - 3 : lane);
    EXPECT_EQ(y[2 * 32 + lane], 5);
    EXPECT_EQ(y[3 * 32 + lane], (lane & ~15) + 3);  // within each half-warp
    EXPECT_EQ(y[4 * 32 + lane], lane ^ 4);
    EXPECT_EQ(y[5 * 32 + lane], (lane & 7) + 2 < 8 ? lane + 2 : lane);  // not across groups of 8
  }
}

TEST(Simt, ThreeDimensionalIndices) {
  const KernelSpec spec{"indices", {"x"}, {"y"}, R"(
  const int bx = blockIdx.x, by = blockIdx.y;
  const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int b = bx + gridDim.x * by;
  y[b * (blockDim.x * blockDim.y * blockDim.z) + t] =
      1000 * b + 100 * threadIdx.z + 10 * threadIdx.y + threadIdx.x;
)",
                        ""};
  // Blocks of 4 x 2 x 2 threads; a grid of 3 x 2 blocks (in threads: 12 x 4 x 2).
  auto y = ints(emulated_launch(spec, {mx::zeros({1})}, {{6 * 16}}, {mx::int32}, {12, 4, 2}, {4, 2, 2}, {})[0]);
  for (int b = 0; b < 6; ++b)
    for (int z = 0; z < 2; ++z)
      for (int yy = 0; yy < 2; ++yy)
        for (int x = 0; x < 4; ++x) EXPECT_EQ(y[b * 16 + x + 4 * (yy + 2 * z)], 1000 * b + 100 * z + 10 * yy + x);
}

TEST(Simt, InputsTheirShapesAndUnwrittenOutputs) {
  const KernelSpec spec{"copy_some", {"x"}, {"y"}, R"(
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < x_shape[0] * x_shape[1] && i % 2 == 0) y[i] = x[i] * 2.0f;
)",
                        ""};
  auto x = mx::reshape(iota(6), {2, 3});
  auto y = floats(emulated_launch(spec, {x}, {{6}}, {mx::float32}, {64, 1, 1}, {32, 1, 1}, {})[0]);
  for (int i = 0; i < 6; ++i) {
    if (i % 2 == 0) EXPECT_EQ(y[i], 2.0f * i);
    else EXPECT_TRUE(std::isnan(y[i])) << "an unwritten output reads as NaN";
  }
}

TEST(Simt, AStridedInputIsMadeRowContiguous) {
  const KernelSpec spec{"copy", {"x"}, {"y"}, R"(
  const int i = threadIdx.x;
  if (i < 6) y[i] = x[i];
)",
                        ""};
  auto x = mx::transpose(mx::reshape(iota(6), {2, 3}));  // [[0, 3], [1, 4], [2, 5]]
  auto y = floats(emulated_launch(spec, {x}, {{6}}, {mx::float32}, {32, 1, 1}, {32, 1, 1}, {})[0]);
  EXPECT_THAT(y, ::testing::ElementsAre(0.0f, 3.0f, 1.0f, 4.0f, 2.0f, 5.0f));
}

// A grid-wide barrier of atomics (as a persistent kernel's): the arrivals' counter, and a generation
// the last arrival moves on while the others spin on it.
constexpr const char* kGridBarrier = R"(
__device__ void grid_sync(unsigned* bar) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile unsigned* generation = bar + 1;
    const unsigned g = *generation;
    __threadfence();
    if (atomicAdd(bar, 1u) == gridDim.x * gridDim.y * gridDim.z - 1) {
      atomicExch(bar, 0u);
      __threadfence();
      atomicAdd(bar + 1, 1u);
    } else {
      while (*generation == g) __nanosleep(64);
    }
    __threadfence();
  }
  __syncthreads();
}
)";

TEST(Simt, ResidentBlocksMeetAtAGridBarrier) {
  const KernelSpec spec{"rounds", {"state"}, {"y", "z"}, R"(
  unsigned* bar = const_cast<unsigned*>(state);
  const int b = blockIdx.x, nb = gridDim.x;
  for (int round = 0; round < 3; ++round) {
    if (threadIdx.x == 0) y[b] = static_cast<float>(b + round);
    grid_sync(bar);
    if (threadIdx.x == 0) {
      float s = 0.0f;
      for (int i = 0; i < nb; ++i) s += y[i];
      z[round * nb + b] = s;
    }
    grid_sync(bar);
  }
)",
                        kGridBarrier};
  const int nb = 8;
  auto out = emulated_launch(spec, {mx::zeros({2}, mx::uint32)}, {{nb}, {3 * nb}}, {mx::float32, mx::float32},
                             {nb * 64, 1, 1}, {64, 1, 1}, {}, true);
  const auto z = floats(out[1]);
  for (int round = 0; round < 3; ++round)
    for (int b = 0; b < nb; ++b) EXPECT_EQ(z[round * nb + b], nb * (nb - 1) / 2.0f + nb * round) << round << " " << b;
}

TEST(Simt, ABlockThatSkipsTheGridBarrierIsNamed) {
  setenv("MLXRT_EMU_SPIN_LIMIT_S", "1", 1);
  const KernelSpec spec{"skips", {"state"}, {"y"}, R"(
  if (blockIdx.x == 2) return;
  grid_sync(const_cast<unsigned*>(state));
  y[blockIdx.x] = 1.0f;
)",
                        kGridBarrier};
  try {
    emulated_launch(spec, {mx::zeros({2}, mx::uint32)}, {{4}}, {mx::float32}, {4 * 32, 1, 1}, {32, 1, 1}, {}, true);
    ADD_FAILURE() << "the grid barrier opened without block 2";
  } catch (const SimtError& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("never ended"));
  }
  unsetenv("MLXRT_EMU_SPIN_LIMIT_S");
}

void expect_kernel_bug(const std::string& body, const std::string& message) {
  const KernelSpec spec{"buggy", {"x"}, {"y"}, body, ""};
  try {
    emulated_launch(spec, {mx::zeros({1})}, {{64}}, {mx::float32}, {64, 1, 1}, {64, 1, 1}, {});
    ADD_FAILURE() << "no error for: " << body;
  } catch (const SimtError& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr(message));
  }
}

TEST(Simt, NamesTheBugsTheDeviceLeavesUndefined) {
  // __syncthreads reached by one thread while its warp waits on a shuffle: neither can open.
  expect_kernel_bug(R"(
  if (threadIdx.x == 0) __syncthreads();
  else y[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
)",
                    "can never open");
  // A shuffle over a full mask after a lane has returned.
  expect_kernel_bug(R"(
  if (threadIdx.x == 5) return;
  y[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
)",
                    "can never open");
  // Lanes 8..15 read lanes 16..23, outside the mask.
  expect_kernel_bug(R"(
  if ((threadIdx.x & 31) < 16) y[threadIdx.x] = __shfl_down_sync(0xffffu, 1.0f, 8);
)",
                    "not in its mask");
  // A kernel that stops itself.
  expect_kernel_bug(R"(
  if (threadIdx.x == 40) __trap();
)",
                    "__trap()");
  // A mask that leaves out the lane calling it.
  expect_kernel_bug(R"(
  y[threadIdx.x] = __shfl_xor_sync(0x1u, 1.0f, 1);
)",
                    "leaves out the calling lane");
  // Thread 0 at a __syncthreads of its own while the block waits at another: every thread arrives,
  // but the GPU's aligned barrier never meets (the layer kernel's counting barrier once did this).
  expect_kernel_bug(R"(
  if (threadIdx.x == 0) {
    y[0] = 1.0f;
    __syncthreads();
    return;
  }
  __syncthreads();
)",
                    "__syncthreads reached from different calls");
}

TEST(Simt, RefusesBlocksCudaCannotLaunch) {
  const KernelSpec spec{"noop", {"x"}, {"y"}, "", ""};
  EXPECT_THROW(emulated_launch(spec, {mx::zeros({1})}, {{1}}, {mx::float32}, {2048, 1, 1}, {2048, 1, 1}, {}),
               SimtError);
}

TEST(Simt, ACompilerErrorNamesTheProgramAndTheMessage) {
  const KernelSpec spec{"broken", {"x"}, {"y"}, "  y[0] = undeclared_name;\n", ""};
  try {
    emulated_launch(spec, {mx::zeros({1})}, {{1}}, {mx::float32}, {32, 1, 1}, {32, 1, 1}, {});
    ADD_FAILURE() << "a program that cannot compile ran";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("rejected"));
    EXPECT_THAT(std::string(e.what()), HasSubstr("undeclared_name"));
  }
}

}  // namespace
}  // namespace mlxrt::cuda_emu
