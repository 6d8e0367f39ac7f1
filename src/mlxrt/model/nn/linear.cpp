// Port of mlx/nn/layers/linear.py, embedding.py and quantized.py (mlx 0.32.4).
#include "mlxrt/model/nn/linear.h"

#include <mlx/linalg.h>
#include <mlx/ops.h>

#include "mlxrt/util/errors.h"

namespace mlxrt::model::nn {

std::optional<Quantized> load_quantized(WeightBinder& w, const std::string& path, int in_dims,
                                        int out_dims, mx::array& weight) {
  auto spec = w.config().quantization().for_module(path, in_dims, w.saved_quant(path));
  if (!spec) {
    weight = w.take(path + ".weight", {out_dims, in_dims});
    return std::nullopt;
  }
  // mx.quantize packs `bits`-bit values into uint32 words; scales/biases hold one per group.
  weight = w.take(path + ".weight", {out_dims, in_dims * spec->bits / 32});
  Quantized q{w.take(path + ".scales", {out_dims, in_dims / spec->group_size}), std::nullopt, *spec};
  if (spec->mode == "affine") q.biases = w.take(path + ".biases", {out_dims, in_dims / spec->group_size});
  return q;
}

Linear Linear::load(WeightBinder& w, const std::string& path, int in_dims, int out_dims, bool bias) {
  mx::array weight = mx::array(0.0f);
  auto q = load_quantized(w, path, in_dims, out_dims, weight);
  std::optional<mx::array> b;
  if (bias) b = w.take(path + ".bias", {out_dims});
  Linear linear(std::move(weight), std::move(b), std::move(q));
  if (auto* adapter = w.adapter()) {
    // DoRALinear.set_linear: m = |W.astype(float32)| per output row, when the adapter lacks it.
    linear.lora_ = adapter->take(path, in_dims, out_dims, out_dims, [&linear] {
      return mx::linalg::norm(mx::astype(linear.dequantized_weight(), mx::float32), std::vector<int>{1}, false);
    });
  }
  w.note_quantizable({path, QuantizableModule::Kind::linear, linear.q_ ? std::optional(linear.q_->spec) : std::nullopt,
                      linear.lora_});
  return linear;
}

mx::array Linear::dequantized_weight() const {
  if (!q_) return weight_;
  return mx::dequantize(weight_, q_->scales, q_->biases, q_->spec.group_size, q_->spec.bits, q_->spec.mode);
}

mx::array Linear::operator()(const mx::array& x) const {
  if (lora_)
    return lora_linear(*lora_, x, [this](const mx::array& v) { return base(v); },
                       [this] { return dequantized_weight(); }, bias_);
  return base(x);
}

mx::array Linear::base(const mx::array& x) const {
  if (q_) {
    auto y = mx::quantized_matmul(x, weight_, q_->scales, q_->biases, true, q_->spec.group_size,
                                  q_->spec.bits, q_->spec.mode);
    return bias_ ? mx::add(y, *bias_) : y;
  }
  if (bias_) return mx::addmm(*bias_, x, mx::transpose(weight_));
  return mx::matmul(x, mx::transpose(weight_));
}

Embedding Embedding::load(WeightBinder& w, const std::string& path, int num_embeddings, int dims) {
  mx::array weight = mx::array(0.0f);
  auto q = load_quantized(w, path, dims, num_embeddings, weight);
  Embedding embedding(std::move(weight), std::move(q));
  if (auto* adapter = w.adapter()) {
    if (embedding.q_ && adapter->config().fine_tune_type == "dora" &&
        (adapter->tensors().count(path + ".lora_a") || adapter->tensors().count(path + ".lora_b")))
      throw UnsupportedError(adapter->weights_file().string() + ": a DoRA adapter of the quantized embedding " + path +
                             " (DoRAEmbedding does not support quantization in mlx-lm either)");
    // DoRAEmbedding.set_embedding: m = |weight| per row, when the adapter lacks it.
    embedding.lora_ = adapter->take(path, num_embeddings, dims, num_embeddings, [&embedding] {
      return mx::linalg::norm(embedding.weight_, std::vector<int>{1}, false);
    });
  }
  w.note_quantizable({path, QuantizableModule::Kind::embedding,
                      embedding.q_ ? std::optional(embedding.q_->spec) : std::nullopt, embedding.lora_});
  return embedding;
}

mx::array Embedding::operator()(const mx::array& ids) const {
  if (lora_) return lora_embedding(*lora_, ids, base(ids));
  return base(ids);
}

mx::array Embedding::base(const mx::array& ids) const {
  if (!q_) return mx::take(weight_, ids, 0);
  std::optional<mx::array> biases;
  if (q_->biases) biases = mx::take(*q_->biases, ids, 0);
  return mx::dequantize(mx::take(weight_, ids, 0), mx::take(q_->scales, ids, 0), biases,
                        q_->spec.group_size, q_->spec.bits, q_->spec.mode);
}

mx::array Embedding::as_linear(const mx::array& x) const {
  if (lora_) return lora_embedding_as_linear(*lora_, x, base_as_linear(x), [this] { return weight_; });
  return base_as_linear(x);
}

mx::array Embedding::base_as_linear(const mx::array& x) const {
  if (!q_) return mx::matmul(x, mx::transpose(weight_));
  return mx::quantized_matmul(x, weight_, q_->scales, q_->biases, true, q_->spec.group_size,
                              q_->spec.bits, q_->spec.mode);
}

}  // namespace mlxrt::model::nn
