#pragma once
/** The gated delta rule of Qwen3-Next / Qwen3.5's linear-attention layers (mlx_lm/models/
 * gated_delta.py). mlx-lm runs its Metal kernel only on Apple GPUs; on CPU and CUDA it runs the
 * ops path, a loop of one compiled step per token, which is what these functions reproduce. */
#include <optional>
#include <utility>

#include <mlx/array.h>

namespace mlxrt::model::nn {

namespace mx = mlx::core;

/** compute_g (compiled shapeless): exp(-exp(A_log in float32) * softplus(a + dt_bias)). */
mx::array compute_g(const mx::array& A_log, const mx::array& a, const mx::array& dt_bias);

/** normalize_qk: L2-normalises q and k through rms_norm (eps scaled by inv_scale^2) and folds the
 * head_dim^-0.5 readout scale into q. Returns {q, k}. */
std::pair<mx::array, mx::array> normalize_qk(const mx::array& q, const mx::array& k, double inv_scale, double eps);

/** One recurrent step (_gated_delta_step_ops, compiled): q, k [B, H, Dk], v [B, H, Dv],
 * g [B, H] or [B, H, Dk], beta [B, H], state [B, H, Dv, Dk] -> {y [B, H, Dv], new state}. */
std::pair<mx::array, mx::array> gated_delta_step(const mx::array& q, const mx::array& k, const mx::array& v,
                                                 const mx::array& g, const mx::array& beta, const mx::array& state);

/** gated_delta_ops: the sequential loop over T. q, k [B, T, Hk, Dk], v [B, T, Hv, Dv],
 * g [B, T, Hv], beta [B, T, Hv], state [B, Hv, Dv, Dk] -> {y [B, T, Hv, Dv], state}. */
std::pair<mx::array, mx::array> gated_delta_ops(mx::array q, mx::array k, const mx::array& v, const mx::array& g,
                                                const mx::array& beta, std::optional<mx::array> state);

/** gated_delta_update: beta = sigmoid(b), g = compute_g(A_log, a, dt_bias), then the ops path.
 * A missing state starts at zeros in float32. */
std::pair<mx::array, mx::array> gated_delta_update(const mx::array& q, const mx::array& k, const mx::array& v,
                                                   const mx::array& a, const mx::array& b, const mx::array& A_log,
                                                   const mx::array& dt_bias, std::optional<mx::array> state);

/** State-only prefix replay (for rolling back a verify window in speculative decoding): from the
 * state before a window of T positions and the window's normalised k, its v and its gate inputs
 * a and b, the recurrent state after the first `n` positions (0 <= n <= T), without computing any
 * output. Each step is the same compiled step as gated_delta_update's, so the state is
 * byte-equal to the one a forward over those n positions leaves. */
mx::array gated_delta_replay_state(const mx::array& k, const mx::array& v, const mx::array& a, const mx::array& b,
                                   const mx::array& A_log, const mx::array& dt_bias, std::optional<mx::array> state,
                                   int n);

}  // namespace mlxrt::model::nn
