#include "mlxrt/model/nn/activations.h"

#include <mlx/compile.h>
#include <mlx/ops.h>

namespace mlxrt::model::nn {

namespace mx = mlx::core;

mx::array swiglu(const mx::array& gate, const mx::array& x) {
  // nn.silu is itself compiled; inside another compiled function it is inlined.
  static const auto compiled = mx::compile(
      [](const std::vector<mx::array>& in) -> std::vector<mx::array> {
        const auto& g = in[0];
        return {mx::multiply(mx::multiply(g, mx::sigmoid(g)), in[1])};
      },
      /*shapeless=*/true);
  return compiled({gate, x})[0];
}

}  // namespace mlxrt::model::nn
