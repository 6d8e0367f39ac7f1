// Port of the Attention / MLP / TransformerBlock / Model skeleton shared by mlx_lm/models/llama.py,
// qwen2.py, qwen3.py and phi3.py (mlx-lm 0.32.2), and of mlx.nn.LayerNorm (mlx 0.32.4).
#include "mlxrt/model/nn/decoder.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <mlx/distributed/ops.h>
#include <mlx/fast.h>
#include <mlx/ops.h>

#include "mlxrt/cache/batch_cache.h"
#include "mlxrt/cache/batch_kv_cache.h"
#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/cache/rotating_kv_cache.h"
#include "mlxrt/model/nn/activations.h"
#include "mlxrt/kernels/cpu/l3_block.h"
#include "mlxrt/kernels/cpu/l3_fused.h"
#include "mlxrt/kernels/cuda/cached_kernel.h"
#include "mlxrt/kernels/cuda/decoder_layer.h"
#include "mlxrt/kernels/cuda/qk_rope.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::model::nn {

Norm Norm::load(WeightBinder& w, const std::string& path, int dims, float eps, Kind kind) {
  auto weight = w.take(path + ".weight", {dims});
  std::optional<mx::array> bias;
  if (kind == Kind::layer) bias = w.take(path + ".bias", {dims});
  Norm norm(kind, std::move(weight), std::move(bias), eps);
  norm.cpu_ = w.cpu_kernels();
  return norm;
}

mx::array Norm::operator()(const mx::array& x) const {
  if (kind_ == Kind::rms) return kernels::cpu::rms_norm(cpu_, x, weight_, eps_);
  return mx::fast::layer_norm(x, weight_, bias_, eps_);
}

float default_scale(int head_dim) { return static_cast<float>(std::pow(static_cast<double>(head_dim), -0.5)); }

namespace {

std::optional<Norm> load_qk_norm(const AttentionOptions& o, WeightBinder& w, const std::string& path, int heads) {
  switch (o.qk_norm) {
    case QkNorm::none:
      return std::nullopt;
    case QkNorm::per_head:
      return Norm::load(w, path, o.head_dim, o.qk_norm_eps, o.qk_norm_kind);
    case QkNorm::projection:
      return Norm::load(w, path, heads * o.head_dim, o.qk_norm_eps, o.qk_norm_kind);
    case QkNorm::custom:
      return std::nullopt;
  }
  return std::nullopt;
}

// [B, L, heads * D] -> [B, heads, L, D]
mx::array split_heads(const mx::array& x, int B, int L, int heads) {
  return mx::transpose(mx::reshape(x, {B, L, heads, -1}), {0, 2, 1, 3});
}

Shard attention_shard(const AttentionOptions& o, Shard shard) {
  if (!o.sharded) return Shard::none;
  if (o.fused_qkv || o.qk_norm == QkNorm::projection || o.qk_norm == QkNorm::custom)
    throw std::logic_error("tensor parallel attention supports separate q/k/v projections and per-head norms only");
  return shard;
}

}  // namespace

Attention::Attention(const AttentionOptions& options, WeightBinder& w, const std::string& path)
    : o_(options),
      q_proj_(o_.fused_qkv ? std::nullopt
                           : std::optional(Linear::load(w, path + "." + o_.q_proj, o_.hidden_size,
                                                        o_.n_heads * o_.head_dim, o_.qkv_bias,
                                                        attention_shard(o_, Shard::all_to_sharded)))),
      k_proj_(o_.fused_qkv ? std::nullopt
                           : std::optional(Linear::load(w, path + "." + o_.k_proj, o_.hidden_size,
                                                        o_.n_kv_heads * o_.head_dim, o_.qkv_bias,
                                                        attention_shard(o_, Shard::all_to_sharded)))),
      v_proj_(o_.fused_qkv ? std::nullopt
                           : std::optional(Linear::load(w, path + "." + o_.v_proj, o_.hidden_size,
                                                        o_.n_kv_heads * o_.head_dim, o_.qkv_bias,
                                                        attention_shard(o_, Shard::all_to_sharded)))),
      qkv_proj_(!o_.fused_qkv ? std::nullopt
                              : std::optional(Linear::load(w, path + "." + o_.qkv_proj, o_.hidden_size,
                                                           (o_.n_heads + 2 * o_.n_kv_heads) * o_.head_dim,
                                                           o_.qkv_bias))),
      o_proj_(Linear::load(w, path + "." + o_.o_proj, o_.n_heads * o_.head_dim, o_.hidden_size, o_.o_bias,
                           attention_shard(o_, Shard::sharded_to_all))),
      q_norm_(load_qk_norm(o_, w, path + "." + o_.q_norm, o_.n_heads)),
      k_norm_(load_qk_norm(o_, w, path + "." + o_.k_norm, o_.n_kv_heads)) {
  if (o_.rope) o_.rope->set_cpu_kernels(w.cpu_kernels());  // the fused L3 RoPE at --fidelity l3
  cpu_ = w.cpu_kernels();
  gpu_l3_ = w.gpu_l3();
  per_query_row_ = w.row_exact();
  // shard(): n_heads //= N, n_kv_heads //= N (shard_like_llama checked that N divides them).
  if (o_.sharded) {
    const int n = w.tensor_group()->size();
    o_.n_heads /= n;
    o_.n_kv_heads /= n;
  }
}

Attention::Heads Attention::project(const mx::array& x) const {
  const int B = x.shape(0), L = x.shape(1);
  mx::array queries = mx::array(0.0f), keys = queries, values = queries;
  if (qkv_proj_) {
    auto qkv = (*qkv_proj_)(x);
    const int query_pos = o_.n_heads * o_.head_dim;
    auto parts = mx::split(qkv, mx::Shape{query_pos, query_pos + o_.n_kv_heads * o_.head_dim}, -1);
    queries = parts[0], keys = parts[1], values = parts[2];
  } else {
    // The three matmuls of one input: flattened once here, not in each (Linear::flattens_rows).
    const bool flat = x.ndim() == 3 && q_proj_->flattens_rows() && k_proj_->flattens_rows() && v_proj_->flattens_rows();
    const auto in = flat ? mx::flatten(x, 0, 1) : x;
    queries = (*q_proj_)(in), keys = (*k_proj_)(in), values = (*v_proj_)(in);
  }
  return split_projected(queries, keys, values, B, L);
}

Attention::Heads Attention::split_projected(mx::array queries, mx::array keys, const mx::array& values, int B,
                                            int L) const {
  if (o_.qk_norm == QkNorm::projection) {
    queries = (*q_norm_)(queries);
    keys = (*k_norm_)(keys);
  }
  if (o_.qk_norm == QkNorm::per_head && !o_.qk_norm_after_rope) {
    queries = mx::transpose((*q_norm_)(mx::reshape(queries, {B, L, o_.n_heads, -1})), {0, 2, 1, 3});
    keys = mx::transpose((*k_norm_)(mx::reshape(keys, {B, L, o_.n_kv_heads, -1})), {0, 2, 1, 3});
  } else if (o_.qk_norm == QkNorm::custom) {
    queries = mx::transpose(o_.custom_q_norm(mx::reshape(queries, {B, L, o_.n_heads, -1})), {0, 2, 1, 3});
    keys = mx::transpose(o_.custom_k_norm(mx::reshape(keys, {B, L, o_.n_kv_heads, -1})), {0, 2, 1, 3});
  } else {
    queries = split_heads(queries, B, L, o_.n_heads);
    keys = split_heads(keys, B, L, o_.n_kv_heads);
  }
  return {queries, keys, split_heads(values, B, L, o_.n_kv_heads)};
}

cache::CachedKV Attention::position_and_cache(mx::array& queries, const mx::array& keys, const mx::array& values,
                                              cache::Cache* cache) const {
  if (o_.rope) return rope_and_update_cache(*o_.rope, queries, keys, values, cache);
  if (!cache) return cache::PlainKV{keys, values};
  return cache->update_and_fetch(keys, values);
}

mx::array Attention::sdpa(const mx::array& queries, const cache::CachedKV& kv, const AttentionMask& mask) const {
  // Row-exact: a many-query call does not give a row the bytes of a one-query call (the softmax and
  // the product with the values run over the masked length), so each query runs alone.
  if (per_query_row_ && queries.shape(2) > 1)
    return attend_each_query(queries, kv, mask, [this](const mx::array& q, const cache::CachedKV& prefix) {
      return sdpa(q, prefix, AttentionMask{});
    });
  // At --fidelity l3 on the CPU: one fused node over plain keys and values, causal or unmasked.
  const auto* plain_kv = std::get_if<cache::PlainKV>(&kv);
  if (cpu_ && cpu_->l3() && o_.sdpa_cast == SdpaCast::none && plain_kv && mask.kind != AttentionMask::Kind::array)
    if (auto fused = kernels::cpu::attention(cpu_, queries, plain_kv->keys, plain_kv->values, o_.scale,
                                             mask.kind == AttentionMask::Kind::causal))
      return *fused;
  if (o_.sdpa_cast == SdpaCast::none) return scaled_dot_product_attention(queries, kv, o_.scale, mask);
  if (o_.sdpa_cast == SdpaCast::float16_queries_f32) {
    const auto dtype = queries.dtype() == mx::float16 ? mx::float32 : queries.dtype();
    return mx::astype(scaled_dot_product_attention(mx::astype(queries, dtype), kv, o_.scale, mask), queries.dtype());
  }
  // phi.py and stablelm.py read values.dtype, which a quantized cache's tuple does not have.
  const auto* plain = std::get_if<cache::PlainKV>(&kv);
  if (!plain)
    throw UnsupportedError("this model's attention upcasts its inputs (as mlx-lm's does), which a quantized KV "
                           "cache does not support there");
  cache::PlainKV in = *plain;
  if (o_.sdpa_cast == SdpaCast::queries_keys_f32) in.keys = mx::astype(in.keys, mx::float32);
  auto out = scaled_dot_product_attention(mx::astype(queries, mx::float32), in, o_.scale, mask);
  return mx::astype(out, plain->values.dtype());
}

mx::array Attention::attend(const mx::array& queries, const cache::CachedKV& kv, const AttentionMask& mask) const {
  const int B = queries.shape(0), L = queries.shape(2);
  auto output = sdpa(queries, kv, mask);
  auto merged = mx::transpose(output, {0, 2, 1, 3});
  // The heads merged straight into the matmul's rows (Linear::flattens_rows), the result to [B, L, D].
  if (o_proj_.flattens_rows()) {
    auto y = o_proj_(mx::reshape(merged, {B * L, -1}));
    return mx::reshape(y, {B, L, y.shape(-1)});
  }
  return o_proj_(mx::reshape(merged, {B, L, -1}));
}

mx::array Attention::operator()(const mx::array& x, const AttentionMask& mask, cache::Cache* cache) const {
  auto heads = project(x);
  // Only the paths that read one position offset ask the cache for it (a batched cache has one per row).
  const int offset = cache && (o_.qk_norm_after_rope || o_.scale_queries) ? cache->offset() : 0;
  if (o_.qk_norm_after_rope) {
    auto queries = o_.rope ? (*o_.rope)(heads.queries, offset) : heads.queries;
    auto keys = o_.rope ? (*o_.rope)(heads.keys, offset) : heads.keys;
    queries = (*q_norm_)(queries);
    keys = (*k_norm_)(keys);
    cache::CachedKV kv = cache ? cache->update_and_fetch(keys, heads.values) : cache::PlainKV{keys, heads.values};
    return attend(queries, kv, mask);
  }
  auto kv = position_and_cache(heads.queries, heads.keys, heads.values, cache);
  if (o_.scale_queries) heads.queries = o_.scale_queries(heads.queries, offset);
  return attend(heads.queries, kv, mask);
}

// A float32 model's keys and values kept as float16 at L3 (l3_attention_input), in the caches
// whose plain keys and values the fused attention reads; a quantized cache quantizes what it is
// given, and one made later from a float16 cache (--kv-bits) simply starts from float16.
static bool l3_half_kv_cache(const cache::Cache* cache) {
  return cache && (dynamic_cast<const cache::KVCache*>(cache) || dynamic_cast<const cache::RotatingKVCache*>(cache));
}

std::optional<mx::array> Attention::cuda_l3_residual_block(const mx::array& x, const Norm& norm,
                                                           const AttentionMask& mask, cache::Cache* cache) const {
  if (qkv_proj_ || o_.qk_norm_after_rope || per_query_row_ || o_.sharded) return std::nullopt;
  const auto rms = norm.rms();
  const auto q = q_proj_->cuda_l3_matrix(), k = k_proj_->cuda_l3_matrix(), v = v_proj_->cuda_l3_matrix();
  const auto o = o_proj_.cuda_l3_matrix();
  if (!rms || !q || !k || !v || !o) return std::nullopt;
  auto qkv = kernels::cuda::rms_norm_qkv(x, {rms->first, rms->second}, *q, *k, *v);
  if (!qkv) return std::nullopt;
  const int B = x.shape(0), L = x.shape(1);
  const int offset = cache && o_.scale_queries ? cache->offset() : 0;
  auto positioned = cuda_l3_position_and_cache((*qkv)[0], (*qkv)[1], (*qkv)[2], B, L, cache);
  if (!positioned) {
    // The rest as operator() runs it.
    auto heads = split_projected((*qkv)[0], (*qkv)[1], (*qkv)[2], B, L);
    auto kv = position_and_cache(heads.queries, heads.keys, heads.values, cache);
    positioned.emplace(heads.queries, kv);
  }
  auto& [queries, kv] = *positioned;
  if (o_.scale_queries) queries = o_.scale_queries(queries, offset);
  // Then o_proj and the residual add in one node.
  auto merged = mx::reshape(mx::transpose(sdpa(queries, kv, mask), {0, 2, 1, 3}), {B, L, -1});
  if (auto out = kernels::cuda::qmv_residual(merged, *o, x)) return *out;
  return mx::add(x, o_proj_(merged));
}

std::optional<std::pair<std::optional<kernels::cuda::RmsNormIn>, std::optional<kernels::cuda::RmsNormIn>>>
Attention::cuda_qk_norms() const {
  std::optional<kernels::cuda::RmsNormIn> q_norm, k_norm;
  if (o_.qk_norm == QkNorm::per_head) {
    const auto qn = q_norm_->rms(), kn = k_norm_->rms();
    if (!qn || !kn) return std::nullopt;
    q_norm = kernels::cuda::RmsNormIn{qn->first, qn->second};
    k_norm = kernels::cuda::RmsNormIn{kn->first, kn->second};
  } else if (o_.qk_norm != QkNorm::none) {
    return std::nullopt;
  }
  return std::pair{q_norm, k_norm};
}

std::optional<std::pair<mx::array, cache::CachedKV>> Attention::cuda_l3_position_and_cache(
    const mx::array& q, const mx::array& k, const mx::array& v, int B, int L, cache::Cache* cache) const {
  const auto norms = cuda_qk_norms();
  const auto rope = o_.rope ? o_.rope->fast_call() : std::nullopt;
  if (!norms || !rope) return std::nullopt;
  const auto& [q_norm, k_norm] = *norms;
  // The positions RoPE would be given (rope_and_update_cache): a batched cache's offset per row.
  const auto* batch = dynamic_cast<const cache::BatchCache*>(cache);
  const mx::array offset = batch ? batch->offset_array() : mx::array(cache ? cache->offset() : 0, mx::int32);
  auto heads = kernels::cuda::qk_norm_rope(q, k, o_.n_heads, o_.n_kv_heads, q_norm, k_norm,
                                           {rope->dims, rope->traditional, rope->base, rope->scale, rope->freqs},
                                           offset);
  if (!heads) return std::nullopt;
  const auto values = split_heads(v, B, L, o_.n_kv_heads);
  cache::CachedKV kv = cache ? cache->update_and_fetch(heads->second, values) : cache::PlainKV{heads->second, values};
  return std::pair{heads->first, kv};
}

std::optional<kernels::cuda::DecoderLayerAttention> Attention::cuda_layer_attention() const {
  if (!gpu_l3_ || qkv_proj_ || o_.sharded || per_query_row_ || o_.qk_norm_after_rope || o_.scale_queries ||
      o_.sdpa_cast != SdpaCast::none || !o_.rope)
    return std::nullopt;
  const auto norms = cuda_qk_norms();
  const auto rope = o_.rope->fast_call();
  const auto q = q_proj_->cuda_layer_matrix(), k = k_proj_->cuda_layer_matrix(), v = v_proj_->cuda_layer_matrix();
  const auto o = o_proj_.cuda_layer_matrix();
  if (!norms || !rope || !q || !k || !v || !o) return std::nullopt;
  const auto& [q_norm, k_norm] = *norms;
  return kernels::cuda::DecoderLayerAttention{*q,
                                              *k,
                                              *v,
                                              *o,
                                              q_norm,
                                              k_norm,
                                              {rope->dims, rope->traditional, rope->base, rope->scale, rope->freqs},
                                              o_.scale,
                                              o_.n_heads,
                                              o_.n_kv_heads};
}

std::optional<mx::array> Attention::l3_residual_block(const mx::array& x, const Norm& norm, const AttentionMask& mask,
                                                      cache::Cache* cache) const {
  if (gpu_l3_) return cuda_l3_residual_block(x, norm, mask, cache);
  const bool llama = cpu_ && cpu_->l3_blocks() && !qkv_proj_ &&
                     (o_.qk_norm == QkNorm::none || o_.qk_norm == QkNorm::per_head) && !o_.qk_norm_after_rope &&
                     !o_.scale_queries && o_.rope && o_.sdpa_cast == SdpaCast::none && !per_query_row_ &&
                     !o_.sharded && mask.kind != AttentionMask::Kind::array &&
                     !dynamic_cast<const cache::BatchCache*>(cache);
  if (!llama) return std::nullopt;
  const auto rms = norm.rms();
  const auto rope = o_.rope->fast_call();
  const auto q = q_proj_->l3_matrix(), k = k_proj_->l3_matrix(), v = v_proj_->l3_matrix(), o = o_proj_.l3_matrix();
  if (!rms || !rope || !q || !k || !v || !o) return std::nullopt;
  // qwen3's per-head q/k RMSNorms, before RoPE.
  std::optional<std::pair<kernels::cpu::L3Norm, kernels::cpu::L3Norm>> qk_norms;
  if (o_.qk_norm == QkNorm::per_head) {
    const auto qn = q_norm_->rms(), kn = k_norm_->rms();
    if (!qn || !kn) return std::nullopt;
    qk_norms = std::pair(kernels::cpu::L3Norm{qn->first, qn->second}, kernels::cpu::L3Norm{kn->first, kn->second});
  }
  auto heads = kernels::cpu::l3_attention_input(cpu_, x, rms->first, rms->second, *q, *k, *v, o_.n_heads,
                                                o_.n_kv_heads, rope->dims, rope->traditional, rope->base, rope->scale,
                                                rope->freqs, cache ? cache->offset() : 0, qk_norms,
                                                l3_half_kv_cache(cache));
  if (!heads) return std::nullopt;
  const auto& queries = (*heads)[0];
  cache::CachedKV kv = cache ? cache->update_and_fetch((*heads)[1], (*heads)[2]) : cache::PlainKV{(*heads)[1], (*heads)[2]};
  if (const auto* plain = std::get_if<cache::PlainKV>(&kv))
    if (auto out = kernels::cpu::l3_attention_output(cpu_, x, queries, plain->keys, plain->values, o_.scale,
                                                     mask.kind == AttentionMask::Kind::causal, *o))
      return *out;
  return mx::add(x, attend(queries, kv, mask));
}

Mlp::Mlp(const MlpOptions& options, WeightBinder& w, const std::string& path) : o_(options) {
  using Kind = MlpOptions::Kind;
  if (o_.kind == Kind::custom) {
    if (!o_.custom) throw std::logic_error("MlpOptions::Kind::custom without a custom feed-forward");
    custom_ = o_.custom(w, path);
    return;
  }
  if (o_.sharded && o_.kind != Kind::swiglu)
    throw std::logic_error("tensor parallel MLP supports the SwiGLU gate/up/down layout only");
  const Shard in = o_.sharded ? Shard::all_to_sharded : Shard::none;
  const Shard out = o_.sharded ? Shard::sharded_to_all : Shard::none;
  // llama.py declares gate_proj, down_proj, up_proj in that order.
  if (o_.kind == Kind::swiglu)
    gate_proj_.emplace(Linear::load(w, path + "." + o_.gate_proj, o_.dims, o_.hidden, o_.bias, in));
  if (o_.kind == Kind::fused_swiglu)
    gate_up_proj_.emplace(Linear::load(w, path + "." + o_.gate_up_proj, o_.dims, 2 * o_.hidden, o_.bias));
  down_proj_.emplace(Linear::load(w, path + "." + o_.down_proj, o_.hidden, o_.dims, o_.bias, out));
  if (o_.kind != Kind::fused_swiglu)
    up_proj_.emplace(Linear::load(w, path + "." + o_.up_proj, o_.dims, o_.hidden, o_.bias, in));
  cpu_ = w.cpu_kernels();
  gpu_l3_ = w.gpu_l3();
}

mx::array Mlp::operator()(const mx::array& x) const {
  switch (o_.kind) {
    case MlpOptions::Kind::swiglu: {
      // gate, up and down on rows flattened once, not in each matmul (Linear::flattens_rows).
      const bool flat = x.ndim() == 3 && gate_proj_->flattens_rows() && up_proj_->flattens_rows() &&
                        down_proj_->flattens_rows();
      const auto in = flat ? mx::flatten(x, 0, 1) : x;
      auto gate = (*gate_proj_)(in), up = (*up_proj_)(in);
      // At --fidelity l3 on the CPU: one node with a vectorised exp (MLX's compiled kernel calls libm).
      auto fused = cpu_ && cpu_->l3() ? kernels::cpu::swiglu(cpu_, gate, up) : std::nullopt;
      auto y = (*down_proj_)(fused ? *fused : swiglu(gate, up));
      return flat ? mx::reshape(y, {x.shape(0), x.shape(1), y.shape(-1)}) : y;
    }
    case MlpOptions::Kind::fused_swiglu: {
      auto halves = mx::split((*gate_up_proj_)(x), 2, -1);  // gate, x
      return (*down_proj_)(swiglu(halves[0], halves[1]));
    }
    case MlpOptions::Kind::custom:
      return custom_(x);
    case MlpOptions::Kind::plain:
      break;
  }
  return (*down_proj_)(o_.activation((*up_proj_)(x)));
}

std::optional<mx::array> Mlp::l3_residual_block(const mx::array& h, const Norm& norm) const {
  if (gpu_l3_) {
    if (o_.kind != MlpOptions::Kind::swiglu) return std::nullopt;
    const auto rms = norm.rms();
    const auto gate = gate_proj_->cuda_l3_matrix(), up = up_proj_->cuda_l3_matrix();
    const auto down = down_proj_->cuda_l3_matrix();
    if (!rms || !gate || !up || !down) return std::nullopt;
    auto activated = kernels::cuda::rms_norm_swiglu(h, {rms->first, rms->second}, *gate, *up);
    if (!activated) return std::nullopt;
    if (auto out = kernels::cuda::qmv_residual(*activated, *down, h)) return *out;
    return mx::add(h, (*down_proj_)(*activated));
  }
  if (!cpu_ || !cpu_->l3() || o_.kind != MlpOptions::Kind::swiglu) return std::nullopt;
  const auto rms = norm.rms();
  const auto gate = gate_proj_->l3_matrix(), up = up_proj_->l3_matrix(), down = down_proj_->l3_matrix();
  if (!rms || !gate || !up || !down) return std::nullopt;
  return kernels::cpu::l3_mlp_block(cpu_, h, rms->first, rms->second, *gate, *up, *down);
}

std::optional<kernels::cuda::DecoderLayerMlp> Mlp::cuda_layer_mlp() const {
  if (!gpu_l3_ || o_.kind != MlpOptions::Kind::swiglu || o_.sharded) return std::nullopt;
  const auto gate = gate_proj_->cuda_layer_matrix(), up = up_proj_->cuda_layer_matrix();
  const auto down = down_proj_->cuda_layer_matrix();
  if (!gate || !up || !down) return std::nullopt;
  return kernels::cuda::DecoderLayerMlp{*gate, *up, *down};
}

namespace {

std::optional<Norm> maybe_norm(const BlockOptions& o, WeightBinder& w, const std::string& path,
                               const std::string& name) {
  if (name.empty()) return std::nullopt;
  return Norm::load(w, path + "." + name, o.hidden_size, o.norm_eps, o.norm_kind);
}

}  // namespace

Block::Block(const BlockOptions& o, WeightBinder& w, const std::string& path)
    : self_attn_(o.attention, w, path + "." + o.self_attn),
      mlp_(o.mlp, w, path + "." + o.mlp_name),
      input_norm_(maybe_norm(o, w, path, o.input_norm)),
      pre_mlp_norm_(maybe_norm(o, w, path, o.pre_mlp_norm)),
      post_attention_norm_(maybe_norm(o, w, path, o.post_attention_norm)),
      post_mlp_norm_(maybe_norm(o, w, path, o.post_mlp_norm)),
      residual_scale_(o.residual_scale),
      residual_(o.residual),
      use_sliding_(o.use_sliding) {
  layer_weights_ = cuda_layer_weights();
  if (layer_weights_) cuda_state_ = std::make_shared<CudaLayerState>();
}

std::optional<kernels::cuda::DecoderLayerWeights> Block::cuda_layer_weights() const {
  if (kernels::cuda::decoder_layer_use() == kernels::cuda::DecoderLayerUse::off) return std::nullopt;
  if (residual_ != BlockOptions::Residual::sequential || !input_norm_ || !pre_mlp_norm_ || post_attention_norm_ ||
      post_mlp_norm_ || residual_scale_)
    return std::nullopt;
  const auto attn_norm = input_norm_->rms(), mlp_norm = pre_mlp_norm_->rms();
  auto attn = self_attn_.cuda_layer_attention();
  // The kind of layer the kernel is wanted for, before the MLP's matrices are gathered.
  if (!attn || !kernels::cuda::decoder_layer_wanted(attn->q)) return std::nullopt;
  auto mlp = mlp_.cuda_layer_mlp();
  if (!attn_norm || !mlp_norm || !mlp) return std::nullopt;
  kernels::cuda::DecoderLayerWeights w{
      {attn_norm->first, attn_norm->second}, std::move(*attn), {mlp_norm->first, mlp_norm->second}, std::move(*mlp)};
  if (!kernels::cuda::decoder_layer_wanted(w)) return std::nullopt;
  return w;
}

std::optional<mx::array> Block::cuda_l3_layer(const mx::array& x, const AttentionMask& mask,
                                              cache::Cache* cache) const {
  if (!layer_weights_) return std::nullopt;
  auto* kv = dynamic_cast<cache::KVCache*>(cache);
  if (!kv || mask.kind == AttentionMask::Kind::array) return std::nullopt;
  const auto& w = *layer_weights_;
  auto& state = *cuda_state_;
  std::lock_guard lock(state.mutex);
  if (!state.grid) state.grid = kernels::cuda::decoder_layer_grid(w);
  if (state.grid->blocks <= 0) return std::nullopt;
  // x as the kept launch's: the kernel took it then.
  const bool same_x = state.primitive && x.dtype() == state.x_type && x.shape() == state.x_shape;
  if (!same_x && !kernels::cuda::decoder_layer_fits(x, w)) return std::nullopt;
  const int head_dim = w.attn.q.w.shape(0) / w.attn.n_heads;
  auto slot = kv->begin_in_place_write({1, w.attn.n_kv_heads, 1, head_dim}, x.dtype(),
                                       kernels::cuda::kDecoderLayerBarrierWords);
  if (!slot) return std::nullopt;
  const auto table = state.table.get(w);
  const auto position = mx::array(slot->position, mx::int32);
  static const kernels::cuda::CachedKernel kernel(kernels::cuda::decoder_layer_spec());
  if (!same_x || slot->keys.shape(2) != state.capacity) {
    const auto launch = kernels::cuda::decoder_layer_launch(x, w, table, slot->keys, slot->values, position,
                                                            slot->barrier, *state.grid);
    // The cache has moved on: its buffers were made to fit, so a refusal here is a bug, not a fallback.
    if (!launch) throw std::logic_error("[decoder_layer] the cache's buffers do not fit the layer they were made for");
    state.primitive = kernel.primitive(*launch);
    state.capacity = slot->keys.shape(2);
    state.x_shape = x.shape();
    state.x_type = x.dtype();
    state.output_shapes = launch->output_shapes;
    state.output_types = launch->output_dtypes;
  }
  auto out = mx::array::make_arrays(
      state.output_shapes, state.output_types, state.primitive,
      kernels::cuda::decoder_layer_inputs(x, table, slot->keys, slot->values, position, slot->barrier));
  kv->end_in_place_write(out[1]);
  return out[0];
}

mx::array Block::operator()(const mx::array& x, const AttentionMask& mask, cache::Cache* cache) const {
  if (auto layer = cuda_l3_layer(x, mask, cache)) return *layer;
  auto scaled = [&](mx::array r) {
    if (!residual_scale_) return r;
    return mx::multiply(r, mx::array(static_cast<float>(*residual_scale_), r.dtype()));
  };
  if (residual_ != BlockOptions::Residual::sequential) {
    auto h = input_norm_ ? (*input_norm_)(x) : x;
    auto attn_h = self_attn_(h, mask, cache);
    auto ff_h = mlp_(h);
    if (residual_ == BlockOptions::Residual::parallel) return mx::add(mx::add(attn_h, ff_h), x);
    return mx::add(mx::add(x, attn_h), ff_h);
  }
  // At --fidelity l3 on the CPU: the norm, the attention and the residual add as two nodes.
  std::optional<mx::array> fused;
  if (input_norm_ && !post_attention_norm_ && !residual_scale_)
    fused = self_attn_.l3_residual_block(x, *input_norm_, mask, cache);
  auto h = fused ? *fused : [&] {
    auto r = self_attn_(input_norm_ ? (*input_norm_)(x) : x, mask, cache);
    if (post_attention_norm_) r = (*post_attention_norm_)(r);
    return mx::add(x, scaled(r));
  }();
  // At --fidelity l3 on the CPU: the norm, the MLP and the residual add as one node.
  if (pre_mlp_norm_ && !post_mlp_norm_ && !residual_scale_)
    if (auto block = mlp_.l3_residual_block(h, *pre_mlp_norm_)) return *block;
  auto r = mlp_(pre_mlp_norm_ ? (*pre_mlp_norm_)(h) : h);
  if (post_mlp_norm_) r = (*post_mlp_norm_)(r);
  return mx::add(h, scaled(r));
}

void shard_like_llama(std::vector<BlockOptions>& layers, int group_size, const std::string& source) {
  auto check = [&](int value, const char* field) {
    if (value % group_size != 0)
      throw ConfigError(source + ": '" + field + "' is " + std::to_string(value) + ", which does not divide across " +
                        std::to_string(group_size) + " ranks (tensor parallel splits it evenly; use a world size " +
                        "that divides it, or --pipeline where the model supports it)");
  };
  for (auto& layer : layers) {
    check(layer.attention.n_heads, "num_attention_heads");
    check(layer.attention.n_kv_heads, "num_key_value_heads");
    layer.attention.sharded = true;
    if (layer.mlp.kind == MlpOptions::Kind::swiglu) {
      check(layer.mlp.hidden, "intermediate_size");
      layer.mlp.sharded = true;
    }
  }
}

BlockOptions llama_block(int hidden_size, int intermediate_size, int n_heads, int n_kv_heads, int head_dim,
                         float rms_norm_eps, std::optional<Rope> rope) {
  BlockOptions b;
  b.attention.hidden_size = hidden_size;
  b.attention.n_heads = n_heads;
  b.attention.n_kv_heads = n_kv_heads;
  b.attention.head_dim = head_dim;
  b.attention.scale = default_scale(head_dim);
  b.attention.qk_norm_eps = rms_norm_eps;
  b.attention.rope = std::move(rope);
  b.mlp.dims = hidden_size;
  b.mlp.hidden = intermediate_size;
  b.hidden_size = hidden_size;
  b.norm_eps = rms_norm_eps;
  return b;
}

Decoder::Decoder(DecoderOptions options, WeightBinder& w)
    : o_(std::move(options)),
      embed_tokens_(Embedding::load(w, o_.model + "." + o_.embed_tokens, o_.vocab_size, o_.hidden_size)),
      norm_(Norm::load(w, o_.model + "." + o_.norm, o_.hidden_size, o_.norm_eps, o_.norm_kind)) {
  const int n_layers = static_cast<int>(o_.layers.size());
  stage_ = {0, n_layers};
  if (const auto* group = w.pipeline_group()) {
    // PipelineMixin.pipeline: this rank keeps layers [start, end); every stage keeps the
    // embeddings, the final norm and the head. The other ranks' layers are never built.
    pipeline_ = *group;
    stage_ = pipeline_layers(n_layers, group->rank(), group->size(), w.config().source());
    for (int i = 0; i < n_layers; ++i)
      if (i < stage_.start || i >= stage_.end) w.discard_prefix(o_.model + ".layers." + std::to_string(i) + ".");
  }
  layers_.reserve(stage_.end - stage_.start);
  for (int i = stage_.start; i < stage_.end; ++i)
    layers_.emplace_back(o_.layers[i], w, o_.model + ".layers." + std::to_string(i));
  auto full = std::find_if(layers_.begin(), layers_.end(), [](const Block& b) { return !b.use_sliding(); });
  fa_idx_ = full == layers_.end() ? 0 : full - layers_.begin();
  auto swa = std::find_if(layers_.begin(), layers_.end(), [](const Block& b) { return b.use_sliding(); });
  if (swa != layers_.end()) swa_idx_ = swa - layers_.begin();
  if (pipeline_ && swa_idx_)
    throw UnsupportedError(w.config().source() + ": pipeline parallel with sliding-window layers is not supported");
  if (!o_.tie_word_embeddings || o_.always_load_lm_head)
    lm_head_.emplace(Linear::load(w, o_.lm_head, o_.hidden_size, o_.vocab_size, o_.head_bias));
}

mx::array Decoder::operator()(const mx::array& inputs, CacheList* cache) {
  return head(hidden_states(inputs, cache));
}

mx::array Decoder::hidden_states(const mx::array& inputs, CacheList* cache) {
  auto h = embed(inputs);
  if (pipeline_) return norm_(pipeline_hidden(std::move(h), cache));
  auto layer_cache = [&](size_t i) { return cache ? (*cache)[i].get() : nullptr; };
  auto fa_mask = create_attention_mask(h.shape(1), layer_cache(fa_idx_));
  std::optional<AttentionMask> swa_mask;
  if (swa_idx_) swa_mask = create_attention_mask(h.shape(1), layer_cache(*swa_idx_), o_.sliding_window);
  for (size_t i = 0; i < layers_.size(); ++i)
    h = layers_[i](h, layers_[i].use_sliding() ? *swa_mask : fa_mask, layer_cache(i));
  return norm_(h);
}

mx::array Decoder::pipeline_hidden(mx::array h, CacheList* cache) {
  // Qwen3MoeModel.__call__ with PipelineMixin: the hidden state enters from the rank after this one
  // (which ran the earlier layers), leaves to the rank before it, and rank 0's (the last layers')
  // result is shared with every rank through an all_gather, so all of them compute the same logits.
  const int rank = pipeline_->rank(), size = pipeline_->size();
  auto layer_cache = [&](size_t i) { return cache ? (*cache)[i].get() : nullptr; };
  auto mask = create_attention_mask(h.shape(1), layer_cache(0));
  if (rank < size - 1) h = mx::distributed::recv_like(h, rank + 1, *pipeline_);
  for (size_t i = 0; i < layers_.size(); ++i) h = layers_[i](h, mask, layer_cache(i));
  if (rank != 0) {
    h = mx::distributed::send(h, (rank - 1 + size) % size, *pipeline_);
    // cache[-1].keys = mx.depends(cache[-1].keys, h): a prefill that evaluates only the cache
    // still sends.
    if (cache && !cache->empty()) {
      if (auto* kv = dynamic_cast<cache::KVCache*>(cache->back().get()))
        kv->depend_keys_on(h);
      else if (auto* rotating = dynamic_cast<cache::RotatingKVCache*>(cache->back().get()))
        rotating->depend_keys_on(h);
      else if (auto* batch = dynamic_cast<cache::BatchKVCache*>(cache->back().get()))
        batch->depend_keys_on(h);
      else
        throw UnsupportedError("pipeline parallel runs with a KVCache, RotatingKVCache or BatchKVCache (not --kv-bits)");
    }
  }
  if (size > 1) h = pipeline_output_everywhere(h, *pipeline_);
  return h;
}

mx::array Decoder::head(const mx::array& h) const { return project_to_vocab(h); }

mx::array Decoder::project_to_vocab(const mx::array& h) const {
  return o_.tie_word_embeddings ? embed_tokens_.as_linear(h) : (*lm_head_)(h);
}

CacheList Decoder::make_cache() const {
  // Without a make_cache of its own, mlx-lm's make_prompt_cache gives every layer a KVCache.
  CacheList caches;
  for (const auto& l : layers_) {
    if (l.use_sliding() && o_.defines_make_cache) {
      caches.push_back(std::make_unique<cache::RotatingKVCache>(*o_.sliding_window));
    } else {
      caches.push_back(std::make_unique<cache::KVCache>());
    }
  }
  return caches;
}

std::vector<CausalLM::KvShape> Decoder::kv_shapes() const {
  std::vector<KvShape> shapes;
  for (const auto& l : layers_) shapes.push_back({l.self_attn().n_kv_heads(), l.self_attn().head_dim(),
                                                  l.self_attn().head_dim()});
  return shapes;
}

}  // namespace mlxrt::model::nn
