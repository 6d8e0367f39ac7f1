// The L3 decoding step's fused matrix-vector products on CUDA: the kernels and their launches. Why
// they exist and what they round where: fused_qmv.h.
#include "mlxrt/kernels/cuda/fused_qmv.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <mlx/fast.h>
#include <mlx/ops.h>

#include "mlxrt/kernels/cuda/affine_qmv.h"
#include "mlxrt/kernels/cuda/cached_kernel.h"
#include "mlxrt/kernels/cuda/env_knob.h"
#include "mlxrt/kernels/cuda/qmv_device.h"

namespace mlxrt::kernels::cuda {

namespace {


// q, k and v: the blocks split between the three matrices (block-uniform: no divergence), each
// block first staging the normalised x.
constexpr const char* kQkvSource = R"(
  // Raw bytes: a __shared__ array of a class type (the 16-bit floats) may not be declared as such.
  __shared__ __align__(16) unsigned char xs_bytes[SK * sizeof(XT)];
  __shared__ float red[32];
  XT* xs = reinterpret_cast<XT*>(xs_bytes);
  mlxrt_stage_rms_norm<M>(x, nw, __int_as_float(EPS_BITS), K, xs, red);
  const int nwarps = blockDim.x >> 5;
  const int per_block = R * nwarps;
  const int nq = wq_shape[0], nk = wk_shape[0], nv = wv_shape[0];
  const int bq_blocks = (nq + per_block - 1) / per_block, bk_blocks = (nk + per_block - 1) / per_block;
  int b = blockIdx.x;
  auto w = wq;
  auto s = sq;
  auto bias = bq;
  OT* y = yq;
  int N = nq;
  if (b >= bq_blocks + bk_blocks) {
    b -= bq_blocks + bk_blocks;
    w = wv; s = sv; bias = bv; y = yv; N = nv;
  } else if (b >= bq_blocks) {
    b -= bq_blocks;
    w = wk; s = sk; bias = bk; y = yk; N = nk;
  }
  const int row0 = (b * nwarps + (threadIdx.x >> 5)) * R;
  if (row0 >= N) return;
  mlxrt_qmv_warp<M, R, BITS, GS, DEPTH>(xs, true, w, s, bias, N, COLS, row0,
                                 [&](size_t i, float v) { y[i] = static_cast<OT>(v); });
)";

// silu(gate) * up: each warp owns the same R rows of both matrices, read one matrix after the
// other, or (PAIRED) both in one pass.
constexpr const char* kSwigluSource = R"(
  // Raw bytes: a __shared__ array of a class type (the 16-bit floats) may not be declared as such.
  __shared__ __align__(16) unsigned char xs_bytes[SK * sizeof(XT)];
  __shared__ float red[32];
  XT* xs = reinterpret_cast<XT*>(xs_bytes);
  mlxrt_stage_rms_norm<M>(x, nw, __int_as_float(EPS_BITS), K, xs, red);
  const int lane = threadIdx.x & 31;
  const int N = wg_shape[0];
  const int row0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * R;
  if (row0 >= N) return;
  float ag[M][R], au[M][R];
  if constexpr (PAIRED) {
    float gu[M][2 * R];
    mlxrt_mv_row_pairs<M, R, BITS, GS, DEPTH>(xs, true, wg, sg, bg, wu, su, bu, N, COLS, row0, lane, gu);
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        ag[m][r] = gu[m][r];
        au[m][r] = gu[m][R + r];
      }
  } else {
    mlxrt_mv_rows<M, R, BITS, GS, DEPTH>(xs, true, wg, sg, bg, N, COLS, row0, lane, ag);
    mlxrt_mv_rows<M, R, BITS, GS, DEPTH>(xs, true, wu, su, bu, N, COLS, row0, lane, au);
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float g = static_cast<float>(static_cast<OT>(mlxrt_warp_sum(ag[m][r])));
      const float u = static_cast<float>(static_cast<OT>(mlxrt_warp_sum(au[m][r])));
      if (lane == ((m * R + r) & 31) && row0 + r < N) {
        // mlx-lm's swiglu: silu(gate) * up, silu(g) = g * sigmoid(g), each op rounded to OT.
        const float sig = static_cast<float>(static_cast<OT>(1.0f / (1.0f + expf(-g))));
        const float a = static_cast<float>(static_cast<OT>(g * sig));
        y[static_cast<size_t>(m) * N + row0 + r] = static_cast<OT>(a * u);
      }
    }
)";

// residual + x @ w.T, x read from global memory as affine_qmv reads it.
constexpr const char* kResidualSource = R"(
  const int N = w_shape[0];
  const int row0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * R;
  if (row0 >= N) return;
  const bool x_vec = (reinterpret_cast<unsigned long long>(x) & 15) == 0;
  mlxrt_qmv_warp<M, R, BITS, GS, DEPTH>(x, x_vec, w, scales, biases, N, w_shape[1], row0, [&](size_t i, float v) {
    y[i] = static_cast<OT>(static_cast<float>(res[i]) + static_cast<float>(static_cast<OT>(v)));
  });
)";

// The staged rows of x must fit a block's static shared memory (48 KB, with room for the rest).
constexpr size_t kMaxStagedBytes = 40 * 1024;

std::string header() { return std::string(detail::kQmvDevice) + detail::kStageRmsNormDevice; }

// What every product of one fused call needs: affine_qmv's conditions for each matrix, one
// quantization for them all, and few enough rows. Returns the rows of x, 0 where it does not hold.
int fused_rows(const mx::array& x, std::initializer_list<const QmvMatrix*> mats) {
  const auto* first = *mats.begin();
  for (const auto* m : mats) {
    if (m->bits != first->bits || m->group_size != first->group_size || m->scales.dtype() != first->scales.dtype())
      return 0;
    if (m->is_dense() ? !dense_mv_operands_fit(x, m->w)
                      : !affine_qmv_operands_fit(x, m->w, m->scales, m->biases, m->group_size, m->bits))
      return 0;
  }
  const int rows = static_cast<int>(x.size() / static_cast<size_t>(x.shape(-1)));
  return rows <= kFusedMaxRows ? rows : 0;
}

bool norm_fits(const mx::array& x, const RmsNormIn& norm, int rows) {
  const int k = x.shape(-1);
  return norm.weight.dtype() == x.dtype() && norm.weight.ndim() == 1 && norm.weight.shape(0) == k &&
         static_cast<size_t>(rows) * static_cast<size_t>(k) * x.itemsize() <= kMaxStagedBytes;
}

mx::Dtype product_type(const mx::array& x, const QmvMatrix& m) {
  if (m.is_dense()) return mx::promote_types(x.dtype(), m.w.dtype());
  return mx::promote_types(mx::promote_types(x.dtype(), m.scales.dtype()), m.biases.dtype());
}

// w's row length in its own elements: packed words, or a dense matrix's values.
int cols_of(const QmvMatrix& m, int k) { return m.is_dense() ? k : k * m.bits / 32; }

mx::Shape with_last(mx::Shape shape, int n) {
  shape.back() = n;
  return shape;
}

int blocks_for(int n, QmvTiling t) {
  const int per_block = t.rows_per_warp * t.warps_per_block;
  return (n + per_block - 1) / per_block;
}

}  // namespace

const KernelSpec& rms_norm_qkv_spec() {
  static const KernelSpec spec{"mlxrt_rms_norm_qkv",
                               {"x", "nw", "wq", "sq", "bq", "wk", "sk", "bk", "wv", "sv", "bv"},
                               {"yq", "yk", "yv"},
                               kQkvSource,
                               header()};
  return spec;
}

const KernelSpec& rms_norm_swiglu_spec() {
  static const KernelSpec spec{
      "mlxrt_rms_norm_swiglu", {"x", "nw", "wg", "sg", "bg", "wu", "su", "bu"}, {"y"}, kSwigluSource, header()};
  return spec;
}

const KernelSpec& qmv_residual_spec() {
  static const KernelSpec spec{
      "mlxrt_qmv_residual", {"x", "w", "scales", "biases", "res"}, {"y"}, kResidualSource, detail::kQmvDevice};
  return spec;
}

std::optional<KernelLaunch> rms_norm_qkv_launch(const mx::array& x, const RmsNormIn& norm, const QmvMatrix& q,
                                                const QmvMatrix& k, const QmvMatrix& v) {
  const int rows = fused_rows(x, {&q, &k, &v});
  if (rows == 0 || !norm_fits(x, norm, rows)) return std::nullopt;
  const int nq = q.w.shape(0), nk = k.w.shape(0), nv = v.w.shape(0), kdim = x.shape(-1);
  const auto t = choose_tiling(nq + nk + nv, {}, q.is_dense(), kdim);
  const int blocks = blocks_for(nq, t) + blocks_for(nk, t) + blocks_for(nv, t);
  const int threads = 32 * t.warps_per_block;
  const auto out = product_type(x, q);
  return KernelLaunch{&rms_norm_qkv_spec(),
                      {x, norm.weight, q.w, q.scales, q.biases, k.w, k.scales, k.biases, v.w, v.scales, v.biases},
                      {with_last(x.shape(), nq), with_last(x.shape(), nk), with_last(x.shape(), nv)},
                      {out, out, out},
                      {blocks * threads, 1, 1},
                      {threads, 1, 1},
                      {{"XT", x.dtype()}, {"ST", q.scales.dtype()}, {"OT", out}, {"M", rows}, {"R", t.rows_per_warp},
                       {"BITS", q.bits}, {"GS", q.group_size}, {"K", kdim}, {"COLS", cols_of(q, kdim)},
                       {"SK", rows * kdim}, {"EPS_BITS", std::bit_cast<int>(norm.eps)}, {"DEPTH", t.depth}}};
}

std::optional<std::array<mx::array, 3>> rms_norm_qkv(const mx::array& x, const RmsNormIn& norm, const QmvMatrix& q,
                                                     const QmvMatrix& k, const QmvMatrix& v) {
  if (!cuda_gpu_is_default()) return std::nullopt;
  const auto launch = rms_norm_qkv_launch(x, norm, q, k, v);
  if (!launch) return std::nullopt;
  static const CachedKernel kernel(rms_norm_qkv_spec());
  auto ys = kernel(*launch);
  return std::array<mx::array, 3>{ys[0], ys[1], ys[2]};
}

std::optional<KernelLaunch> rms_norm_swiglu_launch(const mx::array& x, const RmsNormIn& norm, const QmvMatrix& gate,
                                                   const QmvMatrix& up, bool paired) {
  const int rows = fused_rows(x, {&gate, &up});
  if (rows == 0 || !norm_fits(x, norm, rows) || gate.w.shape() != up.w.shape()) return std::nullopt;
  const int n = gate.w.shape(0), kdim = x.shape(-1);
  // Two matrices' loads in flight per row: half affine_qmv's rows per warp.
  auto t = choose_tiling(n, {}, gate.is_dense(), kdim);
  t.rows_per_warp = std::max(1, t.rows_per_warp / 2);
  const int threads = 32 * t.warps_per_block;
  const auto out = product_type(x, gate);
  return KernelLaunch{&rms_norm_swiglu_spec(),
                      {x, norm.weight, gate.w, gate.scales, gate.biases, up.w, up.scales, up.biases},
                      {with_last(x.shape(), n)},
                      {out},
                      {blocks_for(n, t) * threads, 1, 1},
                      {threads, 1, 1},
                      {{"XT", x.dtype()}, {"ST", gate.scales.dtype()}, {"OT", out}, {"M", rows},
                       {"R", t.rows_per_warp}, {"BITS", gate.bits}, {"GS", gate.group_size}, {"K", kdim},
                       {"COLS", cols_of(gate, kdim)}, {"SK", rows * kdim}, {"EPS_BITS", std::bit_cast<int>(norm.eps)},
                       {"PAIRED", paired}, {"DEPTH", t.depth}}};
}

bool swiglu_pairs_opted_in() {
  static const bool opted_in = env_flag("MLXRT_CUDA_L3_SWIGLU_PAIRS");
  return opted_in;
}

std::optional<mx::array> rms_norm_swiglu(const mx::array& x, const RmsNormIn& norm, const QmvMatrix& gate,
                                         const QmvMatrix& up) {
  if (!cuda_gpu_is_default()) return std::nullopt;
  const auto launch = rms_norm_swiglu_launch(x, norm, gate, up, swiglu_pairs_opted_in());
  if (!launch) return std::nullopt;
  static const CachedKernel kernel(rms_norm_swiglu_spec());
  return kernel(*launch)[0];
}

std::optional<KernelLaunch> qmv_residual_launch(const mx::array& x, const QmvMatrix& m, const mx::array& residual) {
  const int rows = fused_rows(x, {&m});
  if (rows == 0) return std::nullopt;
  const auto out = product_type(x, m);
  const int n = m.w.shape(0);
  if (residual.dtype() != out || residual.shape() != with_last(x.shape(), n)) return std::nullopt;
  const auto t = choose_tiling(n, {}, m.is_dense(), x.shape(-1));
  const int threads = 32 * t.warps_per_block;
  return KernelLaunch{&qmv_residual_spec(),
                      {x, m.w, m.scales, m.biases, residual},
                      {residual.shape()},
                      {out},
                      {blocks_for(n, t) * threads, 1, 1},
                      {threads, 1, 1},
                      {{"XT", x.dtype()}, {"ST", m.scales.dtype()}, {"OT", out}, {"M", rows}, {"R", t.rows_per_warp},
                       {"BITS", m.bits}, {"GS", m.group_size}, {"DEPTH", t.depth}}};
}

std::optional<mx::array> qmv_residual(const mx::array& x, const QmvMatrix& m, const mx::array& residual) {
  if (!cuda_gpu_is_default()) return std::nullopt;
  const auto launch = qmv_residual_launch(x, m, residual);
  if (!launch) return std::nullopt;
  static const CachedKernel kernel(qmv_residual_spec());
  return kernel(*launch)[0];
}

}  // namespace mlxrt::kernels::cuda
