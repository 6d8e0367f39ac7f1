// Port of mlx_lm/models/switch_layers.py and the swiglu_oai of mlx_lm/models/activations.py
// (mlx-lm 0.32.2).
#include "mlxrt/model/nn/switch_layers.h"

#include <mlx/compile.h>
#include <mlx/ops.h>

#include "mlxrt/kernels/cpu/l3_matmul.h"
#include "mlxrt/model/nn/activations.h"
#include "mlxrt/model/nn/lora.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::model::nn {

namespace {

// _gather_sort: the (token, expert) pairs in expert order. x [..., 1, 1, D] -> [N, 1, D]. `rows`
// is each pair's token.
struct Sorted {
  mx::array x, indices, inv_order, rows;
};

Sorted gather_sort(const mx::array& x, const mx::array& indices) {
  const int M = indices.shape(-1);
  auto flat = mx::flatten(indices);
  auto order = mx::argsort(flat);
  auto inv_order = mx::argsort(order);
  auto rows = mx::floor_divide(order, mx::array(M, order.dtype()));
  return {mx::take(mx::flatten(x, 0, -3), rows, 0), mx::take(flat, order, 0), inv_order, rows};
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
  if (!do_sort) return mx::squeeze(body(x, indices, false, std::optional<SwitchLinear::PairTokens>()), -2);
  auto s = gather_sort(x, indices);
  const int tokens = static_cast<int>(indices.size() / static_cast<size_t>(indices.shape(-1)));
  auto y = body(s.x, s.indices, true, std::optional<SwitchLinear::PairTokens>(SwitchLinear::PairTokens{s.rows, tokens}));
  return mx::squeeze(scatter_unsort(y, s.inv_order, indices.shape()), -2);
}

// Whether the quantized switch layer at `path` holds a global scale, as mlx-lm's load decides it:
// the layer's entry in config.json's "quantization" map when it has one (its "global_scale" key is
// what to_quantized receives), else whether the checkpoint saved `path`.global_scale.
bool takes_global_scale(const WeightBinder& w, const std::string& path) {
  const auto& raw = w.config().raw();
  if (raw.contains("quantization") && raw["quantization"].is_object() && raw["quantization"].contains(path)) {
    const auto& entry = raw["quantization"][path];
    if (!entry.is_object() || !entry.contains("global_scale") || entry["global_scale"].is_null()) return false;
    if (!entry["global_scale"].is_boolean())
      throw ConfigError(w.config().source() + ": quantization." + path + ".global_scale must be true or false");
    return entry["global_scale"].get<bool>();
  }
  return w.has(path + ".global_scale");
}

}  // namespace

namespace {

// Binds one expert tensor: resident (evaluated with the model) or, with streamed experts, left
// unread in the files and described for the store.
mx::array take_expert_tensor(WeightBinder& w, const std::string& name, const mx::Shape& shape,
                             std::vector<StreamedTensor>& streamed) {
  auto a = w.take(name, shape);
  auto* streaming = w.expert_streaming();
  if (!streaming || a.shape() != shape) return a;  // a mis-shaped tensor: finish() reports it
  mx::Shape expert_shape(shape.begin() + 1, shape.end());
  const uint64_t per_expert = shape[0] > 0 ? a.nbytes() / static_cast<uint64_t>(shape[0]) : 0;
  streamed.push_back(StreamedTensor{name, a.dtype(), expert_shape, per_expert, streaming->streamed_source(a, name)});
  return a;
}

// Registers a block's streamed tensors (all its projections, in order) with the binder's store.
int register_streamed(WeightBinder& w, std::initializer_list<const SwitchLinear*> projections, int num_experts,
                      int top_k) {
  std::vector<StreamedTensor> tensors;
  for (const auto* p : projections) tensors.insert(tensors.end(), p->streamed().begin(), p->streamed().end());
  return w.expert_streaming()->store()->add_block(std::move(tensors), num_experts, top_k);
}

}  // namespace

SwitchLinear SwitchLinear::load(WeightBinder& w, const std::string& path, int input_dims, int output_dims,
                                int num_experts, bool bias) {
  // An adapter on the experts: LoRASwitchLinear (mlx-lm's tuner/lora.py) around this layer.
  std::shared_ptr<const LoraDelta> lora;
  if (auto* adapter = w.adapter()) lora = adapter->take_switch(path, num_experts, input_dims, output_dims);
  auto slots = take_slot_deltas(w, [&](Adapter& a) { return a.take_switch(path, num_experts, input_dims, output_dims); });
  if (lora && w.expert_streaming())
    throw UnsupportedError(w.config().source() + ": " + path + " is adapted by the adapter, whose expert deltas "
                           "--expert-memory does not stream: leave out --expert-memory or the adapter");
  std::optional<Quantized> q;
  std::optional<mx::array> weight, global_scale;
  std::vector<StreamedTensor> streamed;
  if (auto spec = w.config().quantization().for_module(path, input_dims, w.saved_quant(path))) {
    // mx.quantize packs `bits`-bit values into uint32 words; scales/biases hold one per group.
    weight = take_expert_tensor(w, path + ".weight", {num_experts, output_dims, input_dims * spec->bits / 32}, streamed);
    const mx::Shape groups{num_experts, output_dims, input_dims / spec->group_size};
    q = Quantized{take_expert_tensor(w, path + ".scales", groups, streamed), std::nullopt, *spec, w.cpu_kernels(), std::nullopt};
    if (takes_global_scale(w, path)) {
      // _quantize_experts: one float32 scale per expert, no biases; nvfp4 only.
      if (spec->mode != "nvfp4")
        throw UnsupportedError(w.config().source() + ": " + path + " has a global scale, which needs 'nvfp4' mode, got '" +
                               spec->mode + "'");
      if (w.expert_streaming())
        throw UnsupportedError(w.config().source() + ": " + path +
                               " holds nvfp4 experts with a global scale, which --expert-memory does not stream");
      global_scale = w.take(path + ".global_scale", {num_experts});
    } else if (spec->mode == "affine") {
      q->biases = take_expert_tensor(w, path + ".biases", groups, streamed);
      // At --fidelity l3 the experts are packed for the L3 kernels (not streamed ones: --expert-memory
      // reads experts into place as the router picks them).
      if (streamed.empty()) q->pack_l3(w, *weight);
    }
  } else {
    weight = take_expert_tensor(w, path + ".weight", {num_experts, output_dims, input_dims}, streamed);
  }
  std::optional<mx::array> b;
  if (bias) b = take_expert_tensor(w, path + ".bias", {num_experts, output_dims}, streamed);
  w.note_quantizable({path, QuantizableModule::Kind::switch_linear, q ? std::optional(q->spec) : std::nullopt, lora});
  SwitchLinear out(std::move(*weight), std::move(b), std::move(q), std::move(global_scale));
  out.streamed_ = std::move(streamed);
  out.lora_ = std::move(lora);
  out.slots_ = std::move(slots);
  return out;
}

SwitchLinear SwitchLinear::with_experts(const std::vector<mx::array>& arrays, size_t& pos) const {
  mx::array weight = arrays.at(pos++);
  std::optional<Quantized> q = q_;
  if (q) {
    q->scales = arrays.at(pos++);
    if (q->biases) q->biases = arrays.at(pos++);
  }
  std::optional<mx::array> b;
  if (bias_) b = arrays.at(pos++);
  return SwitchLinear(std::move(weight), std::move(b), std::move(q), std::nullopt);
}

void SwitchLinear::shard(WeightBinder& w, Shard shard, const std::string& path) {
  if (lora_ || slots_ || !streamed_.empty() || global_scale_)
    throw UnsupportedError(path + ": tensor parallel experts cannot be adapted, streamed (--expert-memory) or hold "
                           "an nvfp4 global scale");
  auto cut = [&](mx::array& t, int axis, const char* name) { t = w.keep_shard(path + "." + name, t, axis); };
  // _all_to_sharded: axis max(ndim - 2, 0), i.e. 1 (the output rows) of a stacked [E, out, in].
  const int axis = shard == Shard::all_to_sharded ? static_cast<int>(weight_.ndim()) - 2 : -1;
  cut(weight_, axis, "weight");
  if (q_) {
    cut(q_->scales, axis, "scales");
    if (q_->biases) cut(*q_->biases, axis, "biases");
  }
  if (bias_ && shard == Shard::all_to_sharded) cut(*bias_, -1, "bias");
}

mx::array SwitchLinear::operator()(const mx::array& x, const mx::array& indices, bool sorted_indices,
                                   const std::optional<PairTokens>& pairs) const {
  std::optional<mx::array> l3;
  if (q_ && q_->l3)
    l3 = kernels::cpu::l3_gather_qmm(q_->cpu, x, weight_, q_->scales, *q_->biases, *q_->l3, indices, q_->spec.group_size,
                                     q_->spec.bits, sorted_indices);
  mx::array y = l3 ? *l3
                : q_ ? kernels::cpu::gather_qmm(q_->cpu, x, weight_, q_->scales, q_->biases, indices,
                                                q_->spec.group_size, q_->spec.bits, q_->spec.mode, global_scale_,
                                                sorted_indices)
                     : mx::gather_mm(x, mx::swapaxes(weight_, -1, -2), std::nullopt, indices, sorted_indices);
  if (bias_) y = mx::add(y, mx::expand_dims(mx::take(*bias_, indices, 0), -2));
  if (lora_) y = lora_switch(*lora_, x, y, indices, sorted_indices);
  if (slots_) {
    auto adapted = [&](int slot) -> std::optional<mx::array> {
      const auto& d = slots_->deltas[static_cast<size_t>(slot)];
      if (!d) return std::nullopt;
      return lora_switch(*d, x, y, indices, sorted_indices);
    };
    // Sorted pairs are in expert order: each finds its row through its token.
    return pairs ? slots_->rows->select_pairs(y, pairs->token_of, pairs->num_tokens, adapted)
                 : slots_->rows->select(y, adapted);
  }
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
                          int num_experts, bool bias, SwitchActivation activation, int top_k) {
  auto gate = SwitchLinear::load(w, path + ".gate_proj", input_dims, hidden_dims, num_experts, bias);
  auto up = SwitchLinear::load(w, path + ".up_proj", input_dims, hidden_dims, num_experts, bias);
  auto down = SwitchLinear::load(w, path + ".down_proj", hidden_dims, input_dims, num_experts, bias);
  SwitchGLU out(std::move(gate), std::move(up), std::move(down), activation);
  if (auto* streaming = w.expert_streaming()) {
    out.store_ = streaming->store();
    out.block_ = register_streamed(w, {&out.gate_proj_, &out.up_proj_, &out.down_proj_}, num_experts, top_k);
  }
  return out;
}

void SwitchGLU::shard(WeightBinder& w, const std::string& path) {
  if (store_) throw UnsupportedError(path + ": tensor parallel experts cannot be streamed (--expert-memory)");
  gate_proj_.shard(w, Shard::all_to_sharded, path + ".gate_proj");
  down_proj_.shard(w, Shard::sharded_to_all, path + ".down_proj");
  up_proj_.shard(w, Shard::all_to_sharded, path + ".up_proj");
}

mx::array SwitchGLU::apply(const mx::array& x, const mx::array& indices, const SwitchLinear& gate,
                           const SwitchLinear& up, const SwitchLinear& down) const {
  return switch_apply(x, indices, [&](const mx::array& h, const mx::array& idx, bool sorted,
                                      const std::optional<SwitchLinear::PairTokens>& pairs) {
    auto x_up = up(h, idx, sorted, pairs);
    auto x_gate = gate(h, idx, sorted, pairs);
    auto act = activation_ == SwitchActivation::swiglu_oai ? swiglu_oai(x_gate, x_up)
               : activation_ == SwitchActivation::geglu    ? geglu(x_gate, x_up)
                                                           : swiglu(x_gate, x_up);
    return down(act, idx, sorted, pairs);
  });
}

mx::array SwitchGLU::operator()(const mx::array& x, const mx::array& indices) const {
  if (!store_) return apply(x, indices, gate_proj_, up_proj_, down_proj_);
  auto sel = store_->select(block_, indices, x);
  size_t pos = 0;
  auto gate = gate_proj_.with_experts(sel.tensors, pos);
  auto up = up_proj_.with_experts(sel.tensors, pos);
  auto down = down_proj_.with_experts(sel.tensors, pos);
  return apply(x, sel.indices, gate, up, down);
}

SwitchMLP SwitchMLP::load(WeightBinder& w, const std::string& path, int input_dims, int hidden_dims,
                          int num_experts, bool bias, int top_k) {
  auto fc1 = SwitchLinear::load(w, path + ".fc1", input_dims, hidden_dims, num_experts, bias);
  auto fc2 = SwitchLinear::load(w, path + ".fc2", hidden_dims, input_dims, num_experts, bias);
  SwitchMLP out(std::move(fc1), std::move(fc2));
  if (auto* streaming = w.expert_streaming()) {
    out.store_ = streaming->store();
    out.block_ = register_streamed(w, {&out.fc1_, &out.fc2_}, num_experts, top_k);
  }
  return out;
}

mx::array SwitchMLP::apply(const mx::array& x, const mx::array& indices, const SwitchLinear& fc1,
                           const SwitchLinear& fc2) const {
  return switch_apply(x, indices, [&](const mx::array& h, const mx::array& idx, bool sorted,
                                      const std::optional<SwitchLinear::PairTokens>& pairs) {
    return fc2(gelu_approx(fc1(h, idx, sorted, pairs)), idx, sorted, pairs);
  });
}

mx::array SwitchMLP::operator()(const mx::array& x, const mx::array& indices) const {
  if (!store_) return apply(x, indices, fc1_, fc2_);
  auto sel = store_->select(block_, indices, x);
  size_t pos = 0;
  auto fc1 = fc1_.with_experts(sel.tensors, pos);
  auto fc2 = fc2_.with_experts(sel.tensors, pos);
  return apply(x, sel.indices, fc1, fc2);
}

}  // namespace mlxrt::model::nn
