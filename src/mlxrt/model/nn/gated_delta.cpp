// Port of the ops path of mlx_lm/models/gated_delta.py (mlx-lm 0.32.2): compute_g, normalize_qk,
// _gated_delta_step_ops, gated_delta_ops and gated_delta_update. The Metal kernels there run only on
// Apple GPUs (mx.metal.is_available()); on CPU and CUDA mlx-lm takes this path.
#include "mlxrt/model/nn/gated_delta.h"

#include "mlxrt/model/nn/gated_delta_cuda.h"

#include <cmath>
#include <stdexcept>

#include <mlx/compile.h>
#include <mlx/fast.h>
#include <mlx/ops.h>

namespace mlxrt::model::nn {

namespace {

// x[:, t] for x [B, T, ...]
mx::array at_time(const mx::array& x, int t) {
  mx::Shape start(x.ndim(), 0), stop = x.shape();
  start[1] = t;
  stop[1] = t + 1;
  return mx::squeeze(mx::slice(x, start, stop), 1);
}

}  // namespace

mx::array compute_g(const mx::array& A_log, const mx::array& a, const mx::array& dt_bias) {
  // nn.softplus(x) is logaddexp(x, 0), itself compiled; inside this trace it is inlined.
  static const auto compiled = mx::compile(
      [](const std::vector<mx::array>& in) -> std::vector<mx::array> {
        const auto &A_log = in[0], &a = in[1], &dt_bias = in[2];
        auto x = mx::add(a, dt_bias);
        auto softplus = mx::logaddexp(x, mx::array(0.0f, x.dtype()));
        return {mx::exp(mx::multiply(mx::negative(mx::exp(mx::astype(A_log, mx::float32))), softplus))};
      },
      /*shapeless=*/true);
  return compiled({A_log, a, dt_bias})[0];
}

std::pair<mx::array, mx::array> normalize_qk(const mx::array& q, const mx::array& k, double inv_scale, double eps) {
  // rms_norm adds eps to mean(x^2) where the reference l2norm adds it to sum(x^2).
  const double inv_scale_sq = std::pow(inv_scale, 2.0);
  const auto rms_eps = static_cast<float>(eps * inv_scale_sq);
  auto qn = mx::multiply(mx::array(static_cast<float>(inv_scale_sq), q.dtype()),
                         mx::fast::rms_norm(q, std::nullopt, rms_eps));
  auto kn = mx::multiply(mx::array(static_cast<float>(inv_scale), k.dtype()),
                         mx::fast::rms_norm(k, std::nullopt, rms_eps));
  return {qn, kn};
}

std::pair<mx::array, mx::array> gated_delta_step(const mx::array& q, const mx::array& k, const mx::array& v,
                                                 const mx::array& g, const mx::array& beta, const mx::array& state) {
  // mx.compile (not shapeless): traced once per input shape, as in mlx-lm.
  static const auto compiled = mx::compile([](const std::vector<mx::array>& in) -> std::vector<mx::array> {
    const auto &q = in[0], &k = in[1], &v = in[2], &g = in[3], &beta = in[4];
    auto state = in[5];
    mx::array decay = g.ndim() == 2 ? mx::expand_dims(g, {-2, -1}) : mx::expand_dims(g, -2);
    state = mx::multiply(state, decay);
    auto kv_mem = mx::sum(mx::multiply(state, mx::expand_dims(k, -2)), -1);  // [B, H, Dv]
    auto delta = mx::multiply(mx::subtract(v, kv_mem), mx::expand_dims(beta, -1));
    state = mx::add(state, mx::multiply(mx::expand_dims(k, -2), mx::expand_dims(delta, -1)));
    // Output projection along the key dimension with q.
    auto y = mx::sum(mx::multiply(state, mx::expand_dims(q, -2)), -1);  // [B, H, Dv]
    return {mx::astype(y, q.dtype()), state};
  });
  if (g.ndim() != 2 && g.ndim() != 3)
    throw std::invalid_argument("[gated_delta_step] unsupported gating of " + std::to_string(g.ndim()) +
                                " dimensions (expected [B, H] or [B, H, Dk])");
  auto out = compiled({q, k, v, g, beta, state});
  return {out[0], out[1]};
}

std::pair<mx::array, mx::array> gated_delta_ops(mx::array q, mx::array k, const mx::array& v, const mx::array& g,
                                                const mx::array& beta, std::optional<mx::array> state) {
  const int B = q.shape(0), T = q.shape(1), Hk = q.shape(2), Dk = q.shape(3);
  const int Hv = v.shape(-2), Dv = v.shape(-1);
  if (!state) state = mx::zeros({B, Hv, Dv, Dk}, mx::float32);
  // On CUDA the whole loop is one launch with the same bytes (gated_delta_cuda.h).
  if (fused_gated_delta_applies(q, k, v, g, beta, *state)) return gated_delta_fused(q, k, v, g, beta, *state);
  if (const int repeat_factor = Hv / Hk; repeat_factor > 1) {
    q = mx::repeat(q, repeat_factor, -2);
    k = mx::repeat(k, repeat_factor, -2);
  }
  std::vector<mx::array> ys;
  ys.reserve(static_cast<size_t>(T));
  mx::array s = *state;
  for (int t = 0; t < T; ++t) {
    auto [y, next] = gated_delta_step(at_time(q, t), at_time(k, t), at_time(v, t), at_time(g, t), at_time(beta, t), s);
    ys.push_back(y);
    s = next;
  }
  return {mx::stack(ys, 1), s};
}

std::pair<mx::array, mx::array> gated_delta_update(const mx::array& q, const mx::array& k, const mx::array& v,
                                                   const mx::array& a, const mx::array& b, const mx::array& A_log,
                                                   const mx::array& dt_bias, std::optional<mx::array> state) {
  auto beta = mx::sigmoid(b);
  auto g = compute_g(A_log, a, dt_bias);
  if (!state) state = mx::zeros({q.shape(0), v.shape(-2), v.shape(-1), q.shape(-1)}, mx::float32);
  return gated_delta_ops(q, k, v, g, beta, state);
}

mx::array gated_delta_replay_state(const mx::array& k, const mx::array& v, const mx::array& a, const mx::array& b,
                                   const mx::array& A_log, const mx::array& dt_bias, std::optional<mx::array> state,
                                   int n) {
  const int T = k.shape(1);
  if (n < 0 || n > T)
    throw std::invalid_argument("[gated_delta_replay_state] n = " + std::to_string(n) + " is outside 0.." +
                                std::to_string(T));
  const int B = k.shape(0), Hk = k.shape(2), Dk = k.shape(3), Hv = v.shape(-2), Dv = v.shape(-1);
  mx::array s = state ? *state : mx::zeros({B, Hv, Dv, Dk}, mx::float32);
  if (n == 0) return s;
  // The first n positions of the window, with beta and g computed from them alone, as a forward
  // over those n positions computes them.
  auto prefix = [n](const mx::array& x) {
    mx::Shape start(x.ndim(), 0), stop = x.shape();
    stop[1] = n;
    return mx::slice(x, start, stop);
  };
  auto kn = prefix(k), vn = prefix(v), an = prefix(a), bn = prefix(b);
  auto beta = mx::sigmoid(bn);
  auto g = compute_g(A_log, an, dt_bias);
  // The step's q only reaches y, which nothing reads: any q of the right shape leaves the state alone.
  if (auto q = mx::zeros(kn.shape(), k.dtype()); fused_gated_delta_applies(q, kn, vn, g, beta, s))
    return gated_delta_fused(q, kn, vn, g, beta, s).second;
  if (const int repeat_factor = Hv / Hk; repeat_factor > 1) kn = mx::repeat(kn, repeat_factor, -2);
  // The step's q only reaches y, which nothing reads: any q of the right shape leaves the state alone.
  auto q = mx::zeros({B, Hv, Dk}, k.dtype());
  for (int t = 0; t < n; ++t) s = gated_delta_step(q, at_time(kn, t), at_time(vn, t), at_time(g, t), at_time(beta, t), s).second;
  return s;
}

}  // namespace mlxrt::model::nn
