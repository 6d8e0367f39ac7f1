// The L3 matrix-vector product of the 4-bit float modes on CUDA: the kernel and its launch. Why it
// is written this way: fp4_qmv.h.
#include "mlxrt/kernels/cuda/fp4_qmv.h"

#include <stdexcept>

#include <mlx/ops.h>

#include "mlxrt/kernels/cuda/cached_kernel.h"
#include "mlxrt/kernels/cuda/env_knob.h"
#include "mlxrt/kernels/cuda/qmv_device.h"

namespace mlxrt::kernels::cuda {

namespace {

// Device code after qmv_device.h's helpers (mlxrt_load_x, mlxrt_part, mlxrt_warp_sum).
constexpr const char* kFp4Device = R"(
// Codes j and j + 4 of a word as their E2M1 values times 2^-14 (each code's magnitude bits under a
// half's exponent and mantissa, its sign on the half's sign; E2M1's subnormal is the half's).
__device__ __forceinline__ void mlxrt_fp4_pair(uint32_t word, int j, float& lo, float& hi) {
  const uint32_t u = word >> (4 * j);
  const uint32_t h = ((u & 0x00070007u) << 9) | ((u & 0x00080008u) << 12);
  lo = __half2float(__ushort_as_half(static_cast<unsigned short>(h & 0xFFFFu)));
  hi = __half2float(__ushort_as_half(static_cast<unsigned short>(h >> 16)));
}

// An E8M0 scale, 2^(b - 127): 0 is 2^-127 (a float subnormal), 255 NaN.
__device__ __forceinline__ float mlxrt_e8m0(uint32_t b) {
  return b == 255u ? __uint_as_float(0x7FC00000u) : b == 0u ? __uint_as_float(0x00400000u) : __uint_as_float(b << 23);
}

// An E4M3 scale (bias 7; exponent 0 subnormal, m / 8 * 2^-6; S.1111.111 NaN).
__device__ __forceinline__ float mlxrt_e4m3(uint32_t b) {
  const uint32_t e = (b >> 3) & 15u, m = b & 7u;
  float v = e ? __uint_as_float(((e + 120u) << 23) | (m << 20)) : static_cast<float>(m) * 0.001953125f;
  v = (e == 15u && m == 7u) ? __uint_as_float(0x7FC00000u) : v;
  return (b & 0x80u) ? -v : v;
}

template <int E8>
__device__ __forceinline__ float mlxrt_fp_scale(uint8_t b) {
  if constexpr (E8) {
    return mlxrt_e8m0(b);
  } else {
    return mlxrt_e4m3(b);
  }
}

// One warp's sums for rows n[0..R-1] of w ([N, words] of E2M1 codes) with the M rows of x (M x K,
// x_vec: 16-byte aligned), each lane's partial sum in acc. Lane l reads 16 bytes (32 codes) of each
// row at value offsets l * 32 + c * 1024; a step holds one group of 32 (mxfp4) or two of 16 (nvfp4),
// whose sums are scaled in turn. The next step's loads go out before this one is summed.
template <int M, int R, int GS, int E8, typename XT>
__device__ __forceinline__ void mlxrt_fp4_rows(const XT* x, bool x_vec, const uint32_t* w, const uint8_t* scales,
                                               const int (&n)[R], int words, int lane, float (&acc)[M][R]) {
  static_assert(GS == 16 || GS == 32, "nvfp4's groups of 16 or mxfp4's of 32");
  constexpr int kGroups = 32 / GS;  // scales a step
  constexpr float kLift = 16384.0f;  // 2^14: the codes' values as decoded are 2^-14 of theirs
  const int K = words * 8;
  const int groups = K / GS;
  const bool w_vec = (reinterpret_cast<unsigned long long>(w) & 15) == 0;
  size_t wrow[R], grow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    wrow[r] = static_cast<size_t>(n[r]) * words;
    grow[r] = static_cast<size_t>(n[r]) * groups;
  }
  auto load = [&](int k, uint4* wv, float (*s)[kGroups]) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint32_t* p = w + wrow[r] + k / 8;
      wv[r] = w_vec ? *reinterpret_cast<const uint4*>(p) : make_uint4(p[0], p[1], p[2], p[3]);
#pragma unroll
      for (int g = 0; g < kGroups; ++g) s[r][g] = mlxrt_fp_scale<E8>(scales[grow[r] + k / GS + g]);
    }
  };
  // One step: the 32 codes at k0 of each row against x, group by group.
  auto sum_step = [&](int k0, const uint4* wv, const float (*s)[kGroups]) {
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      float dot[M][R];
#pragma unroll
      for (int m = 0; m < M; ++m)
#pragma unroll
        for (int r = 0; r < R; ++r) dot[m][r] = 0.0f;
#pragma unroll
      for (int i = g * 4 / kGroups; i < (g + 1) * 4 / kGroups; ++i) {
        float f[R][8];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const uint32_t word = mlxrt_part(wv[r], i);
#pragma unroll
          for (int j = 0; j < 4; ++j) mlxrt_fp4_pair(word, j, f[r][j], f[r][j + 4]);
        }
#pragma unroll
        for (int m = 0; m < M; ++m) {
          float xv[8];
          mlxrt_load_x(x + static_cast<size_t>(m) * K + k0 + i * 8, xv, x_vec);
#pragma unroll
          for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int r = 0; r < R; ++r) dot[m][r] = fmaf(f[r][j], xv[j], dot[m][r]);
        }
      }
#pragma unroll
      for (int m = 0; m < M; ++m)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[m][r] = fmaf(s[r][g], dot[m][r] * kLift, acc[m][r]);
    }
  };
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
  constexpr int kStep = 32 * 32;
  int k0 = lane * 32;
  uint4 cur[R];
  float cs[R][kGroups];
  if (k0 < K) load(k0, cur, cs);
  for (; k0 < K; k0 += kStep) {
    uint4 nxt[R];
    float ns[R][kGroups];
    if (k0 + kStep < K) load(k0 + kStep, nxt, ns);
    sum_step(k0, cur, cs);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      cur[r] = nxt[r];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) cs[r][g] = ns[r][g];
    }
  }
}
)";

// One warp per R rows of w (rows past N repeat row N - 1 and are not written), each row's sum
// written by one lane.
constexpr const char* kFp4Source = R"(
  const int N = w_shape[0];
  const int row0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * R;
  if (row0 >= N) return;
  const int lane = threadIdx.x & 31;
  const bool x_vec = (reinterpret_cast<unsigned long long>(x) & 15) == 0;
  int n[R];
#pragma unroll
  for (int r = 0; r < R; ++r) n[r] = min(row0 + r, N - 1);
  float acc[M][R];
  mlxrt_fp4_rows<M, R, GS, E8>(x, x_vec, w, scales, n, w_shape[1], lane, acc);
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float v = mlxrt_warp_sum(acc[m][r]);
      if (lane == ((m * R + r) & 31) && row0 + r < N) y[static_cast<size_t>(m) * N + row0 + r] = static_cast<OT>(v);
    }
)";

std::string header() { return std::string(detail::kQmvDevice) + kFp4Device; }

bool is_float(mx::Dtype t) { return t == mx::bfloat16 || t == mx::float16 || t == mx::float32; }

}  // namespace

const KernelSpec& fp4_qmv_spec() {
  static const KernelSpec spec{"mlxrt_fp4_qmv", {"x", "w", "scales"}, {"y"}, kFp4Source, header()};
  return spec;
}

bool fp4_qmv_operands_fit(const mx::array& x, const mx::array& w, const mx::array& scales, int group_size, int bits,
                          const std::string& mode) {
  if (bits != 4 || !((mode == "mxfp4" && group_size == 32) || (mode == "nvfp4" && group_size == 16))) return false;
  if (w.ndim() != 2 || w.dtype() != mx::uint32 || scales.dtype() != mx::uint8 || x.ndim() < 1 ||
      !is_float(x.dtype()))
    return false;
  const int n = w.shape(0);
  const long long k = static_cast<long long>(w.shape(1)) * 8;
  if (n == 0 || k == 0 || k % 32 != 0 || x.shape(-1) != k) return false;
  if (scales.shape() != mx::Shape{n, static_cast<int>(k / group_size)}) return false;
  const size_t rows = x.size() / static_cast<size_t>(k);
  return rows >= 1 && rows <= static_cast<size_t>(kQmvMaxRows);
}

bool fp4_qmv_applies(const mx::array& x, const mx::array& w, const mx::array& scales, int group_size, int bits,
                     const std::string& mode) {
  return fp4_qmv_operands_fit(x, w, scales, group_size, bits, mode) && cuda_gpu_is_default();
}

bool fp4_l3_opted_in() {
  static const bool opted_in = env_flag("MLXRT_CUDA_L3_FP4");
  return opted_in;
}

bool fp4_qmv_preferred(const mx::array& x, const mx::array& w) {
  // Codes packed as affine 4-bit values are: affine_qmv's measured rule, read for 4 bits.
  return fp4_l3_opted_in() && w.ndim() == 2 && affine_qmv_preferred(x, w, 4);
}

KernelLaunch fp4_qmv_launch(const mx::array& x, const mx::array& w, const mx::array& scales, int group_size,
                            const std::string& mode, QmvTiling tiling) {
  if (!fp4_qmv_operands_fit(x, w, scales, group_size, 4, mode))
    throw std::invalid_argument("[fp4_qmv] unsupported operands (fp4_qmv_operands_fit)");
  tiling = choose_tiling(w.shape(0), tiling);
  if (tiling.rows_per_warp < 1 || tiling.rows_per_warp > 8 || tiling.warps_per_block < 1 ||
      tiling.warps_per_block > 8)
    throw std::invalid_argument("[fp4_qmv] tiling: 1-8 rows per warp, 1-8 warps per block");
  const int n = w.shape(0);
  const int rows = static_cast<int>(x.size() / static_cast<size_t>(x.shape(-1)));
  const int warps = (n + tiling.rows_per_warp - 1) / tiling.rows_per_warp;
  const int blocks = (warps + tiling.warps_per_block - 1) / tiling.warps_per_block;
  const int threads = 32 * tiling.warps_per_block;
  auto shape = x.shape();
  shape.back() = n;
  return {&fp4_qmv_spec(),
          {x, w, scales},
          {shape},
          {x.dtype()},
          {blocks * threads, 1, 1},
          {threads, 1, 1},
          {{"OT", x.dtype()}, {"M", rows}, {"R", tiling.rows_per_warp}, {"GS", group_size},
           {"E8", mode == "mxfp4" ? 1 : 0}}};
}

mx::array fp4_qmv(const mx::array& x, const mx::array& w, const mx::array& scales, int group_size,
                  const std::string& mode, QmvTiling tiling) {
  if (!fp4_qmv_applies(x, w, scales, group_size, 4, mode))
    throw std::invalid_argument("[fp4_qmv] unsupported operands (fp4_qmv_applies)");
  static const CachedKernel kernel(fp4_qmv_spec());
  return kernel(fp4_qmv_launch(x, w, scales, group_size, mode, tiling))[0];
}

}  // namespace mlxrt::kernels::cuda
