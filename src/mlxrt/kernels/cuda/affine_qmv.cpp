// The L3 affine quantized matrix-vector product on CUDA: the kernel and its launch. Why it is
// written this way: affine_qmv.h.
#include "mlxrt/kernels/cuda/affine_qmv.h"

#include <stdexcept>
#include <string>

#include <mlx/backend/cuda/cuda.h>
#include <mlx/device.h>
#include <mlx/fast.h>
#include <mlx/ops.h>

namespace mlxrt::kernels::cuda {

namespace {

// Device helpers (global scope in the generated source, hence the prefix).
constexpr const char* kHeader = R"(
// Value j of a packed word as f = 1 + q / 2^BITS: q moved under the exponent of 1.0f.
template <int BITS>
__device__ __forceinline__ float mlxrt_unpack(uint32_t word, int j) {
  constexpr int kPos = 23 - BITS;
  constexpr uint32_t kMask = ((1u << BITS) - 1u) << kPos;
  const int sh = kPos - BITS * j;  // a constant once the caller's loop is unrolled
  const uint32_t v = sh >= 0 ? (word << sh) : (word >> -sh);
  return __uint_as_float((v & kMask) | 0x3F800000u);
}

// The floats one 32-bit word of x holds.
__device__ __forceinline__ void mlxrt_word_to_float(uint32_t u, float* out, const __nv_bfloat16*) {
  out[0] = __uint_as_float(u << 16);
  out[1] = __uint_as_float(u & 0xFFFF0000u);
}
__device__ __forceinline__ void mlxrt_word_to_float(uint32_t u, float* out, const __half*) {
  out[0] = __half2float(__ushort_as_half(static_cast<unsigned short>(u & 0xFFFFu)));
  out[1] = __half2float(__ushort_as_half(static_cast<unsigned short>(u >> 16)));
}
__device__ __forceinline__ void mlxrt_word_to_float(uint32_t u, float* out, const float*) {
  out[0] = __uint_as_float(u);
}

// N consecutive values of x as floats: 8- or 16-byte loads where x is 16-byte aligned (every
// offset the kernel reads at is then a multiple of the load), element by element otherwise.
template <typename T, int N>
__device__ __forceinline__ void mlxrt_load_x(const T* p, float (&out)[N], bool vec) {
  constexpr int kWords = N * static_cast<int>(sizeof(T)) / 4;
  constexpr int kPer = 4 / static_cast<int>(sizeof(T));
  if (vec) {
    uint32_t u[kWords];
    if constexpr (kWords % 4 == 0) {
#pragma unroll
      for (int b = 0; b < kWords / 4; ++b) {
        const uint4 v = reinterpret_cast<const uint4*>(p)[b];
        u[4 * b] = v.x; u[4 * b + 1] = v.y; u[4 * b + 2] = v.z; u[4 * b + 3] = v.w;
      }
    } else {
#pragma unroll
      for (int b = 0; b < kWords / 2; ++b) {
        const uint2 v = reinterpret_cast<const uint2*>(p)[b];
        u[2 * b] = v.x; u[2 * b + 1] = v.y;
      }
    }
#pragma unroll
    for (int i = 0; i < kWords; ++i) mlxrt_word_to_float(u[i], &out[i * kPer], p);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = static_cast<float>(p[j]);
  }
}

__device__ __forceinline__ uint32_t mlxrt_part(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
)";

// One warp per R rows of w; lane l reads 16 bytes of each row at value offsets l * kVpl + c * 32 *
// kVpl (c = 0, 1, ...). Rows past N repeat row N - 1 (their sums are dropped), so every load is in
// bounds without a branch in the loop.
constexpr const char* kSource = R"(
  constexpr int kVpw = 32 / BITS;  // values per uint32 word
  constexpr int kVpl = 4 * kVpw;   // values per lane per 16-byte load: one group holds them all
  constexpr float kLift = static_cast<float>(1 << BITS);
  const int N = w_shape[0];
  const int words = w_shape[1];
  const int K = words * kVpw;
  const int groups = K / GS;
  const int lane = threadIdx.x & 31;
  const int row0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * R;
  if (row0 >= N) return;
  const bool x_vec = (reinterpret_cast<unsigned long long>(x) & 15) == 0;
  const bool w_vec = (reinterpret_cast<unsigned long long>(w) & 15) == 0;
  size_t wrow[R], grow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int n = min(row0 + r, N - 1);
    wrow[r] = static_cast<size_t>(n) * words;
    grow[r] = static_cast<size_t>(n) * groups;
  }
  auto load = [&](int k, uint4* wv, float* s, float* b) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint32_t* p = w + wrow[r] + k / kVpw;
      wv[r] = w_vec ? *reinterpret_cast<const uint4*>(p) : make_uint4(p[0], p[1], p[2], p[3]);
      s[r] = static_cast<float>(scales[grow[r] + k / GS]);
      b[r] = static_cast<float>(biases[grow[r] + k / GS]);
    }
  };
  float acc[M][R];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
  constexpr int kStep = 32 * kVpl;
  int k0 = lane * kVpl;
  uint4 cur[R];
  float cs[R], cb[R];
  if (k0 < K) load(k0, cur, cs, cb);
  for (; k0 < K; k0 += kStep) {
    // The next chunk's loads go out before this chunk is summed.
    uint4 nxt[R];
    float ns[R], nb[R];
    if (k0 + kStep < K) load(k0 + kStep, nxt, ns, nb);
    float dot[M][R], xs[M];
#pragma unroll
    for (int m = 0; m < M; ++m) {
      xs[m] = 0.0f;
#pragma unroll
      for (int r = 0; r < R; ++r) dot[m][r] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float f[R][kVpw];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint32_t word = mlxrt_part(cur[r], i);
#pragma unroll
        for (int j = 0; j < kVpw; ++j) f[r][j] = mlxrt_unpack<BITS>(word, j);
      }
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float xv[kVpw];
        mlxrt_load_x(x + static_cast<size_t>(m) * K + k0 + i * kVpw, xv, x_vec);
#pragma unroll
        for (int j = 0; j < kVpw; ++j) {
          xs[m] += xv[j];
#pragma unroll
          for (int r = 0; r < R; ++r) dot[m][r] = fmaf(f[r][j], xv[j], dot[m][r]);
        }
      }
    }
    // sum x (s q + b) = s 2^BITS (sum x f - sum x) + b sum x.
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int r = 0; r < R; ++r) acc[m][r] = fmaf(cs[r] * kLift, dot[m][r] - xs[m], fmaf(cb[r], xs[m], acc[m][r]));
#pragma unroll
    for (int r = 0; r < R; ++r) {
      cur[r] = nxt[r];
      cs[r] = ns[r];
      cb[r] = nb[r];
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float v = acc[m][r];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
      if (lane == ((m * R + r) & 31) && row0 + r < N) y[static_cast<size_t>(m) * N + row0 + r] = static_cast<OT>(v);
    }
)";

bool is_float(mx::Dtype t) { return t == mx::bfloat16 || t == mx::float16 || t == mx::float32; }

// Enough warps to fill the H200's 132 multiprocessors several times over (more rows per warp only
// where N leaves warps to spare: they put more loads in flight per warp), 4 warps a block.
QmvTiling choose_tiling(int n, QmvTiling t) {
  if (t.rows_per_warp == 0) t.rows_per_warp = n >= 8192 ? 4 : n >= 4096 ? 2 : 1;
  if (t.warps_per_block == 0) t.warps_per_block = 4;
  return t;
}

}  // namespace

bool affine_qmv_applies(const mx::array& x, const mx::array& w, const mx::array& scales,
                        const std::optional<mx::array>& biases, int group_size, int bits) {
  if (!biases || (bits != 4 && bits != 8) || (group_size != 32 && group_size != 64 && group_size != 128)) return false;
  if (w.ndim() != 2 || w.dtype() != mx::uint32 || x.ndim() < 1 || !is_float(x.dtype())) return false;
  if (!is_float(scales.dtype()) || biases->dtype() != scales.dtype()) return false;
  const int n = w.shape(0);
  const long long k = static_cast<long long>(w.shape(1)) * 32 / bits;
  if (n == 0 || k == 0 || k % group_size != 0 || x.shape(-1) != k) return false;
  const mx::Shape groups = {n, static_cast<int>(k / group_size)};
  if (scales.shape() != groups || biases->shape() != groups) return false;
  const size_t rows = x.size() / static_cast<size_t>(k);
  if (rows < 1 || rows > static_cast<size_t>(kQmvMaxRows)) return false;
  return mx::default_device() == mx::Device::gpu && mx::cu::is_available();
}

bool affine_qmv_preferred(const mx::array& x, const mx::array& w, int bits) {
  const size_t k = static_cast<size_t>(w.shape(1)) * 32 / static_cast<size_t>(bits);
  const size_t rows = k ? x.size() / k : 0;
  return rows <= 7 && static_cast<size_t>(w.nbytes()) >= (size_t{4} << 20);
}

mx::array affine_qmv(const mx::array& x, const mx::array& w, const mx::array& scales, const mx::array& biases,
                     int group_size, int bits, QmvTiling tiling) {
  if (!affine_qmv_applies(x, w, scales, biases, group_size, bits))
    throw std::invalid_argument("[affine_qmv] unsupported operands (affine_qmv_applies)");
  tiling = choose_tiling(w.shape(0), tiling);
  // More than 8 warps a block can ask more registers than a multiprocessor has (8 rows of x).
  if (tiling.rows_per_warp < 1 || tiling.rows_per_warp > 8 || tiling.warps_per_block < 1 ||
      tiling.warps_per_block > 8)
    throw std::invalid_argument("[affine_qmv] tiling: 1-8 rows per warp, 1-8 warps per block");
  static const auto kernel = mx::fast::cuda_kernel("mlxrt_affine_qmv", {"x", "w", "scales", "biases"}, {"y"},
                                                   kSource, kHeader, true, 0);
  const int n = w.shape(0);
  const int k = x.shape(-1);
  const int rows = static_cast<int>(x.size() / static_cast<size_t>(k));
  const auto out_type = mx::promote_types(mx::promote_types(x.dtype(), scales.dtype()), biases.dtype());
  const int warps = (n + tiling.rows_per_warp - 1) / tiling.rows_per_warp;
  const int blocks = (warps + tiling.warps_per_block - 1) / tiling.warps_per_block;
  const int threads = 32 * tiling.warps_per_block;
  auto shape = x.shape();
  shape.back() = n;
  return kernel({x, w, scales, biases}, {shape}, {out_type}, {blocks * threads, 1, 1}, {threads, 1, 1},
                  {{"XT", x.dtype()}, {"ST", scales.dtype()}, {"OT", out_type}, {"M", rows}, {"R", tiling.rows_per_warp}, {"BITS", bits},
                   {"GS", group_size}},
                  std::nullopt, false, {})[0];
}

}  // namespace mlxrt::kernels::cuda
