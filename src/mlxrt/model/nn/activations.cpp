#include "mlxrt/model/nn/activations.h"

#include <cmath>

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

mx::array gelu(const mx::array& x) {
  static const auto compiled = mx::compile(
      [](const std::vector<mx::array>& in) -> std::vector<mx::array> {
        const auto& x = in[0];
        auto c = [&](double v) { return mx::array(static_cast<float>(v), x.dtype()); };
        auto cdf = mx::add(c(1), mx::erf(mx::divide(x, c(std::sqrt(2.0)))));
        return {mx::divide(mx::multiply(x, cdf), c(2))};
      },
      /*shapeless=*/true);
  return compiled({x})[0];
}

mx::array silu(const mx::array& x) {
  static const auto compiled = mx::compile(
      [](const std::vector<mx::array>& in) -> std::vector<mx::array> {
        return {mx::multiply(in[0], mx::sigmoid(in[0]))};
      },
      /*shapeless=*/true);
  return compiled({x})[0];
}

mx::array precise_swiglu(const mx::array& h, const mx::array& gate, const mx::array& x) {
  static const auto compiled = mx::compile(
      [](const std::vector<mx::array>& in) -> std::vector<mx::array> {
        auto g = mx::astype(in[1], mx::float32);
        g = mx::multiply(g, mx::sigmoid(g));
        return {mx::astype(mx::multiply(g, mx::astype(in[2], mx::float32)), in[0].dtype())};
      },
      /*shapeless=*/true);
  return compiled({h, gate, x})[0];
}

namespace {

// 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3))); each Python scalar takes x's dtype.
mx::array gelu_approx_ops(const mx::array& x) {
  auto c = [&](double v) { return mx::array(static_cast<float>(v), x.dtype()); };
  auto inner = mx::add(x, mx::multiply(c(0.044715), mx::power(x, c(3))));
  auto t = mx::tanh(mx::multiply(c(std::sqrt(2 / M_PI)), inner));
  return mx::multiply(mx::multiply(c(0.5), x), mx::add(c(1), t));
}

}  // namespace

mx::array gelu_approx(const mx::array& x) {
  static const auto compiled = mx::compile(
      [](const std::vector<mx::array>& in) -> std::vector<mx::array> { return {gelu_approx_ops(in[0])}; },
      /*shapeless=*/true);
  return compiled({x})[0];
}

mx::array geglu(const mx::array& gate, const mx::array& x) {
  // nn.gelu_approx is itself compiled; inside another compiled function it is inlined.
  static const auto compiled = mx::compile(
      [](const std::vector<mx::array>& in) -> std::vector<mx::array> {
        return {mx::multiply(gelu_approx_ops(in[0]), in[1])};
      },
      /*shapeless=*/true);
  return compiled({gate, x})[0];
}

mx::array gelu_topk(const mx::array& inputs, const mx::array& std_multiplier) {
  static const auto compiled = mx::compile(
      [](const std::vector<mx::array>& in) -> std::vector<mx::array> {
        const auto& x = in[0];
        auto inputs_mean = mx::mean(x, -1, /*keepdims=*/true);
        auto inputs_std = mx::std(x, -1, /*keepdims=*/true);
        auto cutoff_x = mx::add(inputs_mean, mx::multiply(inputs_std, mx::astype(in[1], inputs_std.dtype())));
        return {gelu_approx_ops(mx::maximum(mx::array(0.0f, x.dtype()), mx::subtract(x, cutoff_x)))};
      },
      /*shapeless=*/true);
  return compiled({inputs, std_multiplier})[0];
}

}  // namespace mlxrt::model::nn
