// The L3 affine quantized matrix-vector product on CUDA: the kernel and its launch. Why it is
// written this way: affine_qmv.h.
#include "mlxrt/kernels/cuda/affine_qmv.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <mlx/fast.h>
#include <mlx/ops.h>

#include "mlxrt/kernels/cuda/cached_kernel.h"
#include "mlxrt/kernels/cuda/env_knob.h"
#include "mlxrt/kernels/cuda/qmv_device.h"

namespace mlxrt::kernels::cuda {

namespace {

// One warp per R rows of w (qmv_device.h's mlxrt_qmv_warp), each row's sum written by one lane.
constexpr const char* kSource = R"(
  const int N = w_shape[0];
  const int row0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * R;
  if (row0 >= N) return;
  const bool x_vec = (reinterpret_cast<unsigned long long>(x) & 15) == 0;
  mlxrt_qmv_warp<M, R, BITS, GS, DEPTH>(x, x_vec, w, scales, biases, N, w_shape[1], row0,
                                 [&](size_t i, float v) { y[i] = static_cast<OT>(v); });
)";

// CHUNKS chunks of M rows of x (padded to CHUNKS * M rows) through the same warp's product, the
// chunk the fastest-varying block: the blocks of one group of w's rows run side by side, so those
// rows come from memory once and from the L2 cache for the other chunks. Each output is the sum
// mlxrt_qmv_warp gives its row in an M-row launch (same lanes, same order).
constexpr const char* kChunksSource = R"(
  const int N = w_shape[0];
  const int chunk = blockIdx.x % CHUNKS;
  const int row0 = ((blockIdx.x / CHUNKS) * (blockDim.x >> 5) + (threadIdx.x >> 5)) * R;
  if (row0 >= N) return;
  const size_t K = static_cast<size_t>(w_shape[1]) * 32 / BITS;
  const auto* xc = x + static_cast<size_t>(chunk) * M * K;
  auto* yc = y + static_cast<size_t>(chunk) * M * N;
  const bool x_vec = (reinterpret_cast<unsigned long long>(xc) & 15) == 0;
  mlxrt_qmv_warp<M, R, BITS, GS, DEPTH>(xc, x_vec, w, scales, biases, N, w_shape[1], row0,
                                 [&](size_t i, float v) { yc[i] = static_cast<OT>(v); });
)";

// A dense w with the block's warps sharing R rows (QmvTiling::split_k): thread t of the block reads
// at t * V + c * blockDim.x * V (qmv_device.h's mlxrt_dense_rows over T = blockDim.x threads), so a
// block reads blockDim.x * 16 contiguous bytes of a row per load and each thread few loads; each
// warp's sums are reduced by shuffles, then the warps' by the first M * R threads.
constexpr const char* kSplitSource = R"(
  __shared__ float part[8 * M * R];  // at most 8 warps' sums of the M x R outputs
  const int N = w_shape[0], K = w_shape[1];
  const int row0 = blockIdx.x * R;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  const bool x_vec = (reinterpret_cast<unsigned long long>(x) & 15) == 0;
  float acc[M][R];
  mlxrt_dense_rows<M, R>(x, x_vec, w, N, K, row0, threadIdx.x, acc, blockDim.x);
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float v = mlxrt_warp_sum(acc[m][r]);
      if (lane == 0) part[warp * M * R + m * R + r] = v;
    }
  __syncthreads();
  if (threadIdx.x < M * R) {
    float sum = 0.0f;
    for (int i = 0; i < nwarps; ++i) sum += part[i * M * R + threadIdx.x];
    const int m = threadIdx.x / R, r = threadIdx.x % R;
    if (row0 + r < N) y[static_cast<size_t>(m) * N + row0 + r] = static_cast<OT>(sum);
  }
)";

bool is_float(mx::Dtype t) { return t == mx::bfloat16 || t == mx::float16 || t == mx::float32; }

}  // namespace

const KernelSpec& affine_qmv_spec() {
  static const KernelSpec spec{"mlxrt_affine_qmv", {"x", "w", "scales", "biases"}, {"y"}, kSource, detail::kQmvDevice};
  return spec;
}

const KernelSpec& affine_qmv_chunks_spec() {
  static const KernelSpec spec{"mlxrt_affine_qmv_chunks", {"x", "w", "scales", "biases"}, {"y"}, kChunksSource,
                               detail::kQmvDevice};
  return spec;
}

const KernelSpec& dense_mv_split_spec() {
  static const KernelSpec spec{"mlxrt_dense_mv_split", {"x", "w"}, {"y"}, kSplitSource, detail::kQmvDevice};
  return spec;
}

// Enough warps to fill the H200's 132 multiprocessors several times over (more rows per warp only
// where N leaves warps to spare: they put more loads in flight per warp), 4 warps a block. A dense
// matrix: 4 rows a warp where N or K reaches 8192, else 1 (mlxrt_qmv_bench's best on Qwen3-8B's
// bf16 shapes on an H200: gate/up, down and the head at 4, q and o at 1).
int l3_depth() {
  static const int depth = env_choice("MLXRT_CUDA_L3_DEPTH", {1, 2, 3, 4}, 2);
  return depth;
}

QmvTiling choose_tiling(int n, QmvTiling t, bool dense, int k) {
  if (t.rows_per_warp == 0)
    t.rows_per_warp = dense ? (n >= 8192 || k >= 8192 ? 4 : 1) : n >= 8192 ? 4 : n >= 4096 ? 2 : 1;
  if (t.warps_per_block == 0) t.warps_per_block = 4;
  if (t.depth == 0) t.depth = l3_depth();
  return t;
}

namespace {
// affine_qmv_operands_fit with x of 1 to max_rows rows.
bool affine_operands_fit(const mx::array& x, const mx::array& w, const mx::array& scales,
                         const std::optional<mx::array>& biases, int group_size, int bits, int max_rows) {
  if (!biases || (bits != 4 && bits != 8) || (group_size != 32 && group_size != 64 && group_size != 128)) return false;
  if (w.ndim() != 2 || w.dtype() != mx::uint32 || x.ndim() < 1 || !is_float(x.dtype())) return false;
  if (!is_float(scales.dtype()) || biases->dtype() != scales.dtype()) return false;
  const int n = w.shape(0);
  const long long k = static_cast<long long>(w.shape(1)) * 32 / bits;
  if (n == 0 || k == 0 || k % group_size != 0 || x.shape(-1) != k) return false;
  const mx::Shape groups = {n, static_cast<int>(k / group_size)};
  if (scales.shape() != groups || biases->shape() != groups) return false;
  const size_t rows = x.size() / static_cast<size_t>(k);
  return rows >= 1 && rows <= static_cast<size_t>(max_rows);
}
}  // namespace

bool affine_qmv_operands_fit(const mx::array& x, const mx::array& w, const mx::array& scales,
                             const std::optional<mx::array>& biases, int group_size, int bits) {
  return affine_operands_fit(x, w, scales, biases, group_size, bits, kQmvMaxRows);
}

bool affine_qmv_chunks_operands_fit(const mx::array& x, const mx::array& w, const mx::array& scales,
                                    const std::optional<mx::array>& biases, int group_size, int bits) {
  return affine_operands_fit(x, w, scales, biases, group_size, bits, kQmvChunksMaxRows);
}

bool affine_qmv_applies(const mx::array& x, const mx::array& w, const mx::array& scales,
                        const std::optional<mx::array>& biases, int group_size, int bits) {
  return affine_qmv_operands_fit(x, w, scales, biases, group_size, bits) && cuda_gpu_is_default();
}

bool affine_qmv_chunks_applies(const mx::array& x, const mx::array& w, const mx::array& scales,
                               const std::optional<mx::array>& biases, int group_size, int bits) {
  return affine_qmv_chunks_operands_fit(x, w, scales, biases, group_size, bits) && cuda_gpu_is_default();
}

namespace {

// Whether x (of k values a row) has rows from `least` to `most` and w holds at least 4 MiB: both
// products' measured rule is 1 to 7 rows, the chunks' 8 to kQmvChunksMaxRows.
bool rows_of_large_weights(const mx::array& x, const mx::array& w, size_t k, size_t least, size_t most) {
  const size_t rows = k ? x.size() / k : 0;
  return rows >= least && rows <= most && static_cast<size_t>(w.nbytes()) >= (size_t{4} << 20);
}

bool few_rows_of_large_weights(const mx::array& x, const mx::array& w, size_t k) {
  return rows_of_large_weights(x, w, k, 0, 7);
}

}  // namespace

bool affine_qmv_preferred(const mx::array& x, const mx::array& w, int bits) {
  return few_rows_of_large_weights(x, w, static_cast<size_t>(w.shape(1)) * 32 / static_cast<size_t>(bits));
}

bool affine_qmv_chunks_preferred(const mx::array& x, const mx::array& w, int bits) {
  return rows_of_large_weights(x, w, static_cast<size_t>(w.shape(1)) * 32 / static_cast<size_t>(bits), 8,
                               kQmvChunksMaxRows);
}

bool dense_l3_opted_in() { return env_flag("MLXRT_CUDA_L3_DENSE"); }

bool dense_mv_operands_fit(const mx::array& x, const mx::array& w) {
  if (w.ndim() != 2 || !is_float(w.dtype()) || x.ndim() < 1 || x.dtype() != w.dtype()) return false;
  const int n = w.shape(0), k = w.shape(1);
  if (n == 0 || k == 0 || x.shape(-1) != k) return false;
  const size_t rows = x.size() / static_cast<size_t>(k);
  return rows >= 1 && rows <= static_cast<size_t>(kQmvMaxRows);
}

bool dense_mv_applies(const mx::array& x, const mx::array& w) {
  return dense_mv_operands_fit(x, w) && cuda_gpu_is_default();
}

bool dense_mv_preferred(const mx::array& x, const mx::array& w) {
  return few_rows_of_large_weights(x, w, static_cast<size_t>(w.shape(1)));
}

namespace {

// The launch both products share: `bits` 0 is a dense w (scales and biases then w again, unread).
// `chunks` > 0: x is that many chunks of kQmvMaxRows rows for kChunksSource (the grid's blocks and
// the output's rows times chunks); 0: x's rows in one launch of kSource.
KernelLaunch mv_launch(const mx::array& x, const mx::array& w, const mx::array& scales, const mx::array& biases,
                       int group_size, int bits, mx::Dtype out_type, QmvTiling tiling, int chunks = 0) {
  tiling = choose_tiling(w.shape(0), tiling, bits == 0, x.shape(-1));
  // More than 8 warps a block can ask more registers than a multiprocessor has (8 rows of x).
  if (tiling.rows_per_warp < 1 || tiling.rows_per_warp > 8 || tiling.warps_per_block < 1 ||
      tiling.warps_per_block > 8 || tiling.depth < 1 || tiling.depth > 4)
    throw std::invalid_argument("[affine_qmv] tiling: 1-8 rows per warp, 1-8 warps per block, 1-4 steps in flight");
  const int n = w.shape(0);
  const int k = x.shape(-1);
  const int rows = chunks ? kQmvMaxRows : static_cast<int>(x.size() / static_cast<size_t>(k));
  const int warps = (n + tiling.rows_per_warp - 1) / tiling.rows_per_warp;
  const int blocks = (warps + tiling.warps_per_block - 1) / tiling.warps_per_block * std::max(chunks, 1);
  const int threads = 32 * tiling.warps_per_block;
  auto shape = x.shape();
  shape.back() = n;
  // Each kernel's launch spelled out whole: tools/cuda/nvrtc_check.py reads a spec's template
  // arguments from the KernelLaunch that names it.
  if (chunks)
    return {&affine_qmv_chunks_spec(),
            {x, w, scales, biases},
            {shape},
            {out_type},
            {blocks * threads, 1, 1},
            {threads, 1, 1},
            {{"XT", x.dtype()}, {"ST", scales.dtype()}, {"OT", out_type}, {"M", rows}, {"R", tiling.rows_per_warp},
             {"BITS", bits}, {"GS", group_size}, {"DEPTH", tiling.depth}, {"CHUNKS", chunks}}};
  return {&affine_qmv_spec(),
          {x, w, scales, biases},
          {shape},
          {out_type},
          {blocks * threads, 1, 1},
          {threads, 1, 1},
          {{"XT", x.dtype()}, {"ST", scales.dtype()}, {"OT", out_type}, {"M", rows}, {"R", tiling.rows_per_warp},
           {"BITS", bits}, {"GS", group_size}, {"DEPTH", tiling.depth}}};
}

}  // namespace

KernelLaunch affine_qmv_launch(const mx::array& x, const mx::array& w, const mx::array& scales,
                               const mx::array& biases, int group_size, int bits, QmvTiling tiling) {
  if (!affine_qmv_operands_fit(x, w, scales, biases, group_size, bits))
    throw std::invalid_argument("[affine_qmv] unsupported operands (affine_qmv_operands_fit)");
  const auto out_type = mx::promote_types(mx::promote_types(x.dtype(), scales.dtype()), biases.dtype());
  return mv_launch(x, w, scales, biases, group_size, bits, out_type, tiling);
}

mx::array affine_qmv(const mx::array& x, const mx::array& w, const mx::array& scales, const mx::array& biases,
                     int group_size, int bits, QmvTiling tiling) {
  if (!affine_qmv_applies(x, w, scales, biases, group_size, bits))
    throw std::invalid_argument("[affine_qmv] unsupported operands (affine_qmv_applies)");
  static const CachedKernel kernel(affine_qmv_spec());
  return kernel(affine_qmv_launch(x, w, scales, biases, group_size, bits, tiling))[0];
}

namespace {
// x's rows as [rows, K], padded with zero rows to a whole number of kQmvMaxRows-row chunks.
mx::array padded_chunks(const mx::array& x, int rows, int chunks) {
  auto flat = mx::reshape(x, {rows, x.shape(-1)});
  const int pad = chunks * kQmvMaxRows - rows;
  return pad ? mx::concatenate({flat, mx::zeros({pad, x.shape(-1)}, x.dtype())}, 0) : flat;
}
}  // namespace

KernelLaunch affine_qmv_chunks_launch(const mx::array& x, const mx::array& w, const mx::array& scales,
                                      const mx::array& biases, int group_size, int bits, QmvTiling tiling) {
  if (!affine_qmv_chunks_operands_fit(x, w, scales, biases, group_size, bits))
    throw std::invalid_argument("[affine_qmv_chunks] unsupported operands (affine_qmv_chunks_operands_fit)");
  const int rows = static_cast<int>(x.size() / static_cast<size_t>(x.shape(-1)));
  const int chunks = (rows + kQmvMaxRows - 1) / kQmvMaxRows;
  const auto out_type = mx::promote_types(mx::promote_types(x.dtype(), scales.dtype()), biases.dtype());
  return mv_launch(padded_chunks(x, rows, chunks), w, scales, biases, group_size, bits, out_type, tiling, chunks);
}

mx::array affine_qmv_chunks(const mx::array& x, const mx::array& w, const mx::array& scales, const mx::array& biases,
                            int group_size, int bits, QmvTiling tiling) {
  if (!affine_qmv_chunks_applies(x, w, scales, biases, group_size, bits))
    throw std::invalid_argument("[affine_qmv_chunks] unsupported operands (affine_qmv_chunks_applies)");
  static const CachedKernel kernel(affine_qmv_chunks_spec());
  const int rows = static_cast<int>(x.size() / static_cast<size_t>(x.shape(-1)));
  auto y = kernel(affine_qmv_chunks_launch(x, w, scales, biases, group_size, bits, tiling))[0];
  auto shape = x.shape();
  shape.back() = w.shape(0);
  return mx::reshape(mx::slice(y, {0, 0}, {rows, w.shape(0)}), shape);
}

KernelLaunch dense_mv_launch(const mx::array& x, const mx::array& w, QmvTiling tiling) {
  if (!dense_mv_operands_fit(x, w))
    throw std::invalid_argument("[dense_mv] unsupported operands (dense_mv_operands_fit)");
  if (!tiling.split_k) return mv_launch(x, w, w, w, 0, 0, x.dtype(), tiling);
  // The block's warps share rows_per_warp rows (at least 2 warps, so that M x R outputs have a thread each).
  if (tiling.rows_per_warp == 0) tiling.rows_per_warp = 2;
  if (tiling.warps_per_block == 0) tiling.warps_per_block = 4;
  if (tiling.rows_per_warp < 1 || tiling.rows_per_warp > 8 || tiling.warps_per_block < 2 ||
      tiling.warps_per_block > 8)
    throw std::invalid_argument("[dense_mv] split_k tiling: 1-8 rows per block, 2-8 warps per block");
  const int n = w.shape(0), k = x.shape(-1);
  const int rows = static_cast<int>(x.size() / static_cast<size_t>(k));
  const int blocks = (n + tiling.rows_per_warp - 1) / tiling.rows_per_warp;
  const int threads = 32 * tiling.warps_per_block;
  auto shape = x.shape();
  shape.back() = n;
  return {&dense_mv_split_spec(),
          {x, w},
          {shape},
          {x.dtype()},
          {blocks * threads, 1, 1},
          {threads, 1, 1},
          {{"OT", x.dtype()}, {"M", rows}, {"R", tiling.rows_per_warp}}};
}

mx::array dense_mv(const mx::array& x, const mx::array& w, QmvTiling tiling) {
  if (!dense_mv_applies(x, w)) throw std::invalid_argument("[dense_mv] unsupported operands (dense_mv_applies)");
  const auto launch = dense_mv_launch(x, w, tiling);
  static const CachedKernel mv(affine_qmv_spec()), split(dense_mv_split_spec());
  return (launch.spec == &dense_mv_split_spec() ? split : mv)(launch)[0];
}

}  // namespace mlxrt::kernels::cuda
