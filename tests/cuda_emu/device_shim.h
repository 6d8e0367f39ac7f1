#pragma once
// What a CUDA kernel program needs from the compiler and the device, for compiling it as ordinary
// C++ on the CPU (emulated_program.h puts this in front of the program text mlxrt would hand NVRTC).
// The kernel becomes a host function that every emulated thread runs (simt.h); thread indices,
// barriers and shuffles go through the runtime's table (emu_abi.h).
//
// Arithmetic follows IEEE float32 with no contraction (the program is compiled with
// -ffp-contract=off), so __fmul_rn and friends are the plain operations and fmaf is a fused
// multiply-add, as on the device. What differs from a GPU: rsqrtf, expf, exp2f, sinf and cosf are
// the host's libm (the device's are approximations within a few ulps), and the places where nvcc
// would contract a * b + c into one FMA stay two roundings. Tests of emulated kernels therefore
// check bounds, not bytes; bytes against MLX's GPU nodes stay the GPU tests' job.
#include <math.h>
#include <stdint.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "emu_abi.h"

// The calling system thread's table: set by the runtime on each thread that runs blocks.
inline thread_local mlxrt_emu_api* mlxrt_emu = nullptr;
extern "C" __attribute__((visibility("default"))) mlxrt_emu_api** mlxrt_emu_slot() { return &mlxrt_emu; }

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __grid_constant__
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
// A block runs on one system thread at a time (one after another, or each on its own where they
// must be resident together), so a function-scope thread_local is the running block's shared memory.
#define __shared__ static thread_local

#define threadIdx (mlxrt_emu->thread_idx)
#define blockIdx (mlxrt_emu->block_idx)
#define blockDim (mlxrt_emu->block_dim)
#define gridDim (mlxrt_emu->grid_dim)

// A macro, so that the runtime learns which call each thread waits at (simt.cpp checks they agree).
#define __syncthreads() (mlxrt_emu->sync_threads(__LINE__))
inline void __nanosleep(unsigned) { mlxrt_emu->pause(); }
[[noreturn]] inline void __trap() { mlxrt_emu->trap(); __builtin_unreachable(); }
// Blocks may run on several system threads: the atomics are the CPU's, sequentially consistent.
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
template <typename T>
inline T atomicAdd(T* p, T v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline float atomicAdd(float* p, float v) {
  float old, desired;
  __atomic_load(p, &old, __ATOMIC_SEQ_CST);
  do {
    desired = old + v;
  } while (!__atomic_compare_exchange(p, &old, &desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
  return old;
}
template <typename T>
inline T atomicMax(T* p, T v) {
  T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}
template <typename T>
inline T atomicExch(T* p, T v) {
  return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}
template <typename T>
inline T atomicCAS(T* p, T expected, T desired) {
  __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return expected;
}
// ld.global.cg (a load cached in L2 alone): the emulator has one memory.
template <typename T>
inline T __ldcg(const T* p) {
  return *p;
}
// ld.global.nc (read-only data): the same.
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
// %globaltimer: the host's monotonic nanoseconds (kernels read it for their own timings).
inline unsigned long long mlxrt_globaltimer() {
  return static_cast<unsigned long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::steady_clock::now().time_since_epoch())
                                             .count());
}
// A prefetch of a line into a cache: the CPU has none to ask, and it changes no value.
template <int LEVEL>
inline void mlxrt_prefetch_line(const void*) {}
inline void __syncwarp(unsigned mask = 0xFFFFFFFFu) { mlxrt_emu->sync_warp(mask); }

template <typename T>
inline T mlxrt_emu_shuffle(unsigned mask, T v, int arg, int mode, int width) {
  static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = mlxrt_emu->shuffle(mask, bits, arg, mode, width);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
template <typename T>
inline T __shfl_sync(unsigned mask, T v, int lane, int width = 32) {
  return mlxrt_emu_shuffle(mask, v, lane, MLXRT_EMU_SHFL_IDX, width);
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return mlxrt_emu_shuffle(mask, v, lane_mask, MLXRT_EMU_SHFL_XOR, width);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return mlxrt_emu_shuffle(mask, v, static_cast<int>(delta), MLXRT_EMU_SHFL_DOWN, width);
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return mlxrt_emu_shuffle(mask, v, static_cast<int>(delta), MLXRT_EMU_SHFL_UP, width);
}

struct alignas(16) uint4 {
  uint32_t x, y, z, w;
};
struct alignas(8) uint2 {
  uint32_t x, y;
};
struct alignas(8) float2 {
  float x, y;
};
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline uint2 make_uint2(uint32_t x, uint32_t y) { return {x, y}; }

inline float __uint_as_float(uint32_t u) { return std::bit_cast<float>(u); }
inline float __int_as_float(int32_t i) { return std::bit_cast<float>(i); }
inline uint32_t __float_as_uint(float f) { return std::bit_cast<uint32_t>(f); }
inline int32_t __float_as_int(float f) { return std::bit_cast<int32_t>(f); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
// The nearest integer, ties to even (the default rounding mode's nearbyint).
inline int __float2int_rn(float f) { return static_cast<int>(std::nearbyint(f)); }
// c plus the products of a's and b's four signed bytes.
inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i)
    c += static_cast<int>(static_cast<int8_t>(static_cast<uint32_t>(a) >> (8 * i))) *
         static_cast<int>(static_cast<int8_t>(static_cast<uint32_t>(b) >> (8 * i)));
  return c;
}
using std::max;
using std::min;

// bfloat16: float32's upper half, rounded to nearest even (NaNs stay NaNs).
struct __nv_bfloat16 {
  uint16_t bits;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    bits = std::isnan(f) ? static_cast<uint16_t>((u >> 16) | 0x40u)
                         : static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
  operator float() const { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }
};

// float16 through the compiler's _Float16 (IEEE binary16, round to nearest even).
struct __half {
  _Float16 value;
  __half() = default;
  __half(float f) : value(static_cast<_Float16>(f)) {}
  operator float() const { return static_cast<float>(value); }
};
inline float __half2float(__half h) { return static_cast<float>(h); }
inline __half __float2half(float f) { return __half(f); }
inline __half __ushort_as_half(unsigned short u) { return std::bit_cast<__half>(u); }
inline unsigned short __half_as_ushort(__half h) { return std::bit_cast<unsigned short>(h); }
inline float __bfloat162float(__nv_bfloat16 b) { return static_cast<float>(b); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }

// __byte_perm(x, y, s): byte i of the result is byte (s >> 4 i) & 7 of the eight bytes of x, y.
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  const uint64_t bytes = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t out = 0;
  for (int i = 0; i < 4; ++i) out |= static_cast<uint32_t>((bytes >> (8 * ((s >> (4 * i)) & 7u))) & 0xFFu) << (8 * i);
  return out;
}

// mma.sync.m16n8k16 (row-major A, column-major B, float32 D += A B) for one warp: every lane
// gathers the other lanes' fragments by shuffles and computes its own four outputs in float32,
// the products summed in order of k (the tensor core's order and rounding within one call are its
// own; the tests' bounds allow either). Fragments as PTX lays them out for lane (g, t) = (lane / 4,
// lane % 4): A's registers 0-3 hold (row g, columns 2t, 2t+1), (g + 8, 2t..), (g, 2t+8..),
// (g + 8, 2t+8..); B's 0-1 (rows 2t, 2t+1, column g), (2t+8, 2t+9, column g); D's 0-3 (row g,
// columns 2t, 2t+1), (row g + 8, the same columns). The low half of a register is the lower index.
inline float mlxrt_emu_half_value(uint32_t bits16, const __nv_bfloat16*) { return std::bit_cast<float>(bits16 << 16); }
inline float mlxrt_emu_half_value(uint32_t bits16, const __half*) {
  return static_cast<float>(std::bit_cast<_Float16>(static_cast<uint16_t>(bits16)));
}
template <typename T>
inline void mlxrt_mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const T* tag) {
  uint32_t all_a[32][4], all_b[32][2];
  for (int l = 0; l < 32; ++l) {
    for (int r = 0; r < 4; ++r) all_a[l][r] = __shfl_sync(0xFFFFFFFFu, a[r], l);
    for (int r = 0; r < 2; ++r) all_b[l][r] = __shfl_sync(0xFFFFFFFFu, b[r], l);
  }
  auto a_at = [&](int row, int k) {
    const uint32_t reg = all_a[(row % 8) * 4 + (k % 8) / 2][(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)];
    return mlxrt_emu_half_value(k % 2 ? reg >> 16 : reg & 0xFFFFu, tag);
  };
  auto b_at = [&](int k, int col) {
    const uint32_t reg = all_b[col * 4 + (k % 8) / 2][k >= 8 ? 1 : 0];
    return mlxrt_emu_half_value(k % 2 ? reg >> 16 : reg & 0xFFFFu, tag);
  };
  const int lane = static_cast<int>(mlxrt_emu->thread_idx.x % 32);
  const int g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
    float sum = d[i];
    for (int k = 0; k < 16; ++k) sum = std::fma(a_at(row, k), b_at(k, col), sum);
    d[i] = sum;
  }
}

// MLX's Shape parameter (mlxrt's self-compiled programs declare the same struct in their prelude).
struct mlxrt_shape {
  int32_t v[10];
  const int32_t& operator[](int i) const { return v[i]; }
};
