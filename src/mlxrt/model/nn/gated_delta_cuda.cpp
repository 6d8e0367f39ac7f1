// Fused CUDA kernels equal to the ops path of mlx_lm/models/gated_delta.py and Qwen3.5's causal
// conv + SiLU (mlx-lm 0.32.2 on MLX 0.32.4's CUDA backend). Why each operation is written the way
// it is: gated_delta_cuda.h.
#include "mlxrt/model/nn/gated_delta_cuda.h"

#include <cstdlib>
#include <cstring>

#include <mlx/backend/cuda/cuda.h>
#include <mlx/device.h>
#include <mlx/fast.h>

#include "mlxrt/kernels/cuda/cached_kernel.h"

namespace mlxrt::model::nn {

namespace {

// One warp per (batch, value head, value row); lane l holds state elements r * 128 + 4 l + j, the
// elements MLX's row reduction gives thread l of its one warp (N_READS = 4 for float32, 32
// threads while a row needs at most 224 four-element reads). Lanes past the row's end add the
// reduction's zero, as MLX's masked tail does.
constexpr const char* kStepSource = R"(
  auto block = cg::this_thread_block();
  auto warp = cg::tiled_partition<32>(block);
  const int T = v_shape[1];
  const int n = blockIdx.z;
  const int b_idx = n / Hv, hv = n % Hv, hk = hv / (Hv / Hk);
  const int dv = blockIdx.y * blockDim.y + threadIdx.y;
  const int lane = threadIdx.x;
  if (dv >= Dv) return;
  constexpr int kChunks = (Dk + 127) / 128;
  constexpr int kSlots = kChunks * 4;
  float s[kSlots];
  bool live[kSlots];
  int idx[kSlots];
  for (int r = 0; r < kChunks; ++r)
    for (int j = 0; j < 4; ++j) {
      const int e = r * 128 + lane * 4 + j;
      idx[r * 4 + j] = e;
      live[r * 4 + j] = e < Dk;
    }
  const float* st_in = state_in + ((size_t)n * Dv + dv) * Dk;
  float* st_out = state_out + ((size_t)n * Dv + dv) * Dk;
  for (int i = 0; i < kSlots; ++i) s[i] = live[i] ? st_in[idx[i]] : 0.0f;
  auto add = [](float a, float b) { return a + b; };
  for (int t = 0; t < T; ++t) {
    const size_t bt = (size_t)b_idx * T + t;
    const QT* kt = k + (bt * Hk + hk) * Dk;
    const QT* qt = q + (bt * Hk + hk) * Dk;
    const float gt = g[bt * Hv + hv];
    const float bet = static_cast<float>(beta[bt * Hv + hv]);
    const float vt = static_cast<float>(v[(bt * Hv + hv) * Dv + dv]);
    // state * decay, then the row sum of state * k.
    float acc = 0.0f;
    for (int i = 0; i < kSlots; ++i) {
      if (live[i]) {
        s[i] = __fmul_rn(s[i], gt);
        acc = __fadd_rn(acc, __fmul_rn(s[i], static_cast<float>(kt[idx[i]])));
      } else {
        acc = __fadd_rn(acc, 0.0f);
      }
    }
    const float kv_mem = cg::reduce(warp, acc, add);
    const float delta = __fmul_rn(__fsub_rn(vt, kv_mem), bet);
    // state + k * delta (one fused multiply-add, as the JIT contracts it), then the row sum of
    // state * q.
    float out = 0.0f;
    for (int i = 0; i < kSlots; ++i) {
      if (live[i]) {
        s[i] = __fmaf_rn(static_cast<float>(kt[idx[i]]), delta, s[i]);
        out = __fadd_rn(out, __fmul_rn(s[i], static_cast<float>(qt[idx[i]])));
      } else {
        out = __fadd_rn(out, 0.0f);
      }
    }
    const float yv = cg::reduce(warp, out, add);
    if (lane == 0) y[(bt * Hv + hv) * Dv + dv] = static_cast<QT>(yv);
  }
  for (int i = 0; i < kSlots; ++i)
    if (live[i]) st_out[idx[i]] = s[i];
)";

// One thread per output element (channel c of position t in batch b).
constexpr const char* kConvSiluSource = R"(
  const int C = x_shape[2];
  const int L = x_shape[1];
  const int Tn = L - K + 1;
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int t = blockIdx.y;
  const int b = blockIdx.z;
  if (c >= C) return;
  const XT* xb = x + ((size_t)b * L + t) * C + c;
  float acc = 0.0f;
  for (int i = 0; i < K; ++i)
    acc = __fadd_rn(acc, __fmul_rn(static_cast<float>(xb[(size_t)i * C]), static_cast<float>(w[c * K + i])));
  const XT conv = static_cast<XT>(acc);
  out[((size_t)b * Tn + t) * C + c] = Multiply{}(conv, Sigmoid{}(conv));
)";

bool on_cuda() {
  if (const char* off = std::getenv("MLXRT_GATED_DELTA_OPS"); off && std::strcmp(off, "0") != 0 && *off) return false;
  return mx::default_device() == mx::Device::gpu && mx::cu::is_available();
}

bool is_16bit_float(mx::Dtype t) { return t == mx::bfloat16 || t == mx::float16; }

}  // namespace

bool fused_gated_delta_applies(const mx::array& q, const mx::array& k, const mx::array& v, const mx::array& g,
                               const mx::array& beta, const mx::array& state) {
  if (q.ndim() != 4 || k.shape() != q.shape() || v.ndim() != 4 || g.ndim() != 3 || beta.ndim() != 3 ||
      state.ndim() != 4)
    return false;
  const int Dk = q.shape(3), Hk = q.shape(2), Hv = v.shape(2);
  const bool dtypes = (is_16bit_float(q.dtype()) || q.dtype() == mx::float32) && k.dtype() == q.dtype() &&
                      (is_16bit_float(v.dtype()) || v.dtype() == mx::float32) &&
                      (is_16bit_float(beta.dtype()) || beta.dtype() == mx::float32) && g.dtype() == mx::float32 &&
                      state.dtype() == mx::float32;
  return dtypes && Dk % 4 == 0 && Dk <= 512 && Hk > 0 && Hv % Hk == 0 && on_cuda();
}

std::pair<mx::array, mx::array> gated_delta_fused(const mx::array& q, const mx::array& k, const mx::array& v,
                                                  const mx::array& g, const mx::array& beta, const mx::array& state) {
  static const kernels::cuda::CachedKernel kernel(kernels::cuda::KernelSpec{
      "mlxrt_gated_delta_step", {"q", "k", "v", "g", "beta", "state_in"}, {"y", "state_out"},
      kStepSource, "#include <cooperative_groups/reduce.h>\n", true, 0,
      /*self_compile=*/false});
  const int B = q.shape(0), T = q.shape(1), Hk = q.shape(2), Dk = q.shape(3), Hv = v.shape(2), Dv = v.shape(3);
  auto out = kernel({q, k, v, g, beta, state}, {{B, T, Hv, Dv}, state.shape()}, {q.dtype(), mx::float32},
                    {32, Dv, B * Hv}, {32, 4, 1},
                    {{"QT", q.dtype()}, {"Dk", Dk}, {"Dv", Dv}, {"Hk", Hk}, {"Hv", Hv}}, std::nullopt, false, {});
  return {out[0], out[1]};
}

bool fused_conv_silu_applies(const mx::array& x, const mx::array& weight) {
  if (x.ndim() != 3 || weight.ndim() != 3 || weight.shape(0) != x.shape(2) || weight.shape(2) != 1) return false;
  const int positions = x.shape(1) - weight.shape(1) + 1;
  return is_16bit_float(x.dtype()) && weight.dtype() == x.dtype() && positions >= 1 && positions <= 65535 &&
         on_cuda();
}

mx::array conv_silu_fused(const mx::array& x, const mx::array& weight) {
  static const kernels::cuda::CachedKernel kernel(kernels::cuda::KernelSpec{
      "mlxrt_conv_silu", {"x", "w"}, {"out"}, kConvSiluSource,
      "#include \"mlx/backend/cuda/device/unary_ops.cuh\"\n#include \"mlx/backend/cuda/device/binary_ops.cuh\"\n", true, 0,
      /*self_compile=*/false});
  const int B = x.shape(0), L = x.shape(1), C = x.shape(2), K = weight.shape(1);
  return kernel({x, weight}, {{B, L - K + 1, C}}, {x.dtype()}, {C, L - K + 1, B}, {256, 1, 1},
                {{"XT", x.dtype()}, {"K", K}}, std::nullopt, false, {})[0];
}

}  // namespace mlxrt::model::nn
