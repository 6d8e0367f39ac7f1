// Port of mlx_lm/models/switch_layers.py and the swiglu_oai of mlx_lm/models/activations.py
// (mlx-lm 0.32.2).
#include "mlxrt/model/nn/switch_layers.h"

#include <mlx/compile.h>
#include <mlx/ops.h>

#include "mlxrt/model/nn/activations.h"

namespace mlxrt::model::nn {

namespace {

struct Sorted {
  mx::array x, indices, inv_order;
};

// _gather_sort: the (token, expert) pairs in expert order. x [..., 1, 1, D] -> [N, 1, D].
Sorted gather_sort(const mx::array& x, const mx::array& indices) {
  const int M = indices.shape(-1);
  auto flat = mx::flatten(indices);
  auto order = mx::argsort(flat);
  auto inv_order = mx::argsort(order);
  auto rows = mx::floor_divide(order, mx::array(M, order.dtype()));
  return {mx::take(mx::flatten(x, 0, -3), rows, 0), mx::take(flat, order, 0), inv_order};
}

// _scatter_unsort: back to token order, [N, 1, D] -> indices.shape + [1, D].
mx::array scatter_unsort(const mx::array& x, const mx::array& inv_order, const mx::Shape& shape) {
  return mx::unflatten(mx::take(x, inv_order, 0), 0, shape);
}

// The projections of one expert block, run on the sorted pairs when there are enough of them.
template <typename Body>
mx::array switch_apply(const mx::array& x_in, const mx::array& indices, Body body) {
  auto x = mx::expand_dims(x_in, {-2, -3});
  const bool do_sort = indices.size() >= static_cast<size_t>(kSwitchSortThreshold);
  if (!do_sort) return mx::squeeze(body(x, indices, false), -2);
  auto s = gather_sort(x, indices);
  auto y = body(s.x, s.indices, true);
  return mx::squeeze(scatter_unsort(y, s.inv_order, indices.shape()), -2);
}

}  // namespace

SwitchLinear SwitchLinear::load(WeightBinder& w, const std::string& path, int input_dims, int output_dims,
                                int num_experts, bool bias) {
  std::optional<Quantized> q;
  std::optional<mx::array> weight;
  if (auto spec = w.config().quantization().for_module(path, input_dims, w.saved_quant(path))) {
    // mx.quantize packs `bits`-bit values into uint32 words; scales/biases hold one per group.
    weight = w.take(path + ".weight", {num_experts, output_dims, input_dims * spec->bits / 32});
    const mx::Shape groups{num_experts, output_dims, input_dims / spec->group_size};
    q = Quantized{w.take(path + ".scales", groups), std::nullopt, *spec};
    if (spec->mode == "affine") q->biases = w.take(path + ".biases", groups);
  } else {
    weight = w.take(path + ".weight", {num_experts, output_dims, input_dims});
  }
  std::optional<mx::array> b;
  if (bias) b = w.take(path + ".bias", {num_experts, output_dims});
  return SwitchLinear(std::move(*weight), std::move(b), std::move(q));
}

mx::array SwitchLinear::operator()(const mx::array& x, const mx::array& indices, bool sorted_indices) const {
  mx::array y = q_ ? mx::gather_qmm(x, weight_, q_->scales, q_->biases, std::nullopt, indices, true,
                                    q_->spec.group_size, q_->spec.bits, q_->spec.mode, std::nullopt,
                                    sorted_indices)
                   : mx::gather_mm(x, mx::swapaxes(weight_, -1, -2), std::nullopt, indices, sorted_indices);
  if (bias_) y = mx::add(y, mx::expand_dims(mx::take(*bias_, indices, 0), -2));
  return y;
}

mx::array swiglu_oai(const mx::array& gate, const mx::array& x) {
  static const auto compiled = mx::compile(
      [](const std::vector<mx::array>& in) -> std::vector<mx::array> {
        const double alpha = 1.702, limit = 7.0;
        const auto& g_in = in[0];
        const auto& x_in = in[1];
        // Python scalars take the array operand's dtype.
        auto g = mx::minimum(g_in, mx::array(static_cast<float>(limit), g_in.dtype()));
        auto x = mx::clip(x_in, mx::array(static_cast<float>(-limit), x_in.dtype()),
                          mx::array(static_cast<float>(limit), x_in.dtype()));
        auto glu = mx::multiply(g, mx::sigmoid(mx::multiply(mx::array(static_cast<float>(alpha), g.dtype()), g)));
        return {mx::multiply(mx::add(x, mx::array(1.0f, x.dtype())), glu)};
      },
      /*shapeless=*/true);
  return compiled({gate, x})[0];
}

SwitchGLU SwitchGLU::load(WeightBinder& w, const std::string& path, int input_dims, int hidden_dims,
                          int num_experts, bool bias, SwitchActivation activation) {
  auto gate = SwitchLinear::load(w, path + ".gate_proj", input_dims, hidden_dims, num_experts, bias);
  auto up = SwitchLinear::load(w, path + ".up_proj", input_dims, hidden_dims, num_experts, bias);
  auto down = SwitchLinear::load(w, path + ".down_proj", hidden_dims, input_dims, num_experts, bias);
  return SwitchGLU(std::move(gate), std::move(up), std::move(down), activation);
}

mx::array SwitchGLU::operator()(const mx::array& x, const mx::array& indices) const {
  return switch_apply(x, indices, [&](const mx::array& h, const mx::array& idx, bool sorted) {
    auto x_up = up_proj_(h, idx, sorted);
    auto x_gate = gate_proj_(h, idx, sorted);
    auto act = activation_ == SwitchActivation::swiglu_oai ? swiglu_oai(x_gate, x_up)
               : activation_ == SwitchActivation::geglu    ? geglu(x_gate, x_up)
                                                           : swiglu(x_gate, x_up);
    return down_proj_(act, idx, sorted);
  });
}

SwitchMLP SwitchMLP::load(WeightBinder& w, const std::string& path, int input_dims, int hidden_dims,
                          int num_experts, bool bias) {
  auto fc1 = SwitchLinear::load(w, path + ".fc1", input_dims, hidden_dims, num_experts, bias);
  auto fc2 = SwitchLinear::load(w, path + ".fc2", hidden_dims, input_dims, num_experts, bias);
  return SwitchMLP(std::move(fc1), std::move(fc2));
}

mx::array SwitchMLP::operator()(const mx::array& x, const mx::array& indices) const {
  return switch_apply(x, indices, [&](const mx::array& h, const mx::array& idx, bool sorted) {
    return fc2_(gelu_approx(fc1_(h, idx, sorted)), idx, sorted);
  });
}

}  // namespace mlxrt::model::nn
