// The L3 decoding step's q/k norms and RoPE on CUDA: the kernel and its launch. What it computes
// and why it exists: qk_rope.h.
#include "mlxrt/kernels/cuda/qk_rope.h"

#include <bit>
#include <cmath>
#include <cstdint>

#include <mlx/fast.h>
#include <mlx/ops.h>

#include "mlxrt/kernels/cuda/cached_kernel.h"
#include "mlxrt/kernels/cuda/rope_device.h"

namespace mlxrt::kernels::cuda {

namespace {

// One warp per (row, head): the head's D values into registers, normalised (NORM), kept in the
// warp's slice of shared memory as the norm leaves them (rounded to QT), then rotated pair by pair.
// Heads 0..H-1 are the queries', H..H+HK-1 the keys'.
constexpr const char* kSource = R"(
  __shared__ float heads[4][D];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int task = blockIdx.x * (blockDim.x >> 5) + warp;
  if (task >= M * (H + HK)) return;
  const int m = task / (H + HK), head = task - m * (H + HK);
  const bool is_q = head < H;
  const int hh = is_q ? head : head - H;
  const int nh = is_q ? H : HK;
  const QT* src = (is_q ? q : k) + (static_cast<size_t>(m) * nh + hh) * D;
  float* row = heads[warp];
  mlxrt_norm_head<QT, D, NORM>(src, is_q ? qw : kw, __int_as_float(is_q ? EPS_Q_BITS : EPS_K_BITS), row, lane);
  const int b = m / L, l = m - b * L;
  const float position = __int_as_float(SCALE_BITS) * static_cast<float>(off[PER_ROW ? b : 0] + l);
  QT* dst = (is_q ? yq : yk) + ((static_cast<size_t>(b) * nh + hh) * L + l) * D;
  mlxrt_rope_row<QT, D, ROT, TRAD, FREQS>(row, position, freqs, __int_as_float(LOG2_BASE_BITS), dst, lane);
)";

constexpr int kWarpsPerBlock = 4;  // the kernel's shared memory holds 4 heads
constexpr int kMaxHeadDim = 256;

bool is_float(mx::Dtype t) { return t == mx::bfloat16 || t == mx::float16 || t == mx::float32; }

bool norm_applies(const std::optional<RmsNormIn>& norm, mx::Dtype t, int d) {
  return !norm || (norm->weight.dtype() == t && norm->weight.ndim() == 1 && norm->weight.shape(0) == d);
}

}  // namespace

const KernelSpec& qk_norm_rope_spec() {
  static const KernelSpec spec{
      "mlxrt_qk_norm_rope", {"q", "k", "qw", "kw", "off", "freqs"}, {"yq", "yk"}, kSource, detail::kNormRopeDevice};
  return spec;
}

std::optional<KernelLaunch> qk_norm_rope_launch(const mx::array& q, const mx::array& k, int n_heads, int n_kv_heads,
                                                const std::optional<RmsNormIn>& q_norm,
                                                const std::optional<RmsNormIn>& k_norm, const RopeIn& rope,
                                                const mx::array& offset) {
  if (q.ndim() != 3 || k.ndim() != 3 || q.dtype() != k.dtype() || !is_float(q.dtype())) return std::nullopt;
  const int B = q.shape(0), L = q.shape(1);
  if (k.shape(0) != B || k.shape(1) != L || n_heads <= 0 || n_kv_heads <= 0) return std::nullopt;
  if (q.shape(2) % n_heads != 0) return std::nullopt;
  const int d = q.shape(2) / n_heads;
  if (k.shape(2) != n_kv_heads * d || d > kMaxHeadDim || B * L > kQkRopeMaxRows || B * L < 1) return std::nullopt;
  if (q_norm.has_value() != k_norm.has_value() || !norm_applies(q_norm, q.dtype(), d) ||
      !norm_applies(k_norm, q.dtype(), d))
    return std::nullopt;
  if (rope.dims <= 0 || rope.dims % 2 != 0 || rope.dims > d || rope.base.has_value() == rope.freqs.has_value())
    return std::nullopt;
  if (rope.freqs && (rope.freqs->dtype() != mx::float32 || rope.freqs->ndim() != 1 ||
                     rope.freqs->shape(0) != rope.dims / 2))
    return std::nullopt;
  const bool per_row = offset.size() > 1;
  if (offset.dtype() != mx::int32 || offset.ndim() > 1 || (per_row && offset.size() != static_cast<size_t>(B)))
    return std::nullopt;
  const int tasks = B * L * (n_heads + n_kv_heads);
  const int blocks = (tasks + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int threads = 32 * kWarpsPerBlock;
  // Absent norms and frequencies: inputs the kernel does not read, so it keeps one list of them.
  const auto& qw = q_norm ? q_norm->weight : q;
  const auto& kw = k_norm ? k_norm->weight : q;
  const auto& freqs = rope.freqs ? *rope.freqs : offset;
  // As MLX's RoPE passes it: log2 of the float base, in float.
  const float log2_base = rope.base ? std::log2(*rope.base) : 0.0f;
  return KernelLaunch{&qk_norm_rope_spec(),
                      {q, k, qw, kw, offset, freqs},
                      {{B, n_heads, L, d}, {B, n_kv_heads, L, d}},
                      {q.dtype(), q.dtype()},
                      {blocks * threads, 1, 1},
                      {threads, 1, 1},
                      {{"QT", q.dtype()}, {"M", B * L}, {"L", L}, {"H", n_heads}, {"HK", n_kv_heads}, {"D", d},
                       {"ROT", rope.dims}, {"TRAD", rope.traditional}, {"FREQS", rope.freqs.has_value()},
                       {"NORM", q_norm.has_value()}, {"PER_ROW", per_row},
                       {"EPS_Q_BITS", q_norm ? std::bit_cast<int>(q_norm->eps) : 0},
                       {"EPS_K_BITS", k_norm ? std::bit_cast<int>(k_norm->eps) : 0},
                       {"LOG2_BASE_BITS", std::bit_cast<int>(log2_base)},
                       {"SCALE_BITS", std::bit_cast<int>(rope.scale)}}};
}

std::optional<std::pair<mx::array, mx::array>> qk_norm_rope(const mx::array& q, const mx::array& k, int n_heads,
                                                            int n_kv_heads, const std::optional<RmsNormIn>& q_norm,
                                                            const std::optional<RmsNormIn>& k_norm,
                                                            const RopeIn& rope, const mx::array& offset) {
  if (!cuda_gpu_is_default()) return std::nullopt;
  const auto launch = qk_norm_rope_launch(q, k, n_heads, n_kv_heads, q_norm, k_norm, rope, offset);
  if (!launch) return std::nullopt;
  static const CachedKernel kernel(qk_norm_rope_spec());
  auto ys = kernel(*launch);
  return std::pair{ys[0], ys[1]};
}

}  // namespace mlxrt::kernels::cuda
