// Port of mlx_lm/models/qwen3_next.py (mlx-lm 0.32.2): its blocks, which qwen3_5.py shares, and the
// qwen3_next family (fused, head-interleaved qkvz / ba projections; MLX-layout checkpoints, or
// Hugging Face's per-expert layout as sanitize converts it); the blocks' split as qwen3_5.py's
// shard() makes it, and PipelineMixin's split and forward as both files' models run it.
#include "mlxrt/model/families/qwen3_next.h"

#include <algorithm>
#include <cmath>

#include <mlx/distributed/ops.h>
#include <mlx/fast.h>
#include <mlx/ops.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/model/families/families.h"
#include "mlxrt/model/families/qwen3_next_mtp.h"
#include "mlxrt/model/nn/activations.h"
#include "mlxrt/model/nn/gated_delta.h"
#include "mlxrt/model/nn/gated_delta_cuda.h"
#include "mlxrt/model/parallel.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::model::qwen3_next {

using nlohmann::json;

void Args::validate(const std::string& source) const {
  auto positive = [&](const char* name, int v) {
    if (v < 1) throw ConfigError(source + ": '" + name + "' must be a positive integer, got " + std::to_string(v));
  };
  positive("hidden_size", hidden_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("num_key_value_heads", num_key_value_heads);
  positive("head_dim", head_dim);
  positive("vocab_size", vocab_size);
  positive("linear_num_value_heads", linear_num_value_heads);
  positive("linear_num_key_heads", linear_num_key_heads);
  positive("linear_key_head_dim", linear_key_head_dim);
  positive("linear_value_head_dim", linear_value_head_dim);
  positive("full_attention_interval", full_attention_interval);
  if (linear_conv_kernel_dim < 2)
    throw ConfigError(source + ": 'linear_conv_kernel_dim' must be at least 2 (the convolution keeps kernel - 1 " +
                      "inputs between calls), got " + std::to_string(linear_conv_kernel_dim));
  if (linear_num_value_heads % linear_num_key_heads != 0)
    throw ConfigError(source + ": 'linear_num_value_heads' (" + std::to_string(linear_num_value_heads) +
                      ") must be divisible by 'linear_num_key_heads' (" + std::to_string(linear_num_key_heads) + ")");
  if (num_attention_heads % num_key_value_heads != 0)
    throw ConfigError(source + ": 'num_attention_heads' (" + std::to_string(num_attention_heads) +
                      ") must be divisible by 'num_key_value_heads' (" + std::to_string(num_key_value_heads) + ")");
  if (full_attention_interval > num_hidden_layers)
    throw ConfigError(source + ": 'full_attention_interval' (" + std::to_string(full_attention_interval) +
                      ") is larger than 'num_hidden_layers' (" + std::to_string(num_hidden_layers) +
                      "): layer full_attention_interval - 1 must be a full-attention layer (it makes the mask)");
  if (static_cast<int>(head_dim * partial_rotary_factor) < 1 || partial_rotary_factor > 1.0)
    throw ConfigError(source + ": 'partial_rotary_factor' must be in (0, 1] and leave at least one rotated " +
                      "dimension of head_dim " + std::to_string(head_dim));
  if (num_experts > 0) {
    positive("num_experts_per_tok", num_experts_per_tok);
    positive("moe_intermediate_size", moe_intermediate_size);
    positive("shared_expert_intermediate_size", shared_expert_intermediate_size);
    positive("decoder_sparse_step", decoder_sparse_step);
    if (num_experts_per_tok > num_experts)
      throw ConfigError(source + ": 'num_experts_per_tok' (" + std::to_string(num_experts_per_tok) +
                        ") is larger than 'num_experts' (" + std::to_string(num_experts) + ")");
  }
}

void Args::check_tensor_split(int n, const std::string& source) const {
  if (n <= 1) return;
  auto check = [&](const char* field, int value) {
    if (value % n != 0)
      throw ConfigError(source + ": '" + field + "' is " + std::to_string(value) + ", which does not divide across " +
                        std::to_string(n) + " ranks (tensor parallel splits it evenly; use a world size that " +
                        "divides it, or --pipeline)");
  };
  check("num_attention_heads", num_attention_heads);
  // repeat_kv_layer_inplace: fewer key/value heads than ranks are repeated, N / heads times each.
  if (num_key_value_heads >= n || n % num_key_value_heads != 0) check("num_key_value_heads", num_key_value_heads);
  if (full_attention_interval > 1) {  // some layer is a gated delta net
    check("linear_num_key_heads", linear_num_key_heads);
    check("linear_num_value_heads", linear_num_value_heads);
  }
  if (num_experts > 0) {
    check("moe_intermediate_size", moe_intermediate_size);
    check("shared_expert_intermediate_size", shared_expert_intermediate_size);
  } else {
    check("intermediate_size", intermediate_size);
  }
  // shard(): `assert vocab % N == 0` before the untied head is split by rows.
  if (!tie_word_embeddings) check("vocab_size", vocab_size);
}

int tensor_shards(const WeightBinder& w) { return w.tensor_group() ? w.tensor_group()->size() : 1; }

namespace {

nn::Shard shard_if_grouped(const WeightBinder& w, nn::Shard shard) {
  return w.tensor_group() ? shard : nn::Shard::none;
}

// repeat_kv_layer_inplace: with fewer key/value heads `h` than ranks N, every parameter of the layer
// ([h * head_dim, ...]) has each head repeated N / h times, so that sharding gives each rank one
// head. Returns the layer's output size then.
int repeat_kv_heads(WeightBinder& w, const std::string& path, int h, int out_dims) {
  const int n = tensor_shards(w);
  if (n <= h) return out_dims;
  for (const char* suffix : {"weight", "scales", "biases", "bias"}) {
    const auto name = path + "." + suffix;
    if (!w.has(name)) continue;
    const auto p = w.remaining().at(name);
    mx::Shape heads = p.shape();
    heads[0] /= h;
    heads.insert(heads.begin(), h);
    mx::Shape back = p.shape();
    back[0] = -1;
    w.replace(name, mx::reshape(mx::repeat(mx::reshape(p, heads), n / h, 0), back));
  }
  return out_dims * (n / h);
}

nn::Linear load_kv_proj(const Args& args, WeightBinder& w, const std::string& path) {
  const int out = repeat_kv_heads(w, path, args.num_key_value_heads, args.num_key_value_heads * args.head_dim);
  return nn::Linear::load(w, path, args.hidden_size, out, args.attention_bias,
                          shard_if_grouped(w, nn::Shard::all_to_sharded));
}

// shard_inplace(conv1d, lambda p, w: (0, [key_dim, 2 * key_dim])): the q, k and v channels each split.
mx::array load_conv1d(const Args& args, WeightBinder& w, const std::string& name) {
  const int key_dim = args.linear_key_head_dim * args.linear_num_key_heads;
  const int conv_dim = key_dim * 2 + args.linear_value_head_dim * args.linear_num_value_heads;
  auto weight = w.take(name, {conv_dim, args.linear_conv_kernel_dim, 1});
  const auto* group = w.tensor_group();
  if (!group) return weight;
  auto kept = nn::shard_tensor(weight, 0, {key_dim, 2 * key_dim}, group->rank(), group->size(), name);
  w.retake(weight, kept);
  return kept;
}

// dt_bias / A_log: mx.contiguous(mx.split(x, N)[rank]).
mx::array load_per_head(WeightBinder& w, const std::string& name, int heads) {
  auto t = w.take(name, {heads});
  return w.tensor_group() ? w.keep_shard(name, t, 0) : t;
}

}  // namespace

RMSNormGated RMSNormGated::load(WeightBinder& w, const std::string& path, int dims, float eps) {
  return RMSNormGated(w.take(path + ".weight", {dims}), eps);
}

mx::array RMSNormGated::operator()(const mx::array& hidden_states, const std::optional<mx::array>& gate) const {
  auto x = mx::fast::rms_norm(hidden_states, weight_, eps_);
  if (gate) return nn::precise_swiglu(hidden_states, *gate, x);
  return mx::astype(x, hidden_states.dtype());
}

Attention::Attention(const Args& args, WeightBinder& w, const std::string& p)
    : num_attention_heads(args.num_attention_heads / tensor_shards(w)),
      num_key_value_heads(std::max(1, args.num_key_value_heads / tensor_shards(w))),
      head_dim(args.head_dim),
      scale(static_cast<float>(std::pow(static_cast<double>(args.head_dim), -0.5))),
      q_proj(nn::Linear::load(w, p + ".q_proj", args.hidden_size, args.num_attention_heads * head_dim * 2,
                              args.attention_bias, shard_if_grouped(w, nn::Shard::all_to_sharded))),
      k_proj(load_kv_proj(args, w, p + ".k_proj")),
      v_proj(load_kv_proj(args, w, p + ".v_proj")),
      o_proj(nn::Linear::load(w, p + ".o_proj", args.num_attention_heads * head_dim, args.hidden_size,
                              args.attention_bias, shard_if_grouped(w, nn::Shard::sharded_to_all))),
      q_norm(nn::RMSNorm::load(w, p + ".q_norm", head_dim, args.rms_norm_eps)),
      k_norm(nn::RMSNorm::load(w, p + ".k_norm", head_dim, args.rms_norm_eps)),
      rope(nn::Rope::initialize(static_cast<int>(head_dim * args.partial_rotary_factor), args.rope_theta, false,
                                args.rope_scaling, args.max_position_embeddings, w.config().source())),
      per_query_row(w.row_exact()) {}

mx::array Attention::operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const {
  const int B = x.shape(0), L = x.shape(1);
  auto q_proj_output = q_proj(x);
  auto halves = mx::split(mx::reshape(q_proj_output, {B, L, num_attention_heads, -1}), 2, -1);
  auto queries = halves[0];
  auto gate = mx::reshape(halves[1], {B, L, -1});
  auto keys = k_proj(x), values = v_proj(x);
  queries = mx::transpose(q_norm(queries), {0, 2, 1, 3});
  keys = mx::transpose(k_norm(mx::reshape(keys, {B, L, num_key_value_heads, -1})), {0, 2, 1, 3});
  values = mx::transpose(mx::reshape(values, {B, L, num_key_value_heads, -1}), {0, 2, 1, 3});
  auto kv = nn::rope_and_update_cache(rope, queries, keys, values, cache);
  auto output = per_query_row && L > 1
                    ? nn::attend_each_query(queries, kv, mask,
                                            [this](const mx::array& q, const cache::CachedKV& prefix) {
                                              return nn::scaled_dot_product_attention(q, prefix, scale, {});
                                            })
                    : nn::scaled_dot_product_attention(queries, kv, scale, mask);
  output = mx::reshape(mx::transpose(output, {0, 2, 1, 3}), {B, L, -1});
  return o_proj(mx::multiply(output, mx::sigmoid(gate)));
}

MLP::MLP(int dim, int hidden_dim, WeightBinder& w, const std::string& p)
    : gate_proj(nn::Linear::load(w, p + ".gate_proj", dim, hidden_dim, false,
                                 shard_if_grouped(w, nn::Shard::all_to_sharded))),
      down_proj(nn::Linear::load(w, p + ".down_proj", hidden_dim, dim, false,
                                 shard_if_grouped(w, nn::Shard::sharded_to_all))),
      up_proj(nn::Linear::load(w, p + ".up_proj", dim, hidden_dim, false,
                               shard_if_grouped(w, nn::Shard::all_to_sharded))) {}

mx::array MLP::operator()(const mx::array& x) const { return down_proj(nn::swiglu(gate_proj(x), up_proj(x))); }

GatedDeltaCore::GatedDeltaCore(const Args& args, WeightBinder& w, const std::string& p)
    : num_v_heads(args.linear_num_value_heads / tensor_shards(w)),
      num_k_heads(args.linear_num_key_heads / tensor_shards(w)),
      head_k_dim(args.linear_key_head_dim),
      head_v_dim(args.linear_value_head_dim),
      key_dim(head_k_dim * num_k_heads),
      value_dim(head_v_dim * num_v_heads),
      conv_kernel_size(args.linear_conv_kernel_dim),
      conv_dim(key_dim * 2 + value_dim),
      conv1d_weight_(load_conv1d(args, w, p + ".conv1d.weight")),
      dt_bias_(load_per_head(w, p + ".dt_bias", args.linear_num_value_heads)),
      A_log_(load_per_head(w, p + ".A_log", args.linear_num_value_heads)),
      norm_(RMSNormGated::load(w, p + ".norm", head_v_dim, args.rms_norm_eps)),
      out_proj_(nn::Linear::load_sharded_inplace(w, p + ".out_proj", args.linear_value_head_dim * args.linear_num_value_heads,
                                                 args.hidden_size, false,
                                                 shard_if_grouped(w, nn::Shard::sharded_to_all))) {
  if (const auto* group = w.tensor_group()) sum_over_ = *group;
  per_token_ = w.row_exact();
}

mx::array GatedDeltaCore::operator()(const mx::array& mixed_qkv, const mx::array& z, const mx::array& b,
                                     const mx::array& a, cache::ArraysCache* cache) const {
  const int S = mixed_qkv.shape(1);
  if (!per_token_ || S == 1 || !cache) return step(mixed_qkv, z, b, a, cache);
  std::vector<mx::array> outs;
  outs.reserve(static_cast<size_t>(S));
  auto at = [](const mx::array& t, int s) {
    auto start = mx::Shape(t.ndim(), 0), stop = t.shape();
    start[1] = s;
    stop[1] = s + 1;
    return mx::slice(t, start, stop);
  };
  for (int s = 0; s < S; ++s) outs.push_back(step(at(mixed_qkv, s), at(z, s), at(b, s), at(a, s), cache));
  return mx::concatenate(outs, 1);
}

mx::array GatedDeltaCore::step(const mx::array& mixed_qkv, const mx::array& z, const mx::array& b,
                               const mx::array& a, cache::ArraysCache* cache) const {
  const int B = mixed_qkv.shape(0), S = mixed_qkv.shape(1);
  // A fresh conv state is zeros in the layer input's dtype, which the projections keep.
  mx::array conv_state = cache && (*cache)[0] ? *(*cache)[0]
                                              : mx::zeros({B, conv_kernel_size - 1, conv_dim}, mixed_qkv.dtype());
  auto conv_input = mx::concatenate({conv_state, mixed_qkv}, 1);
  if (cache) {
    const int n_keep = conv_kernel_size - 1, length = conv_input.shape(1);
    cache->set(0, mx::contiguous(mx::slice(conv_input, {0, length - n_keep, 0}, {B, length, conv_dim})));
  }
  // On CUDA, 16-bit conv + SiLU is one launch with cuDNN's and the compiled SiLU's bytes.
  auto conv_out = nn::fused_conv_silu_applies(conv_input, conv1d_weight_)
                      ? nn::conv_silu_fused(conv_input, conv1d_weight_)
                      : nn::silu(mx::conv1d(conv_input, conv1d_weight_, 1, 0, 1, conv_dim));
  auto parts = mx::split(conv_out, mx::Shape{key_dim, 2 * key_dim}, -1);
  auto q = mx::reshape(parts[0], {B, S, num_k_heads, head_k_dim});
  auto k = mx::reshape(parts[1], {B, S, num_k_heads, head_k_dim});
  auto v = mx::reshape(parts[2], {B, S, num_v_heads, head_v_dim});
  std::optional<mx::array> state = cache ? (*cache)[1] : std::nullopt;
  std::tie(q, k) = nn::normalize_qk(q, k, std::pow(static_cast<double>(head_k_dim), -0.5), 1e-6);
  // A verify window keeps what keep_window's replay reads: the convolution's and the recurrence's inputs.
  if (auto* window = cache ? cache->window() : nullptr) window->calls.push_back({mixed_qkv, k, v, a, b});
  auto [out, new_state] = nn::gated_delta_update(q, k, v, a, b, A_log_, dt_bias_, state);
  if (cache) {
    cache->set(1, new_state);
    cache->advance(S);
  }
  out = norm_(out, z);
  out = out_proj_(mx::reshape(out, {B, S, -1}));
  return sum_over_ ? mx::distributed::all_sum(out, *sum_over_) : out;
}

void GatedDeltaCore::keep_window(cache::ArraysCache& cache, int keep) const {
  auto* window = cache.window();
  if (!window) throw std::logic_error("[GatedDeltaCore::keep_window] no verify window is open");
  if (window->calls.empty()) {  // nothing went through the layer
    cache.close_window();
    return;
  }
  // The window's inputs, in order, over all its calls: mixed_qkv, normalised k, v, a, b.
  std::vector<mx::array> inputs;
  for (size_t field = 0; field < 5; ++field) {
    std::vector<mx::array> parts;
    for (const auto& call : window->calls) parts.push_back(call[field]);
    inputs.push_back(parts.size() == 1 ? parts[0] : mx::concatenate(parts, 1));
  }
  const auto& mixed_qkv = inputs[0];
  const int B = mixed_qkv.shape(0), T = mixed_qkv.shape(1);
  if (keep < 0 || keep > T)
    throw std::logic_error("[GatedDeltaCore::keep_window] keep " + std::to_string(keep) + " of a window of " +
                           std::to_string(T));
  if (keep == T) {
    cache.close_window();
    return;
  }
  const auto before = window->before;
  const int offset = window->offset_before + keep;
  cache.close_window();
  if (keep == 0) {
    cache.set_state(before, offset);
    return;
  }
  // The conv state after `keep` positions: the kernel - 1 inputs before position `keep` of
  // [state before the window, window inputs] (step() keeps the same rows, copied alike).
  mx::array conv_before = before[0] ? *before[0] : mx::zeros({B, conv_kernel_size - 1, conv_dim}, mixed_qkv.dtype());
  auto conv_input = mx::concatenate({conv_before, mixed_qkv}, 1);
  auto conv_state = mx::contiguous(mx::slice(conv_input, {0, keep, 0}, {B, keep + conv_kernel_size - 1, conv_dim}));
  auto state = nn::gated_delta_replay_state(inputs[1], inputs[2], inputs[3], inputs[4], A_log_, dt_bias_, before[1],
                                            keep);
  cache.set_state({conv_state, state}, offset);
}

nn::SparseMoe sparse_moe_block(const Args& args, WeightBinder& w, const std::string& p) {
  nn::SparseMoeOptions o;
  o.hidden_size = args.hidden_size;
  o.expert_hidden = args.moe_intermediate_size;
  o.num_experts = args.num_experts;
  o.top_k = args.num_experts_per_tok;
  o.order = nn::RouterOrder::softmax_then_top_k;
  o.how = nn::TopK::partition_tail;
  o.norm_topk_prob = args.norm_topk_prob;
  o.shared_expert_hidden = args.shared_expert_intermediate_size;
  o.sharded = w.tensor_group() != nullptr;
  return nn::SparseMoe::load(w, p, o);
}

mx::array DecoderLayer::operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const {
  mx::array r = is_linear ? (*linear_attn)(input_layernorm(x), static_cast<cache::ArraysCache*>(cache))
                          : (*self_attn)(input_layernorm(x), mask, cache);
  auto h = mx::add(x, r);
  auto normed = post_attention_layernorm(h);
  auto out = std::visit([&](const auto& m) { return m(normed); }, mlp);
  return mx::add(h, out);
}

bool Args::sparse_at(int layer, SparseLayers sparse) const {
  const bool only_mlp = std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end();
  return num_experts > 0 && (sparse == SparseLayers::all || (!only_mlp && (layer + 1) % decoder_sparse_step == 0));
}

DecoderLayer load_decoder_layer(const Args& args, WeightBinder& w, const std::string& p, bool linear, bool moe,
                                const LinearAttentionFactory& linear_attention) {
  std::unique_ptr<LinearAttention> la;
  std::optional<Attention> sa;
  if (linear) {
    la = linear_attention(args, w, p + ".linear_attn");
  } else {
    sa.emplace(args, w, p + ".self_attn");
  }
  auto in_norm = nn::RMSNorm::load(w, p + ".input_layernorm", args.hidden_size, args.rms_norm_eps);
  auto post_norm = nn::RMSNorm::load(w, p + ".post_attention_layernorm", args.hidden_size, args.rms_norm_eps);
  std::variant<MLP, nn::SparseMoe> mlp =
      moe ? std::variant<MLP, nn::SparseMoe>(sparse_moe_block(args, w, p + ".mlp"))
          : std::variant<MLP, nn::SparseMoe>(MLP(args.hidden_size, args.intermediate_size, w, p + ".mlp"));
  return DecoderLayer{linear, std::move(la), std::move(sa), std::move(in_norm), std::move(post_norm), std::move(mlp)};
}

HybridModel::HybridModel(Args args, WeightBinder& w, const std::string& prefix,
                         const LinearAttentionFactory& linear_attention, SparseLayers sparse)
    : args_(std::move(args)),
      embed_tokens_(nn::Embedding::load(w, prefix + "model.embed_tokens", args_.vocab_size, args_.hidden_size)),
      norm_(nn::RMSNorm::load(w, prefix + "model.norm", args_.hidden_size, args_.rms_norm_eps)),
      shards_(tensor_shards(w)) {
  const int n_layers = args_.num_hidden_layers;
  LayerRange stage{0, n_layers};
  if (const auto* group = w.pipeline_group()) {
    // PipelineMixin.pipeline: this rank keeps layers [start, end); every stage keeps the
    // embeddings, the final norm and the head. The other ranks' layers are never built.
    pipeline_ = *group;
    stage = pipeline_layers(n_layers, group->rank(), group->size(), w.config().source());
    for (int i = 0; i < n_layers; ++i)
      if (i < stage.start || i >= stage.end) w.discard_prefix(prefix + "model.layers." + std::to_string(i) + ".");
  }
  for (int i = stage.start; i < stage.end; ++i) {
    // qwen3_next: experts on every decoder_sparse_step-th layer outside mlp_only_layers; qwen3_5:
    // on every layer once num_experts > 0.
    layers_.push_back(load_decoder_layer(args_, w, prefix + "model.layers." + std::to_string(i), args_.is_linear(i),
                                         args_.sparse_at(i, sparse), linear_attention));
  }
  if (pipeline_) {
    // pipeline(): the first linear and the first full-attention layer of this rank's (a rank may
    // hold only one kind).
    for (size_t e = 0; e < layers_.size(); ++e) {
      if (!ssm_idx_ && layers_[e].is_linear) ssm_idx_ = e;
      if (!fa_idx_ && !layers_[e].is_linear) fa_idx_ = e;
    }
  } else {
    ssm_idx_ = 0;
    fa_idx_ = static_cast<size_t>(args_.full_attention_interval - 1);
  }
  if (!args_.tie_word_embeddings) {
    // shard(): an untied head split by vocabulary rows (shard_linear), its slices gathered after it.
    lm_head_.emplace(nn::Linear::load(w, prefix + "lm_head", args_.hidden_size, args_.vocab_size, false,
                                      shard_if_grouped(w, nn::Shard::all_to_sharded)));
    if (const auto* group = w.tensor_group()) head_group_ = *group;
  }
  if (w.multi_token_prediction()) {
    if (pipeline_ || shards_ > 1)
      throw UnsupportedError(w.config().source() + ": --mtp is not supported in distributed mode");
    mtp_ = std::make_unique<MtpHead>(args_, w, prefix, sparse, linear_attention);
  }
}

HybridModel::~HybridModel() = default;

mx::array HybridModel::head(const mx::array& hidden) const {
  if (!lm_head_) return embed_tokens_.as_linear(hidden);
  auto out = (*lm_head_)(hidden);
  return head_group_ ? nn::gather_last_axis(out, *head_group_) : out;
}

mx::array HybridModel::operator()(const mx::array& inputs, CacheList* cache) { return head(hidden_states(inputs, cache)); }

std::pair<mx::array, mx::array> HybridModel::forward_with_hidden(const mx::array& inputs, CacheList* cache) {
  auto hidden = hidden_states(inputs, cache);
  return {hidden, head(hidden)};
}

std::pair<mx::array, mx::array> HybridModel::predict(const mx::array& tokens, const mx::array& hidden,
                                                     CacheList* mtp_cache) {
  auto out = (*mtp_)(embed_tokens_(tokens), hidden, mtp_cache);
  return {out, head(out)};
}

CacheList HybridModel::make_mtp_cache() const { return mtp_->make_cache(); }

void HybridModel::open_window(CacheList& cache) {
  for (size_t i = 0; i < layers_.size(); ++i)
    if (layers_[i].is_linear) static_cast<cache::ArraysCache&>(*cache.at(i)).open_window();
}

void HybridModel::keep_window(CacheList& cache, int window, int keep) {
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i].is_linear) {
      layers_[i].linear_attn->core().keep_window(static_cast<cache::ArraysCache&>(*cache.at(i)), keep);
    } else if (window > keep) {
      if (cache.at(i)->trim(window - keep) != window - keep)
        throw std::logic_error("[HybridModel::keep_window] layer " + std::to_string(i) + " could not drop " +
                               std::to_string(window - keep) + " positions");
    }
  }
}

mx::array HybridModel::hidden_states(const mx::array& inputs, CacheList* cache) {
  auto h = embed_tokens_(inputs);
  if (pipeline_) return norm_(pipeline_hidden(std::move(h), cache));
  auto layer_cache = [&](size_t i) { return cache ? (*cache)[i].get() : nullptr; };
  auto fa_mask = nn::create_attention_mask(h.shape(1), layer_cache(*fa_idx_));
  // create_ssm_mask: the ArraysCache's make_mask, which is no mask for one sequence.
  auto ssm_mask = layer_cache(*ssm_idx_) ? layer_cache(*ssm_idx_)->make_mask(h.shape(1)) : nn::AttentionMask{};
  for (size_t i = 0; i < layers_.size(); ++i) h = layers_[i](h, layers_[i].is_linear ? ssm_mask : fa_mask, layer_cache(i));
  return norm_(h);
}

mx::array HybridModel::pipeline_hidden(mx::array h, CacheList* cache) {
  const int rank = pipeline_->rank(), size = pipeline_->size();
  auto layer_cache = [&](size_t i) { return cache ? (*cache)[i].get() : nullptr; };
  nn::AttentionMask fa_mask, ssm_mask;
  if (fa_idx_) fa_mask = nn::create_attention_mask(h.shape(1), layer_cache(*fa_idx_));
  if (ssm_idx_ && layer_cache(*ssm_idx_)) ssm_mask = layer_cache(*ssm_idx_)->make_mask(h.shape(1));
  if (rank < size - 1) h = mx::distributed::recv_like(h, rank + 1, *pipeline_);
  for (size_t i = 0; i < layers_.size(); ++i) h = layers_[i](h, layers_[i].is_linear ? ssm_mask : fa_mask, layer_cache(i));
  if (rank != 0) {
    h = mx::distributed::send(h, (rank - 1 + size) % size, *pipeline_);
    // The last layer's cache depends on the send (keys, or the conv state of a linear layer), so a
    // prefill that evaluates only the cache still sends.
    if (cache && !cache->empty()) {
      if (auto* kv = dynamic_cast<cache::KVCache*>(cache->back().get())) {
        kv->depend_keys_on(h);
      } else if (auto* arrays = dynamic_cast<cache::ArraysCache*>(cache->back().get())) {
        if ((*arrays)[0]) arrays->set(0, mx::depends({*(*arrays)[0]}, {h})[0]);
      } else {
        throw UnsupportedError("pipeline parallel runs with a KVCache or an ArraysCache (not --kv-bits)");
      }
    }
  }
  if (size > 1) h = pipeline_output_everywhere(h, *pipeline_);
  return h;
}

CacheList HybridModel::make_cache() const {
  CacheList caches;
  for (const auto& l : layers_) {
    if (l.is_linear) {
      caches.push_back(std::make_unique<cache::ArraysCache>(2));
    } else {
      caches.push_back(std::make_unique<cache::KVCache>());
    }
  }
  return caches;
}

std::vector<CausalLM::KvShape> HybridModel::kv_shapes() const {
  // Linear layers hold no keys and values; their entries are never compared.
  std::vector<KvShape> shapes;
  for (const auto& l : layers_)
    shapes.push_back({l.self_attn ? l.self_attn->num_key_value_heads : args_.num_key_value_heads, args_.head_dim,
                      args_.head_dim});
  return shapes;
}

std::vector<std::vector<mx::Shape>> HybridModel::array_state_shapes() const {
  // Conv state [1, kernel - 1, conv_dim] and recurrent state [1, Hv, Dv, Dk] (sharded: this rank's).
  const int conv_dim = (2 * args_.linear_num_key_heads * args_.linear_key_head_dim +
                        args_.linear_num_value_heads * args_.linear_value_head_dim) / shards_;
  std::vector<std::vector<mx::Shape>> shapes;
  for (const auto& l : layers_) {
    if (!l.is_linear) {
      shapes.emplace_back();
      continue;
    }
    shapes.push_back({{1, args_.linear_conv_kernel_dim - 1, conv_dim},
                      {1, args_.linear_num_value_heads / shards_, args_.linear_value_head_dim,
                       args_.linear_key_head_dim}});
  }
  return shapes;
}

bool sanitize_conv_and_norms(WeightBinder& w, bool norms_when_conv_moved, bool norms_always) {
  // mlx-lm's norm_keys, and the MTP head's own norms (bound only with --mtp; the head's layer norms
  // already end like the decoder layers'): the same zero-centred RMSNorms (qwen3_next_mtp.h).
  static const char* const norm_keys[] = {".input_layernorm.weight", ".post_attention_layernorm.weight",
                                          "model.norm.weight", ".q_norm.weight", ".k_norm.weight",
                                          "mtp.norm.weight", "mtp.pre_fc_norm_embedding.weight",
                                          "mtp.pre_fc_norm_hidden.weight"};
  auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  const auto names = w.names();
  bool moved = false;
  for (const auto& name : names) {
    const auto& v = w.remaining().at(name);
    if (name.find("conv1d.weight") != std::string::npos && v.ndim() == 3 && v.shape(-1) != 1) moved = true;
  }
  const bool norms = norms_always || (norms_when_conv_moved && moved);
  for (const auto& name : names) {
    const auto v = w.remaining().at(name);
    if (name.find("conv1d.weight") != std::string::npos && v.ndim() == 3 && v.shape(-1) != 1)
      w.replace(name, mx::moveaxis(v, 2, 1));
    if (norms && v.ndim() == 1 &&
        std::any_of(std::begin(norm_keys), std::end(norm_keys), [&](const char* k) { return ends_with(name, k); }))
      w.replace(name, mx::add(v, mx::array(1.0f, v.dtype())));
  }
  return moved;
}

namespace {

// qwen3_next.ModelArgs: a dataclass whose fields up to head_dim have no default.
Args args_from_config(const io::ModelConfig& config) {
  auto f = config.fields();
  Args a;
  a.model_type = f.required<std::string>("model_type");
  a.hidden_size = f.required<int>("hidden_size");
  a.num_hidden_layers = f.required<int>("num_hidden_layers");
  a.intermediate_size = f.required<int>("intermediate_size");
  a.num_attention_heads = f.required<int>("num_attention_heads");
  a.linear_num_value_heads = f.required<int>("linear_num_value_heads");
  a.linear_num_key_heads = f.required<int>("linear_num_key_heads");
  a.linear_key_head_dim = f.required<int>("linear_key_head_dim");
  a.linear_value_head_dim = f.required<int>("linear_value_head_dim");
  a.linear_conv_kernel_dim = f.required<int>("linear_conv_kernel_dim");
  a.num_experts = f.required<int>("num_experts");
  a.num_experts_per_tok = f.required<int>("num_experts_per_tok");
  a.decoder_sparse_step = f.required<int>("decoder_sparse_step");
  a.shared_expert_intermediate_size = f.required<int>("shared_expert_intermediate_size");
  const auto& only = f.raw().contains("mlp_only_layers") ? f.raw()["mlp_only_layers"] : json();
  if (!only.is_array())
    throw ConfigError(config.source() + ": 'mlp_only_layers' must be a list of layer indices");
  for (const auto& i : only) {
    if (!i.is_number_integer()) throw ConfigError(config.source() + ": 'mlp_only_layers' must hold integers");
    a.mlp_only_layers.push_back(i.get<int>());
  }
  a.moe_intermediate_size = f.required<int>("moe_intermediate_size");
  a.rms_norm_eps = f.required<float>("rms_norm_eps");
  a.vocab_size = f.required<int>("vocab_size");
  a.num_key_value_heads = f.required<int>("num_key_value_heads");
  a.rope_theta = f.required<double>("rope_theta");
  a.partial_rotary_factor = f.required<double>("partial_rotary_factor");
  a.max_position_embeddings = f.required<int>("max_position_embeddings");
  a.head_dim = f.required<int>("head_dim");
  a.norm_topk_prob = f.value_or<bool>("norm_topk_prob", false);
  a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", false);
  a.attention_bias = f.value_or<bool>("attention_bias", false);
  a.rope_scaling = f.has("rope_scaling") ? f.raw()["rope_scaling"] : json();
  a.full_attention_interval = f.value_or<int>("full_attention_interval", 4);
  // vLLM's qwen3_next_mtp.py reads the MTP head's layer count from num_nextn_predict_layers (default 1).
  a.mtp_num_hidden_layers = f.value_or<int>("num_nextn_predict_layers", 1);
  a.validate(config.source());
  return a;
}

// Qwen3NextGatedDeltaNet: q, k, v, z interleaved per key head in one projection, b and a in another.
class Qwen3NextGatedDeltaNet final : public LinearAttention {
 public:
  Qwen3NextGatedDeltaNet(const Args& args, WeightBinder& w, const std::string& p)
      : core_(args, w, p),
        in_proj_qkvz_(nn::Linear::load(w, p + ".in_proj_qkvz", args.hidden_size,
                                       core_.key_dim * 2 + core_.value_dim * 2, false)),
        in_proj_ba_(nn::Linear::load(w, p + ".in_proj_ba", args.hidden_size, core_.num_v_heads * 2, false)) {}

  mx::array operator()(const mx::array& inputs, cache::ArraysCache* cache) const override {
    const int B = inputs.shape(0), S = inputs.shape(1);
    const int nk = core_.num_k_heads, dn = core_.head_k_dim, nv = core_.num_v_heads, dv = core_.head_v_dim;
    // fix_query_key_value_ordering
    auto mixed_qkvz = mx::reshape(in_proj_qkvz_(inputs), {B, S, nk, -1});
    auto mixed_ba = mx::reshape(in_proj_ba_(inputs), {B, S, nk, -1});
    auto qkvz = mx::split(mixed_qkvz, mx::Shape{dn, 2 * dn, 2 * dn + nv / nk * dv}, -1);
    auto ba = mx::split(mixed_ba, mx::Shape{nv / nk}, -1);
    auto v = mx::reshape(qkvz[2], {B, S, -1, dv});
    auto z = mx::reshape(qkvz[3], {B, S, -1, dv});
    auto b = mx::reshape(ba[0], {B, S, nv});
    auto a = mx::reshape(ba[1], {B, S, nv});
    auto mixed_qkv = mx::concatenate(
        {mx::reshape(qkvz[0], {B, S, -1}), mx::reshape(qkvz[1], {B, S, -1}), mx::reshape(v, {B, S, -1})}, -1);
    return core_(mixed_qkv, z, b, a, cache);
  }
  const GatedDeltaCore& core() const override { return core_; }

 private:
  GatedDeltaCore core_;
  nn::Linear in_proj_qkvz_, in_proj_ba_;
};

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  auto args = args_from_config(config);
  // Pipelined as a PipelineMixin; qwen3_next.py defines no shard() (check_parallel_support refuses
  // tensor parallel before this).
  if (weights.tensor_group())
    throw UnsupportedError(config.source() + ": model_type 'qwen3_next' has no tensor-parallel sharding");
  // sanitize(): only a checkpoint with per-expert tensors (Hugging Face's layout) is rewritten.
  bool per_expert = false;
  for (const auto& name : weights.names())
    if (name.rfind("model.layers.", 0) == 0 && name.find(".mlp.experts.0.up_proj.weight") != std::string::npos)
      per_expert = true;
  if (per_expert) {
    if (!weights.multi_token_prediction()) weights.discard_containing("mtp.");
    // --mtp: the MTP layer's experts are stacked as the decoder layers' are.
    if (weights.has("mtp.layers.0.mlp.experts.0.up_proj.weight"))
      weights.stack_experts("mtp.layers.0.mlp.experts", "mtp.layers.0.mlp.switch_mlp", args.num_experts,
                            {{"up_proj", "up_proj"}, {"down_proj", "down_proj"}, {"gate_proj", "gate_proj"}},
                            {"weight"});
    if (args.tie_word_embeddings) weights.discard("lm_head.weight");
    for (int l = 0; l < args.num_hidden_layers; ++l) {
      const std::string prefix = "model.layers." + std::to_string(l) + ".mlp";
      if (!weights.has(prefix + ".experts.0.up_proj.weight")) continue;
      weights.stack_experts(prefix + ".experts", prefix + ".switch_mlp", args.num_experts,
                            {{"up_proj", "up_proj"}, {"down_proj", "down_proj"}, {"gate_proj", "gate_proj"}},
                            {"weight"});
    }
    sanitize_conv_and_norms(weights, false, true);
  }
  auto factory = [](const Args& a, WeightBinder& w, const std::string& p) -> std::unique_ptr<LinearAttention> {
    return std::make_unique<Qwen3NextGatedDeltaNet>(a, w, p);
  };
  return std::make_unique<HybridModel>(std::move(args), weights, "", factory, SparseLayers::by_step);
}

}  // namespace mlxrt::model::qwen3_next
