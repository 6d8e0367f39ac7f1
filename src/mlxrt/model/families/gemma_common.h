#pragma once
/** Pieces the Gemma families share (mlx_lm/models/gemma.py, gemma2.py, gemma3_text.py, gemma3n.py,
 * gemma4_text.py; the (1 + weight) RMSNorm of the first three is nn::GemmaRMSNorm). */
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <mlx/array.h>
#include <mlx/compile.h>
#include <mlx/ops.h>

#include "mlxrt/model/nn/linear.h"

namespace mlxrt::model::gemma_common {

namespace mx = mlx::core;

/** down_proj(act(gate_proj(x)) * up_proj(x)): gelu in gemma.py, gelu_approx in gemma2.py and
 * gemma3_text.py; the product is taken outside the compiled activation. */
struct GatedMLP {
  using Activation = mx::array (*)(const mx::array&);
  nn::Linear gate_proj, down_proj, up_proj;
  Activation act;

  GatedMLP(int dim, int hidden_dim, Activation activation, WeightBinder& w, const std::string& p)
      : gate_proj(nn::Linear::load(w, p + ".gate_proj", dim, hidden_dim, false)),
        down_proj(nn::Linear::load(w, p + ".down_proj", hidden_dim, dim, false)),
        up_proj(nn::Linear::load(w, p + ".up_proj", dim, hidden_dim, false)),
        act(activation) {}
  mx::array operator()(const mx::array& x) const { return down_proj(mx::multiply(act(gate_proj(x)), up_proj(x))); }
};

/** h * (hidden_size ** 0.5) as gemma.py and gemma2.py write it: the Python float takes h's dtype. */
inline mx::array scale_embeddings(const mx::array& h, int hidden_size) {
  return mx::multiply(h, mx::array(static_cast<float>(std::pow(static_cast<double>(hidden_size), 0.5)), h.dtype()));
}

/** logit_softcap(softcap, x) = tanh(x / softcap) * softcap, compiled shapeless as gemma3n.py and
 * gemma4_text.py do; the cap (a Python float) is a constant of the compiled graph in x's dtype. */
inline std::function<std::vector<mx::array>(const std::vector<mx::array>&)> compiled_softcap(float cap) {
  return mx::compile(
      [cap](const std::vector<mx::array>& in) -> std::vector<mx::array> {
        const auto& x = in[0];
        auto c = mx::array(cap, x.dtype());
        return {mx::multiply(mx::tanh(mx::divide(x, c)), c)};
      },
      /*shapeless=*/true);
}

}  // namespace mlxrt::model::gemma_common
