// The L3 affine 4-bit product on the tensor cores: the kernel and its launch. Why it is written
// this way: affine_mma.h.
#include "mlxrt/kernels/cuda/affine_mma.h"

#include <cstdlib>
#include <stdexcept>

#include <mlx/ops.h>

#include "mlxrt/kernels/cuda/cached_kernel.h"
#include "mlxrt/kernels/cuda/cuda_driver.h"
#include "mlxrt/kernels/cuda/env_knob.h"

namespace mlxrt::kernels::cuda {

namespace {

// The instruction (device) and what the 16-bit float types need around it. The CPU emulator of
// tests/cuda_emu defines mlxrt_mma_16816 itself.
constexpr const char* kMmaDevice = R"(
#ifdef __CUDA_ARCH__
// D += A B for one warp: A 16 x 16 (4 registers a lane), B 16 x 8 (2), D 16 x 8 float32 (4).
__device__ __forceinline__ void mlxrt_mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                                const __nv_bfloat16*) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mlxrt_mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                                const __half*) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif

// A pair of 16-bit floats B + q (q a 4-bit value) is the bits of B with q in the low mantissa
// bits: kMagic; kOnes is the pair (1, 1).
template <typename T>
struct mlxrt_mma_float;
template <>
struct mlxrt_mma_float<__nv_bfloat16> {
  static constexpr uint32_t kMagic = 0x43004300u;  // 128: 7 mantissa bits, so 128 + q is exact
  static constexpr uint32_t kOnes = 0x3F803F80u;
  static constexpr float kBase = 128.0f;
};
template <>
struct mlxrt_mma_float<__half> {
  static constexpr uint32_t kMagic = 0x64006400u;  // 1024: 10 mantissa bits
  static constexpr uint32_t kOnes = 0x3C003C00u;
  static constexpr float kBase = 1024.0f;
};

// Nibbles j and j + 4 of a word (j = 0..3) as the pair (B + q_j, B + q_{j+4}), q_j in the low half.
template <typename T>
__device__ __forceinline__ uint32_t mlxrt_mma_pair(uint32_t word, int j) {
  return ((word >> (4 * j)) & 0x000F000Fu) | mlxrt_mma_float<T>::kMagic;
}

// LW words of a row of w (8-byte aligned where vec).
template <int LW>
__device__ __forceinline__ void mlxrt_mma_w_words(const uint32_t* p, bool vec, uint32_t (&q)[LW]) {
  if constexpr (LW == 2) {
    if (vec) {
      const uint2 v = *reinterpret_cast<const uint2*>(p);
      q[0] = v.x;
      q[1] = v.y;
    } else {
      q[0] = p[0];
      q[1] = p[1];
    }
  } else {
    q[0] = p[0];
  }
}

// 8 LW values of a row of x as 4 LW words of two values each (16-byte loads where vec), or zeros
// for a row past x's (a padded column of B).
template <int LW, typename XT>
__device__ __forceinline__ void mlxrt_mma_x_words(const XT* p, bool valid, bool vec, uint32_t (&u)[4 * LW]) {
  if (!valid) {
#pragma unroll
    for (int i = 0; i < 4 * LW; ++i) u[i] = 0u;
  } else if (vec) {
#pragma unroll
    for (int b = 0; b < LW; ++b) {
      const uint4 v = reinterpret_cast<const uint4*>(p)[b];
      u[4 * b] = v.x;
      u[4 * b + 1] = v.y;
      u[4 * b + 2] = v.z;
      u[4 * b + 3] = v.w;
    }
  } else {
    const unsigned short* h = reinterpret_cast<const unsigned short*>(p);
#pragma unroll
    for (int i = 0; i < 4 * LW; ++i) u[i] = static_cast<uint32_t>(h[2 * i]) | (static_cast<uint32_t>(h[2 * i + 1]) << 16);
  }
}
)";

// One block a tile of 16 rows of w; its WARPS warps take the K units in turn, AHEAD units' loads
// at a time; MT tiles of 8 rows of x (rows past x's are zero columns of B).
constexpr const char* kMmaSource = R"(
  constexpr int LW = GS == 32 ? 1 : 2;  // words a lane reads of a row per unit
  constexpr int U = 32 * LW;            // values of K a unit covers: 4 lanes x 8 LW, inside one group
  using F = mlxrt_mma_float<XT>;
  const int N = w_shape[0];
  const int words = w_shape[1];
  const int rows = x_shape[0];
  const int K = words * 8;
  const int units = K / U;
  const int groups = K / GS;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  // Rows past N repeat row N - 1 (their sums are not stored), so every load is in bounds.
  const int row_a = min(static_cast<int>(blockIdx.x) * 16 + g, N - 1);
  const int row_b = min(static_cast<int>(blockIdx.x) * 16 + g + 8, N - 1);
  const uint32_t* wa = w + static_cast<size_t>(row_a) * words + t * LW;
  const uint32_t* wb = w + static_cast<size_t>(row_b) * words + t * LW;
  const ST* sa = scales + static_cast<size_t>(row_a) * groups;
  const ST* sb = scales + static_cast<size_t>(row_b) * groups;
  const ST* ba = biases + static_cast<size_t>(row_a) * groups;
  const ST* bb = biases + static_cast<size_t>(row_b) * groups;
  const bool w_vec = (reinterpret_cast<unsigned long long>(w) & 7) == 0;
  const bool x_vec = (reinterpret_cast<unsigned long long>(x) & 15) == 0;
  const uint32_t ones[4] = {F::kOnes, F::kOnes, F::kOnes, F::kOnes};
  float acc[MT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[mt][i] = 0.0f;
  for (int u0 = warp; u0 < units; u0 += WARPS * AHEAD) {
    uint32_t qa[AHEAD][LW], qb[AHEAD][LW];
    float fsa[AHEAD], fsb[AHEAD], fba[AHEAD], fbb[AHEAD];
#pragma unroll
    for (int p = 0; p < AHEAD; ++p) {
      const int u = u0 + p * WARPS;
      if (u < units) {
        mlxrt_mma_w_words<LW>(wa + u * 4 * LW, w_vec, qa[p]);
        mlxrt_mma_w_words<LW>(wb + u * 4 * LW, w_vec, qb[p]);
        const int group = u * U / GS;
        fsa[p] = static_cast<float>(sa[group]);
        fsb[p] = static_cast<float>(sb[group]);
        fba[p] = static_cast<float>(ba[group]);
        fbb[p] = static_cast<float>(bb[group]);
      }
    }
#pragma unroll
    for (int p = 0; p < AHEAD; ++p) {
      const int u = u0 + p * WARPS;
      if (u >= units) break;
      const int k0 = u * U + t * 8 * LW;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int c = mt * 8 + g;
        uint32_t xw[4 * LW];
        mlxrt_mma_x_words<LW>(x + static_cast<size_t>(c) * K + k0, c < rows, x_vec, xw);
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f}, dx[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < LW; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            // Slots 2t, 2t+1: nibbles 2h, 2h+4 of word i; slots 2t+8, 2t+9: nibbles 2h+1, 2h+5.
            const uint32_t a[4] = {mlxrt_mma_pair<XT>(qa[p][i], 2 * h), mlxrt_mma_pair<XT>(qb[p][i], 2 * h),
                                   mlxrt_mma_pair<XT>(qa[p][i], 2 * h + 1), mlxrt_mma_pair<XT>(qb[p][i], 2 * h + 1)};
            const uint32_t b[2] = {__byte_perm(xw[4 * i + h], xw[4 * i + h + 2], 0x5410),
                                   __byte_perm(xw[4 * i + h], xw[4 * i + h + 2], 0x7632)};
            mlxrt_mma_16816(d, a, b, static_cast<const XT*>(nullptr));
            mlxrt_mma_16816(dx, ones, b, static_cast<const XT*>(nullptr));
          }
        // d: rows a, a, b, b of w by rows 2t, 2t+1, 2t, 2t+1 of the tile of x; dx: x's sums over
        // the unit for those rows of x (every row of the all-ones A gives the same).
        acc[mt][0] = fmaf(fsa[p], fmaf(-F::kBase, dx[0], d[0]), fmaf(fba[p], dx[0], acc[mt][0]));
        acc[mt][1] = fmaf(fsa[p], fmaf(-F::kBase, dx[1], d[1]), fmaf(fba[p], dx[1], acc[mt][1]));
        acc[mt][2] = fmaf(fsb[p], fmaf(-F::kBase, dx[2], d[2]), fmaf(fbb[p], dx[2], acc[mt][2]));
        acc[mt][3] = fmaf(fsb[p], fmaf(-F::kBase, dx[3], d[3]), fmaf(fbb[p], dx[3], acc[mt][3]));
      }
    }
  }
  // The warps' sums, warp 0's first and then the others' in order, by warp 0.
  __shared__ float part[(WARPS > 1 ? WARPS - 1 : 1) * MT * 4 * 32];
  if (WARPS > 1 && warp > 0) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) part[(((warp - 1) * MT + mt) * 4 + i) * 32 + lane] = acc[mt][i];
  }
  if (WARPS > 1) __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float sum = acc[mt][i];
        for (int v = 1; v < WARPS; ++v) sum += part[(((v - 1) * MT + mt) * 4 + i) * 32 + lane];
        const int n = static_cast<int>(blockIdx.x) * 16 + g + (i >= 2 ? 8 : 0);
        const int c = mt * 8 + 2 * t + (i & 1);
        if (n < N && c < rows) y[static_cast<size_t>(c) * N + n] = static_cast<OT>(sum);
      }
  }
)";

bool is_half(mx::Dtype t) { return t == mx::bfloat16 || t == mx::float16; }
bool is_float(mx::Dtype t) { return is_half(t) || t == mx::float32; }

// Tiles of 8 rows of x a launch computes: a power of two (one kernel per count, not per row).
int tiles_for(int rows) {
  int tiles = 1;
  while (tiles * 8 < rows) tiles *= 2;
  return tiles;
}

}  // namespace

const KernelSpec& affine_mma_spec() {
  static const KernelSpec spec{"mlxrt_affine_mma", {"x", "w", "scales", "biases"}, {"y"}, kMmaSource, kMmaDevice};
  return spec;
}

bool affine_mma_operands_fit(const mx::array& x, const mx::array& w, const mx::array& scales,
                             const std::optional<mx::array>& biases, int group_size, int bits) {
  if (!biases || bits != 4 || (group_size != 32 && group_size != 64 && group_size != 128)) return false;
  if (w.ndim() != 2 || w.dtype() != mx::uint32 || x.ndim() < 1 || !is_half(x.dtype())) return false;
  if (!is_float(scales.dtype()) || biases->dtype() != scales.dtype()) return false;
  const int n = w.shape(0);
  const long long k = static_cast<long long>(w.shape(1)) * 8;
  if (n == 0 || k == 0 || k % group_size != 0 || x.shape(-1) != k) return false;
  const mx::Shape groups = {n, static_cast<int>(k / group_size)};
  if (scales.shape() != groups || biases->shape() != groups) return false;
  const size_t rows = x.size() / static_cast<size_t>(k);
  return rows >= 1 && rows <= static_cast<size_t>(kMmaMaxRows);
}

bool affine_mma_applies(const mx::array& x, const mx::array& w, const mx::array& scales,
                        const std::optional<mx::array>& biases, int group_size, int bits) {
  if (!affine_mma_operands_fit(x, w, scales, biases, group_size, bits) || !cuda_gpu_is_default()) return false;
  static const int capability = cuda_compute_capability();
  return capability >= 80;
}

int affine_mma_min_rows() {
  static const int rows = std::getenv("MLXRT_CUDA_L3_MMA_ROWS") ? env_positive_int("MLXRT_CUDA_L3_MMA_ROWS")
                                                                 : kMmaDefaultMinRows;
  return rows;
}

bool affine_mma_preferred(const mx::array& x, const mx::array& w) {
  const int from = affine_mma_min_rows();
  if (from <= 0 || w.ndim() != 2 || static_cast<size_t>(w.nbytes()) < (size_t{4} << 20)) return false;
  const size_t k = static_cast<size_t>(w.shape(1)) * 8;
  const size_t rows = x.size() / k;
  return rows >= static_cast<size_t>(from) && rows <= static_cast<size_t>(kMmaMaxRows);
}

KernelLaunch affine_mma_launch(const mx::array& x, const mx::array& w, const mx::array& scales,
                               const mx::array& biases, int group_size, int bits, MmaTiling tiling) {
  if (!affine_mma_operands_fit(x, w, scales, biases, group_size, bits))
    throw std::invalid_argument("[affine_mma] unsupported operands (affine_mma_operands_fit)");
  const int n = w.shape(0);
  const int k = x.shape(-1);
  const int rows = static_cast<int>(x.size() / static_cast<size_t>(k));
  const int tiles = tiles_for(rows);
  // 4 warps and 2 units ahead: mlxrt_qmv_bench --mma's best or within 5% of it on Qwen3-8B's and
  // -0.6B's shapes at 1, 8 and 32 rows (H100, bench/RESULTS.md); 1 ahead at 16 tiles, whose sums
  // take the registers (NVRTC: 255 a thread, spilling from 2 ahead).
  const int warps = tiling.warps_per_block ? tiling.warps_per_block : 4;
  const int ahead = tiling.units_ahead ? tiling.units_ahead : tiles >= 16 ? 1 : 2;
  if (warps < 1 || warps > 8 || ahead < 1 || ahead > 8)
    throw std::invalid_argument("[affine_mma] tiling: 1-8 warps per block, 1-8 units ahead");
  const auto out_type = mx::promote_types(mx::promote_types(x.dtype(), scales.dtype()), biases.dtype());
  const int blocks = (n + 15) / 16;
  const int threads = 32 * warps;
  return {&affine_mma_spec(),
          {mx::reshape(x, {rows, k}), w, scales, biases},
          {{rows, n}},
          {out_type},
          {blocks * threads, 1, 1},
          {threads, 1, 1},
          {{"XT", x.dtype()}, {"ST", scales.dtype()}, {"OT", out_type}, {"GS", group_size}, {"MT", tiles},
           {"WARPS", warps}, {"AHEAD", ahead}}};
}

mx::array affine_mma(const mx::array& x, const mx::array& w, const mx::array& scales, const mx::array& biases,
                     int group_size, int bits, MmaTiling tiling) {
  if (!affine_mma_applies(x, w, scales, biases, group_size, bits))
    throw std::invalid_argument("[affine_mma] unsupported operands or device (affine_mma_applies)");
  static const CachedKernel kernel(affine_mma_spec());
  auto y = kernel(affine_mma_launch(x, w, scales, biases, group_size, bits, tiling))[0];
  auto shape = x.shape();
  shape.back() = w.shape(0);
  return mx::reshape(y, shape);
}

}  // namespace mlxrt::kernels::cuda
