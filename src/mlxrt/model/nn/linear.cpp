// Port of mlx/nn/layers/linear.py, embedding.py and quantized.py (mlx 0.32.4).
#include "mlxrt/model/nn/linear.h"

#include <algorithm>
#include <stdexcept>

#include <mlx/distributed/ops.h>
#include <mlx/linalg.h>
#include <mlx/ops.h>

#include "mlxrt/kernels/cpu/l3_matmul.h"
#include "mlxrt/kernels/cuda/affine_mma.h"
#include "mlxrt/kernels/cuda/affine_qmv.h"
#include "mlxrt/kernels/cuda/dequantized_gemm.h"
#include "mlxrt/kernels/cuda/folded_rows.h"
#include "mlxrt/kernels/cuda/fp4_qmv.h"
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
  Quantized q{w.take(path + ".scales", {out_dims, in_dims / spec->group_size}), std::nullopt, *spec, w.cpu_kernels(), std::nullopt};
  if (spec->mode == "affine") q.biases = w.take(path + ".biases", {out_dims, in_dims / spec->group_size});
  q.gpu_l3 = w.gpu_l3();
  q.pack_l3(w, weight);
  return q;
}

void Quantized::pack_l3(WeightBinder& w, const mx::array& weight) {
  l3 = kernels::cpu::l3_pack(cpu, weight, scales, biases, spec.group_size, spec.bits, spec.mode);
  if (!l3) return;
  w.derive(*l3);
  l3_n = weight.shape(-2);
  l3_k = weight.shape(-1) * 32 / spec.bits;
}

mx::array Quantized::matmul(const mx::array& x, const mx::array& weight) const {
  // A prefill's many rows: the matrix dequantized, then a dense matmul (from
  // dequantized_gemm_min_rows() rows).
  if (gpu_l3 && spec.mode == "affine" &&
      kernels::cuda::dequantized_gemm_wanted(x, biases, kernels::cuda::dequantized_gemm_min_rows()))
    return kernels::cuda::dequantized_gemm(x, weight, scales, *biases, spec.group_size, spec.bits);
  // A batched decoding step's rows (2 or more) and a short prompt's: the tensor cores.
  if (gpu_l3 && spec.mode == "affine" && kernels::cuda::affine_mma_preferred(x, weight) &&
      kernels::cuda::affine_mma_applies(x, weight, scales, biases, spec.group_size, spec.bits))
    return kernels::cuda::affine_mma(x, weight, scales, *biases, spec.group_size, spec.bits);
  if (gpu_l3 && spec.mode == "affine" &&
      kernels::cuda::affine_qmv_applies(x, weight, scales, biases, spec.group_size, spec.bits) &&
      kernels::cuda::affine_qmv_preferred(x, weight, spec.bits))
    return kernels::cuda::affine_qmv(x, weight, scales, *biases, spec.group_size, spec.bits);
  // Where the tensor cores do not serve (8-bit, float32 x, MLXRT_CUDA_L3_MMA_ROWS) and MLX would run
  // the rows one by one: the same product in chunks of 8 rows, one launch. Where MLX runs them as
  // one problem (folded_rows.h) its GEMM is the faster.
  if (gpu_l3 && spec.mode == "affine" && !kernels::cuda::quantized_rows_as_one_problem(x, spec.mode) &&
      kernels::cuda::affine_qmv_chunks_applies(x, weight, scales, biases, spec.group_size, spec.bits) &&
      kernels::cuda::affine_qmv_chunks_preferred(x, weight, spec.bits))
    return kernels::cuda::affine_qmv_chunks(x, weight, scales, *biases, spec.group_size, spec.bits);
  // The 4-bit float modes' few-row products (opt-in: fp4_qmv.h says why).
  if (gpu_l3 && (spec.mode == "mxfp4" || spec.mode == "nvfp4") && kernels::cuda::fp4_qmv_preferred(x, weight) &&
      kernels::cuda::fp4_qmv_applies(x, weight, scales, spec.group_size, spec.bits, spec.mode))
    return kernels::cuda::fp4_qmv(x, weight, scales, spec.group_size, spec.mode);
  const auto t = x.dtype();
  if (l3 && (t == mx::float32 || t == mx::bfloat16 || t == mx::float16) && mx::default_device() == mx::Device::cpu) {
    // mx::quantized_matmul's result type: x, scales and biases promoted together.
    auto dtype = mx::promote_types(t, scales.dtype());
    if (biases) dtype = mx::promote_types(dtype, biases->dtype());
    return kernels::cpu::l3_quantized_matmul(cpu, x, *l3, l3_n, l3_k, spec.group_size, spec.bits, dtype);
  }
  if (weight.size() == 0)
    throw UnsupportedError("a layer loaded at --fidelity l3 keeps only its packed weights, for float inputs on the CPU");
  // A batched step's [B, 1, K] as one [B, K] problem on CUDA: the same bytes, w read once (folded_rows.h).
  if (kernels::cuda::quantized_rows_fold_exactly(x, spec.mode)) {
    auto shape = x.shape();
    auto y = kernels::cpu::quantized_matmul(cpu, kernels::cuda::fold_rows(x), weight, scales, biases, spec.group_size,
                                            spec.bits, spec.mode);
    shape.back() = y.shape(-1);
    return mx::reshape(y, shape);
  }
  return kernels::cpu::quantized_matmul(cpu, x, weight, scales, biases, spec.group_size, spec.bits, spec.mode);
}

// At L3 on a CUDA GPU with the dense kernels opted in (`gpu_l3`), a decoding step's few rows of
// x @ w.T on our matrix-vector kernel; nullopt where MLX's matmul runs it.
static std::optional<mx::array> l3_dense_product(bool gpu_l3, const mx::array& x, const mx::array& w) {
  if (!gpu_l3 || !kernels::cuda::dense_mv_applies(x, w) || !kernels::cuda::dense_mv_preferred(x, w))
    return std::nullopt;
  return kernels::cuda::dense_mv(x, w);
}

std::shared_ptr<const SlotDeltas> take_slot_deltas(
    const WeightBinder& w, const std::function<std::shared_ptr<const LoraDelta>(Adapter&)>& take) {
  const AdapterSlots* slots = w.adapter_slots();
  if (!slots) return nullptr;
  auto out = std::make_shared<SlotDeltas>();
  out->rows = slots->rows;
  bool any = false;
  for (const auto& adapter : slots->adapters) {
    out->deltas.push_back(adapter ? take(*adapter) : nullptr);
    any = any || out->deltas.back();
  }
  return any ? out : nullptr;
}

Linear Linear::load(WeightBinder& w, const std::string& path, int in_dims, int out_dims, bool bias) {
  mx::array weight = mx::array(0.0f);
  auto q = load_quantized(w, path, in_dims, out_dims, weight);
  std::optional<mx::array> b;
  if (bias) b = w.take(path + ".bias", {out_dims});
  Linear linear(std::move(weight), std::move(b), std::move(q));
  linear.cpu_ = w.cpu_kernels();
  linear.gpu_l3_layer_ = !linear.q_ && w.gpu_l3();
  linear.gpu_l3_ = linear.gpu_l3_layer_ && kernels::cuda::dense_l3_opted_in();
  if (w.row_exact()) linear.rows_per_call_ = row_invariant_rows(linear.weight_, linear.q_);
  // The adapter's delta of this layer (LoRALinear / DoRALinear). DoRALinear.set_linear: m =
  // |W.astype(float32)| per output row, when the adapter lacks it.
  auto take = [&](Adapter& adapter) {
    return adapter.take(path, in_dims, out_dims, out_dims, [&linear] {
      return mx::linalg::norm(mx::astype(linear.dequantized_weight(), mx::float32), std::vector<int>{1}, false);
    });
  };
  if (auto* adapter = w.adapter()) linear.lora_ = take(*adapter);
  linear.slots_ = take_slot_deltas(w, take);
  w.note_quantizable({path, QuantizableModule::Kind::linear, linear.q_ ? std::optional(linear.q_->spec) : std::nullopt,
                      linear.lora_});
  // At L3 the packed copy is the one the layer computes with: the unpacked weight goes once the
  // packing has read it, so the model is held once, not twice (an adapted layer keeps it: DoRA
  // and the mixed-adapter rows read it).
  if (linear.q_ && linear.q_->l3 && !linear.lora_ && !linear.slots_) linear.weight_ = mx::zeros({0}, mx::uint32);
  linear.keep_transposed(w);
  return linear;
}

void Linear::keep_transposed(WeightBinder& w) {
  const auto previous = weight_t_;
  weight_t_ = q_ ? std::nullopt : std::optional<mx::array>(mx::transpose(weight_));
  if (!weight_t_) return;
  if (previous)
    w.rederive(*previous, *weight_t_);  // after sharding: the whole tensor's transpose is not evaluated
  else
    w.derive(*weight_t_);
}

void Linear::keep_shard(WeightBinder& w, const std::string& path, Shard shard, const std::vector<int>& segments) {
  if (!w.tensor_group()) throw std::logic_error("a sharded Linear without a tensor group: " + path);
  if (w.adapter())
    throw UnsupportedError("adapters are not supported in distributed mode (as in mlx-lm): " + path);
  // _all_to_sharded splits every parameter along axis max(ndim - 2, 0) (rows), a bias along -1;
  // _sharded_to_all splits along -1 (columns) and keeps the bias whole. Segments cut every
  // parameter at the same indices.
  const int axis = shard == Shard::all_to_sharded ? 0 : -1;
  auto cut = [&](const mx::array& t, const std::string& name, int ax) {
    if (segments.empty()) return w.keep_shard(path + "." + name, t, ax);
    const auto* group = w.tensor_group();
    auto kept = shard_tensor(t, ax, segments, group->rank(), group->size(), path + "." + name);
    w.retake(t, kept);
    return kept;
  };
  weight_ = cut(weight_, "weight", axis);
  if (q_) {
    q_->scales = cut(q_->scales, "scales", axis);
    if (q_->biases) q_->biases = cut(*q_->biases, "biases", axis);
  }
  if (bias_ && shard == Shard::all_to_sharded) bias_ = cut(*bias_, "bias", -1);
  keep_transposed(w);
}

Linear Linear::load(WeightBinder& w, const std::string& path, int in_dims, int out_dims, bool bias, Shard shard) {
  if (shard == Shard::none) return load(w, path, in_dims, out_dims, bias);
  Linear linear = load(w, path, in_dims, out_dims, bias);
  linear.keep_shard(w, path, shard, {});
  if (shard == Shard::sharded_to_all) linear.sum_over_ = *w.tensor_group();
  // (Quantized)AllToShardedLinear / ShardedToAllLinear.__init__: mx.random.uniform for the weight,
  // and for a bias unless quantized (whose bias starts as zeros).
  w.count_shard_draws(1 + (linear.bias_ && !linear.q_ ? 1 : 0));
  return linear;
}

Linear Linear::load_sharded_inplace(WeightBinder& w, const std::string& path, int in_dims, int out_dims, bool bias,
                                    Shard shard, const std::vector<int>& segments) {
  if (shard == Shard::none) return load(w, path, in_dims, out_dims, bias);
  Linear linear = load(w, path, in_dims, out_dims, bias);
  linear.keep_shard(w, path, shard, segments);
  return linear;
}

std::optional<kernels::cpu::L3Matrix> Linear::l3_matrix() const {
  if (!q_ || !q_->l3 || bias_ || lora_ || slots_ || sum_over_ || rows_per_call_ > 0) return std::nullopt;
  auto params = q_->scales.dtype();
  if (q_->biases) params = mx::promote_types(params, q_->biases->dtype());
  return kernels::cpu::L3Matrix{*q_->l3, q_->l3_n, q_->l3_k, q_->spec.group_size, q_->spec.bits, params};
}

std::optional<kernels::cuda::QmvMatrix> Linear::cuda_l3_matrix() const {
  if (bias_ || lora_ || slots_ || sum_over_ || rows_per_call_ > 0) return std::nullopt;
  if (!q_) return gpu_l3_ ? std::optional(kernels::cuda::QmvMatrix::dense(weight_)) : std::nullopt;
  if (!q_->gpu_l3 || q_->spec.mode != "affine" || !q_->biases) return std::nullopt;
  return kernels::cuda::QmvMatrix{weight_, q_->scales, *q_->biases, q_->spec.group_size, q_->spec.bits};
}

std::optional<kernels::cuda::QmvMatrix> Linear::cuda_layer_matrix() const {
  if (!q_ && gpu_l3_layer_ && !bias_ && !lora_ && !slots_ && !sum_over_ && rows_per_call_ == 0)
    return kernels::cuda::QmvMatrix::dense(weight_);
  return cuda_l3_matrix();
}

mx::array Linear::dequantized_weight() const {
  if (!q_) return weight_;
  return mx::dequantize(weight_, q_->scales, q_->biases, q_->spec.group_size, q_->spec.bits, q_->spec.mode);
}

int row_invariant_rows(const mx::array& weight, const std::optional<Quantized>& q) {
  if (mx::default_device() == mx::Device::cpu) {
    if (q) return q->spec.mode == "affine" && !q->l3 ? 0 : 1;
    return weight.dtype() == mx::bfloat16 || weight.dtype() == mx::float16 ? 0 : 1;
  }
  // MLX's CUDA QuantizedMatmul::eval_gpu: qmv while M * B < 8 on the sm80 / naive GEMM paths (and
  // for every M where neither applies); the sm_90 GEMM, taken when group_size >= K, leaves qmv to
  // one row alone. Modes other than affine are not checked here: one row per call.
  if (!q || q->spec.mode != "affine") return 1;
  const int in_dims = weight.shape(-1) * 32 / q->spec.bits;
  if (q->spec.group_size >= in_dims || in_dims % 8 != 0) return 1;
  return 7;
}

std::optional<mx::array> each_row(const mx::array& x, const std::function<mx::array(const mx::array&)>& f,
                                  int per_call) {
  const int dims = x.shape(-1);
  const int rows = dims == 0 ? 0 : static_cast<int>(x.size() / static_cast<size_t>(dims));
  per_call = std::max(per_call, 1);
  if (rows <= per_call) return std::nullopt;
  // A decoding step's input is [1, 1, D]: one row goes in that shape, several as [1, m, D].
  auto flat = mx::reshape(x, {rows, dims});
  std::vector<mx::array> outs;
  outs.reserve(static_cast<size_t>((rows + per_call - 1) / per_call));
  for (int r = 0; r < rows; r += per_call) {
    const int m = std::min(per_call, rows - r);
    auto y = f(mx::reshape(mx::slice(flat, {r, 0}, {r + m, dims}), {1, m, dims}));
    outs.push_back(mx::reshape(y, {m, y.shape(-1)}));
  }
  auto y = mx::concatenate(outs, 0);
  auto shape = x.shape();
  shape.back() = y.shape(-1);
  return mx::reshape(y, shape);
}

mx::array Linear::operator()(const mx::array& x) const {
  if (rows_per_call_ > 0)
    if (auto y = each_row(x, [this](const mx::array& rows) { return forward(rows); }, rows_per_call_)) return *y;
  return forward(x);
}

mx::array Linear::forward(const mx::array& x) const {
  if (slots_) {
    // The base output once, shared by every LoRA slot (LoRALinear adds its delta to it).
    auto y = base(x);
    return slots_->rows->select(y, [&](int slot) -> std::optional<mx::array> {
      const auto& d = slots_->deltas[static_cast<size_t>(slot)];
      if (!d) return std::nullopt;
      return lora_linear(*d, x, [&y](const mx::array&) { return y; }, [this] { return dequantized_weight(); }, bias_);
    });
  }
  if (lora_)
    return lora_linear(*lora_, x, [this](const mx::array& v) { return base(v); },
                       [this] { return dequantized_weight(); }, bias_);
  return base(x);
}

mx::array Linear::base(const mx::array& x) const {
  if (sum_over_) {
    // ShardedToAllLinear: x @ W.T (or the quantized matmul), all_sum, then `+ bias` (not addmm).
    auto y = q_ ? q_->matmul(x, weight_) : kernels::cpu::matmul_transposed(cpu_, x, weight_, std::nullopt, weight_t_);
    y = mx::distributed::all_sum(y, *sum_over_);
    return bias_ ? mx::add(y, *bias_) : y;
  }
  if (q_) {
    auto y = q_->matmul(x, weight_);
    return bias_ ? mx::add(y, *bias_) : y;
  }
  if (!bias_)
    if (auto y = l3_dense_product(gpu_l3_, x, weight_)) return *y;
  // mlx.nn.Linear: addmm with a bias, else x @ W.T.
  return kernels::cpu::matmul_transposed(cpu_, x, weight_, bias_, weight_t_);
}

Embedding Embedding::load(WeightBinder& w, const std::string& path, int num_embeddings, int dims) {
  mx::array weight = mx::array(0.0f);
  auto q = load_quantized(w, path, dims, num_embeddings, weight);
  Embedding embedding(std::move(weight), std::move(q));
  if (embedding.weight_t_) w.derive(*embedding.weight_t_);  // see Linear::keep_transposed
  embedding.cpu_ = w.cpu_kernels();
  embedding.gpu_l3_ = !embedding.q_ && w.gpu_l3() && kernels::cuda::dense_l3_opted_in();
  if (w.row_exact()) embedding.rows_per_call_ = row_invariant_rows(embedding.weight_, embedding.q_);
  // The adapter's delta of this embedding (LoRAEmbedding / DoRAEmbedding). DoRAEmbedding.set_embedding:
  // m = |weight| per row, when the adapter lacks it.
  auto take = [&](Adapter& adapter) {
    if (embedding.q_ && adapter.config().fine_tune_type == "dora" &&
        (adapter.tensors().count(path + ".lora_a") || adapter.tensors().count(path + ".lora_b")))
      throw UnsupportedError(adapter.weights_file().string() + ": a DoRA adapter of the quantized embedding " + path +
                             " (DoRAEmbedding does not support quantization in mlx-lm either)");
    return adapter.take(path, num_embeddings, dims, num_embeddings, [&embedding] {
      return mx::linalg::norm(embedding.weight_, std::vector<int>{1}, false);
    });
  };
  if (auto* adapter = w.adapter()) embedding.lora_ = take(*adapter);
  embedding.slots_ = take_slot_deltas(w, take);
  w.note_quantizable({path, QuantizableModule::Kind::embedding,
                      embedding.q_ ? std::optional(embedding.q_->spec) : std::nullopt, embedding.lora_});
  return embedding;
}

mx::array Embedding::operator()(const mx::array& ids) const {
  if (slots_) {
    auto rows = base(ids);
    return slots_->rows->select(rows, [&](int slot) -> std::optional<mx::array> {
      const auto& d = slots_->deltas[static_cast<size_t>(slot)];
      if (!d) return std::nullopt;
      return lora_embedding(*d, ids, rows);
    });
  }
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
  if (rows_per_call_ > 0)
    if (auto y = each_row(x, [this](const mx::array& rows) { return as_linear_rows(rows); }, rows_per_call_)) return *y;
  return as_linear_rows(x);
}

mx::array Embedding::as_linear_rows(const mx::array& x) const {
  if (slots_) {
    auto y = base_as_linear(x);
    return slots_->rows->select(y, [&](int slot) -> std::optional<mx::array> {
      const auto& d = slots_->deltas[static_cast<size_t>(slot)];
      if (!d) return std::nullopt;
      return lora_embedding_as_linear(*d, x, y, [this] { return weight_; });
    });
  }
  if (lora_) return lora_embedding_as_linear(*lora_, x, base_as_linear(x), [this] { return weight_; });
  return base_as_linear(x);
}

mx::array Embedding::base_as_linear(const mx::array& x) const {
  if (q_) return q_->matmul(x, weight_);
  if (auto y = l3_dense_product(gpu_l3_, x, weight_)) return *y;
  return kernels::cpu::matmul_transposed(cpu_, x, weight_, std::nullopt, weight_t_);
}

}  // namespace mlxrt::model::nn
