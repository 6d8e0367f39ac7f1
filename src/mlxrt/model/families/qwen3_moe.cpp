// Port of mlx_lm/models/qwen3_moe.py (mlx-lm 0.32.2).
#include "mlxrt/model/families/families.h"

#include <algorithm>
#include <cmath>
#include <variant>

#include <mlx/ops.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/model/nn/attention.h"
#include "mlxrt/model/nn/linear.h"
#include "mlxrt/model/nn/moe.h"
#include "mlxrt/model/nn/norm.h"
#include "mlxrt/model/nn/rope.h"

namespace mlxrt::model::qwen3_moe {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads;
  int num_experts, num_experts_per_tok, decoder_sparse_step;
  std::vector<int> mlp_only_layers;
  int moe_intermediate_size;
  float rms_norm_eps;
  int vocab_size, num_key_value_heads, head_dim;
  double rope_theta;
  bool tie_word_embeddings;
  int max_position_embeddings;
  bool norm_topk_prob;

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    ModelArgs a;
    a.model_type = f.required<std::string>("model_type");
    a.hidden_size = f.required<int>("hidden_size");
    a.num_hidden_layers = f.required<int>("num_hidden_layers");
    a.intermediate_size = f.required<int>("intermediate_size");
    a.num_attention_heads = f.required<int>("num_attention_heads");
    a.num_experts = f.required<int>("num_experts");
    a.num_experts_per_tok = f.required<int>("num_experts_per_tok");
    a.decoder_sparse_step = f.required<int>("decoder_sparse_step");
    const json& only = f.has("mlp_only_layers") ? f.raw()["mlp_only_layers"] : json();
    if (!only.is_array()) throw ConfigError(config.source() + ": 'mlp_only_layers' must be a list of layer indices");
    for (const auto& i : only) {
      if (!i.is_number_integer())
        throw ConfigError(config.source() + ": 'mlp_only_layers' must be a list of layer indices, got " + i.dump());
      a.mlp_only_layers.push_back(i.get<int>());
    }
    a.moe_intermediate_size = f.required<int>("moe_intermediate_size");
    a.rms_norm_eps = f.required<float>("rms_norm_eps");
    a.vocab_size = f.required<int>("vocab_size");
    a.num_key_value_heads = f.required<int>("num_key_value_heads");
    a.head_dim = f.required<int>("head_dim");
    a.rope_theta = f.required<double>("rope_theta");
    a.tie_word_embeddings = f.required<bool>("tie_word_embeddings");
    a.max_position_embeddings = f.required<int>("max_position_embeddings");
    a.norm_topk_prob = f.required<bool>("norm_topk_prob");
    if (a.num_experts > 0 && a.decoder_sparse_step < 1)
      throw ConfigError(config.source() + ": 'decoder_sparse_step' must be a positive integer, got " +
                        std::to_string(a.decoder_sparse_step));
    if (a.num_experts < 0) throw ConfigError(config.source() + ": 'num_experts' must not be negative");
    if (a.num_experts > 0) nn::check_expert_counts(a.num_experts, a.num_experts_per_tok, "num_experts", config.source());
    return a;
  }

  bool sparse(int layer) const {
    return std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) == mlp_only_layers.end() &&
           num_experts > 0 && (layer + 1) % decoder_sparse_step == 0;
  }
};

struct Attention {
  int n_heads, n_kv_heads;
  float scale;
  nn::Linear q_proj, k_proj, v_proj, o_proj;
  nn::RMSNorm q_norm, k_norm;
  nn::Rope rope;

  Attention(const ModelArgs& args, WeightBinder& w, const std::string& p)
      : n_heads(args.num_attention_heads),
        n_kv_heads(args.num_key_value_heads),
        scale(static_cast<float>(std::pow(static_cast<double>(args.head_dim), -0.5))),
        q_proj(nn::Linear::load(w, p + ".q_proj", args.hidden_size, n_heads * args.head_dim, false)),
        k_proj(nn::Linear::load(w, p + ".k_proj", args.hidden_size, n_kv_heads * args.head_dim, false)),
        v_proj(nn::Linear::load(w, p + ".v_proj", args.hidden_size, n_kv_heads * args.head_dim, false)),
        o_proj(nn::Linear::load(w, p + ".o_proj", n_heads * args.head_dim, args.hidden_size, false)),
        q_norm(nn::RMSNorm::load(w, p + ".q_norm", args.head_dim, args.rms_norm_eps)),
        k_norm(nn::RMSNorm::load(w, p + ".k_norm", args.head_dim, args.rms_norm_eps)),
        // qwen3_moe.py builds a plain nn.RoPE: rope_scaling is read but not used.
        rope(nn::Rope::initialize(args.head_dim, args.rope_theta, false, json(), std::nullopt,
                                  w.config().source())) {}

  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const {
    const int B = x.shape(0), L = x.shape(1);
    auto queries = q_proj(x), keys = k_proj(x), values = v_proj(x);
    queries = mx::transpose(q_norm(mx::reshape(queries, {B, L, n_heads, -1})), {0, 2, 1, 3});
    keys = mx::transpose(k_norm(mx::reshape(keys, {B, L, n_kv_heads, -1})), {0, 2, 1, 3});
    values = mx::transpose(mx::reshape(values, {B, L, n_kv_heads, -1}), {0, 2, 1, 3});
    auto kv = nn::rope_and_update_cache(rope, queries, keys, values, cache);
    auto output = nn::scaled_dot_product_attention(queries, kv, scale, mask);
    output = mx::reshape(mx::transpose(output, {0, 2, 1, 3}), {B, L, -1});
    return o_proj(output);
  }
};

nn::SparseMoeOptions moe_options(const ModelArgs& a) {
  nn::SparseMoeOptions o;
  o.hidden_size = a.hidden_size;
  o.expert_hidden = a.moe_intermediate_size;
  o.num_experts = a.num_experts;
  o.top_k = a.num_experts_per_tok;
  o.order = nn::RouterOrder::softmax_then_top_k;
  o.how = nn::TopK::partition_tail;
  o.norm_topk_prob = a.norm_topk_prob;
  o.cast_to_input_dtype = true;
  return o;
}

struct DecoderLayer {
  Attention self_attn;
  std::variant<nn::SparseMoe, nn::GluMLP> mlp;
  nn::RMSNorm input_layernorm, post_attention_layernorm;

  static std::variant<nn::SparseMoe, nn::GluMLP> make_mlp(const ModelArgs& a, WeightBinder& w, const std::string& p,
                                                         int layer) {
    if (a.sparse(layer)) return nn::SparseMoe::load(w, p, moe_options(a));
    return nn::GluMLP::load(w, p, a.hidden_size, a.intermediate_size);
  }

  DecoderLayer(const ModelArgs& args, WeightBinder& w, const std::string& p, int layer)
      : self_attn(args, w, p + ".self_attn"),
        mlp(make_mlp(args, w, p + ".mlp", layer)),
        input_layernorm(nn::RMSNorm::load(w, p + ".input_layernorm", args.hidden_size, args.rms_norm_eps)),
        post_attention_layernorm(
            nn::RMSNorm::load(w, p + ".post_attention_layernorm", args.hidden_size, args.rms_norm_eps)) {}

  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const {
    auto r = self_attn(input_layernorm(x), mask, cache);
    auto h = mx::add(x, r);
    r = std::visit([&](const auto& m) { return m(post_attention_layernorm(h)); }, mlp);
    return mx::add(h, r);
  }
};

class Model final : public CausalLM {
 public:
  Model(ModelArgs args, WeightBinder& w) : args_(std::move(args)) {
    sanitize(w);
    embed_tokens_.emplace(nn::Embedding::load(w, "model.embed_tokens", args_.vocab_size, args_.hidden_size));
    for (int i = 0; i < args_.num_hidden_layers; ++i)
      layers_.emplace_back(args_, w, "model.layers." + std::to_string(i), i);
    norm_.emplace(nn::RMSNorm::load(w, "model.norm", args_.hidden_size, args_.rms_norm_eps));
    if (!args_.tie_word_embeddings)
      lm_head_.emplace(nn::Linear::load(w, "lm_head", args_.hidden_size, args_.vocab_size, false));
  }

  mx::array operator()(const mx::array& inputs, CacheList* cache) override {
    auto out = hidden_states(inputs, cache);
    return lm_head_ ? (*lm_head_)(out) : embed_tokens_->as_linear(out);
  }

  /** model.model(...): the final norm's output, what the head reads. */
  mx::array hidden_states(const mx::array& inputs, CacheList* cache) override {
    auto h = (*embed_tokens_)(inputs);
    auto mask = nn::create_attention_mask(h.shape(1), cache ? (*cache)[0].get() : nullptr);
    for (size_t i = 0; i < layers_.size(); ++i) h = layers_[i](h, mask, cache ? (*cache)[i].get() : nullptr);
    return (*norm_)(h);
  }
  bool has_hidden_states() const override { return true; }

  CacheList make_cache() const override {
    CacheList caches;
    for (size_t i = 0; i < layers_.size(); ++i) caches.push_back(std::make_unique<cache::KVCache>());
    return caches;
  }
  std::vector<KvShape> kv_shapes() const override {
    return std::vector<KvShape>(layers_.size(), {args_.num_key_value_heads, args_.head_dim, args_.head_dim});
  }
  int vocab_size() const override { return args_.vocab_size; }

 private:
  // sanitize(): a tied head drops lm_head.weight; experts saved one by one (experts.N.*_proj.weight)
  // are stacked into switch_mlp, for the layers that hold them.
  void sanitize(WeightBinder& w) const {
    if (args_.tie_word_embeddings) w.discard("lm_head.weight");
    for (int l = 0; l < args_.num_hidden_layers; ++l) {
      const std::string prefix = "model.layers." + std::to_string(l) + ".mlp";
      if (!w.has(prefix + ".experts.0.up_proj.weight")) continue;
      w.stack_experts(prefix + ".experts", prefix + ".switch_mlp", args_.num_experts,
                      {{"up_proj", "up_proj"}, {"down_proj", "down_proj"}, {"gate_proj", "gate_proj"}}, {"weight"});
    }
  }

  ModelArgs args_;
  std::optional<nn::Embedding> embed_tokens_;
  std::vector<DecoderLayer> layers_;
  std::optional<nn::RMSNorm> norm_;
  std::optional<nn::Linear> lm_head_;
};

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  return std::make_unique<Model>(ModelArgs::from_config(config), weights);
}

}  // namespace mlxrt::model::qwen3_moe
