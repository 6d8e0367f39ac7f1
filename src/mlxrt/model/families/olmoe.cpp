// Port of mlx_lm/models/olmoe.py (mlx-lm 0.32.2).
#include "mlxrt/model/families/families.h"

#include <cmath>

#include <mlx/ops.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/model/nn/attention.h"
#include "mlxrt/model/nn/linear.h"
#include "mlxrt/model/nn/moe.h"
#include "mlxrt/model/nn/norm.h"
#include "mlxrt/model/nn/rope.h"

namespace mlxrt::model::olmoe {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads;
  float rms_norm_eps;
  int vocab_size, num_experts, num_experts_per_tok;
  bool norm_topk_prob = false;
  std::optional<int> head_dim, max_position_embeddings;
  int num_key_value_heads;
  bool attention_bias = false, mlp_bias = false;
  double rope_theta = 10000;
  bool rope_traditional = false;
  json rope_scaling;
  bool tie_word_embeddings = true;

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    ModelArgs a;
    a.model_type = f.required<std::string>("model_type");
    a.hidden_size = f.required<int>("hidden_size");
    a.num_hidden_layers = f.required<int>("num_hidden_layers");
    a.intermediate_size = f.required<int>("intermediate_size");
    a.num_attention_heads = f.required<int>("num_attention_heads");
    a.rms_norm_eps = f.required<float>("rms_norm_eps");
    a.vocab_size = f.required<int>("vocab_size");
    a.num_experts = f.required<int>("num_experts");
    a.num_experts_per_tok = f.required<int>("num_experts_per_tok");
    a.norm_topk_prob = f.value_or<bool>("norm_topk_prob", false);
    a.head_dim = f.optional<int>("head_dim");
    a.max_position_embeddings = f.optional<int>("max_position_embeddings");
    a.num_key_value_heads = f.value_or<int>("num_key_value_heads", a.num_attention_heads);
    a.attention_bias = f.value_or<bool>("attention_bias", false);
    a.mlp_bias = f.value_or<bool>("mlp_bias", false);
    a.rope_theta = f.value_or<double>("rope_theta", a.rope_theta);
    a.rope_traditional = f.value_or<bool>("rope_traditional", false);
    a.rope_scaling = f.has("rope_scaling") ? f.raw()["rope_scaling"] : json();
    a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", true);
    if (a.num_attention_heads < 1) throw ConfigError(config.source() + ": 'num_attention_heads' must be positive");
    nn::check_expert_counts(a.num_experts, a.num_experts_per_tok, "num_experts", config.source());
    return a;
  }
};

struct Attention {
  int n_heads, n_kv_heads, head_dim;
  float scale;
  nn::Linear q_proj, k_proj, v_proj, o_proj;
  nn::Rope rope;
  nn::RMSNorm q_norm, k_norm;

  Attention(const ModelArgs& args, WeightBinder& w, const std::string& p)
      : n_heads(args.num_attention_heads),
        n_kv_heads(args.num_key_value_heads),
        // `args.head_dim or hidden_size // n_heads`: a head_dim of 0 falls back too.
        head_dim(args.head_dim && *args.head_dim ? *args.head_dim : args.hidden_size / n_heads),
        scale(static_cast<float>(std::pow(static_cast<double>(head_dim), -0.5))),
        q_proj(nn::Linear::load(w, p + ".q_proj", args.hidden_size, n_heads * head_dim, args.attention_bias)),
        k_proj(nn::Linear::load(w, p + ".k_proj", args.hidden_size, n_kv_heads * head_dim, args.attention_bias)),
        v_proj(nn::Linear::load(w, p + ".v_proj", args.hidden_size, n_kv_heads * head_dim, args.attention_bias)),
        o_proj(nn::Linear::load(w, p + ".o_proj", n_heads * head_dim, args.hidden_size, args.attention_bias)),
        rope(nn::Rope::initialize(head_dim, args.rope_theta, args.rope_traditional, args.rope_scaling,
                                  args.max_position_embeddings, w.config().source())),
        // OLMoE normalises the whole query and key projections, before the split into heads.
        q_norm(nn::RMSNorm::load(w, p + ".q_norm", n_heads * head_dim, args.rms_norm_eps)),
        k_norm(nn::RMSNorm::load(w, p + ".k_norm", n_kv_heads * head_dim, args.rms_norm_eps)) {}

  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const {
    const int B = x.shape(0), L = x.shape(1);
    auto queries = q_norm(q_proj(x)), keys = k_norm(k_proj(x)), values = v_proj(x);
    queries = mx::transpose(mx::reshape(queries, {B, L, n_heads, -1}), {0, 2, 1, 3});
    keys = mx::transpose(mx::reshape(keys, {B, L, n_kv_heads, -1}), {0, 2, 1, 3});
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
  o.expert_hidden = a.intermediate_size;
  o.num_experts = a.num_experts;
  o.top_k = a.num_experts_per_tok;
  o.order = nn::RouterOrder::softmax_then_top_k;
  o.how = nn::TopK::negated_head;
  o.norm_topk_prob = a.norm_topk_prob;
  o.expert_bias = a.mlp_bias;
  o.flatten_tokens = true;
  return o;
}

struct DecoderLayer {
  Attention self_attn;
  nn::SparseMoe mlp;
  nn::RMSNorm input_layernorm, post_attention_layernorm;

  DecoderLayer(const ModelArgs& args, WeightBinder& w, const std::string& p)
      : self_attn(args, w, p + ".self_attn"),
        mlp(nn::SparseMoe::load(w, p + ".mlp", moe_options(args))),
        input_layernorm(nn::RMSNorm::load(w, p + ".input_layernorm", args.hidden_size, args.rms_norm_eps)),
        post_attention_layernorm(
            nn::RMSNorm::load(w, p + ".post_attention_layernorm", args.hidden_size, args.rms_norm_eps)) {}

  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const {
    auto r = self_attn(input_layernorm(x), mask, cache);
    auto h = mx::add(x, r);
    r = mlp(post_attention_layernorm(h));
    return mx::add(h, r);
  }
};

class Model final : public CausalLM {
 public:
  Model(ModelArgs args, WeightBinder& w) : args_(std::move(args)) {
    sanitize(w);
    embed_tokens_.emplace(nn::Embedding::load(w, "model.embed_tokens", args_.vocab_size, args_.hidden_size));
    for (int i = 0; i < args_.num_hidden_layers; ++i) layers_.emplace_back(args_, w, "model.layers." + std::to_string(i));
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
    if (layers_.empty()) return {};
    const int head_dim = layers_.front().self_attn.head_dim;
    return std::vector<KvShape>(layers_.size(), {args_.num_key_value_heads, head_dim, head_dim});
  }
  int vocab_size() const override { return args_.vocab_size; }

 private:
  // sanitize(): experts saved one by one (experts.N.{up,down,gate}_proj) are stacked into switch_mlp,
  // quantized tensors included, when layer 0 holds them so. A tied head's saved lm_head.weight is
  // not dropped (olmoe.py's sanitize keeps it, and strict loading then refuses it).
  void sanitize(WeightBinder& w) const {
    if (!w.has("model.layers.0.mlp.experts.0.up_proj.weight")) return;
    for (int l = 0; l < args_.num_hidden_layers; ++l) {
      const std::string prefix = "model.layers." + std::to_string(l) + ".mlp";
      w.stack_experts(prefix + ".experts", prefix + ".switch_mlp", args_.num_experts,
                      {{"up_proj", "up_proj"}, {"down_proj", "down_proj"}, {"gate_proj", "gate_proj"}},
                      {"weight", "scales", "biases"});
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

}  // namespace mlxrt::model::olmoe
