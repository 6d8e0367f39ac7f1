// Port of mlx_lm/models/mixtral.py (mlx-lm 0.32.2).
#include "mlxrt/model/families/families.h"

#include <cmath>

#include <mlx/ops.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/model/nn/attention.h"
#include "mlxrt/model/nn/linear.h"
#include "mlxrt/model/nn/moe.h"
#include "mlxrt/model/nn/norm.h"
#include "mlxrt/model/nn/rope.h"

namespace mlxrt::model::mixtral {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int vocab_size = 32000, hidden_size = 4096, intermediate_size = 14336, num_hidden_layers = 32;
  int num_attention_heads = 32, num_experts_per_tok = 2, num_key_value_heads = 8, num_local_experts = 8;
  float rms_norm_eps = 1e-5f;
  double rope_theta = 1e6;
  bool rope_traditional = false;
  bool tie_word_embeddings = false;

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    ModelArgs a;
    a.model_type = f.required<std::string>("model_type");
    a.vocab_size = f.value_or<int>("vocab_size", a.vocab_size);
    a.hidden_size = f.value_or<int>("hidden_size", a.hidden_size);
    a.intermediate_size = f.value_or<int>("intermediate_size", a.intermediate_size);
    a.num_hidden_layers = f.value_or<int>("num_hidden_layers", a.num_hidden_layers);
    a.num_attention_heads = f.value_or<int>("num_attention_heads", a.num_attention_heads);
    a.num_experts_per_tok = f.value_or<int>("num_experts_per_tok", a.num_experts_per_tok);
    // An explicit null means "as many as the query heads" (__post_init__); absent means the default 8.
    const bool kv_null = f.raw().contains("num_key_value_heads") && f.raw()["num_key_value_heads"].is_null();
    a.num_key_value_heads = kv_null ? a.num_attention_heads : f.value_or<int>("num_key_value_heads", 8);
    a.num_local_experts = f.value_or<int>("num_local_experts", a.num_local_experts);
    a.rms_norm_eps = f.value_or<float>("rms_norm_eps", a.rms_norm_eps);
    a.rope_theta = f.value_or<double>("rope_theta", a.rope_theta);
    a.rope_traditional = f.value_or<bool>("rope_traditional", false);
    a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", false);
    if (a.num_attention_heads < 1 || a.hidden_size % a.num_attention_heads != 0)
      throw ConfigError(config.source() + ": 'num_attention_heads' must divide 'hidden_size'");
    nn::check_expert_counts(a.num_local_experts, a.num_experts_per_tok, "num_local_experts", config.source());
    return a;
  }
};

struct Attention {
  int n_heads, n_kv_heads, head_dim;
  float scale;
  nn::Linear q_proj, k_proj, v_proj, o_proj;
  nn::Rope rope;

  Attention(const ModelArgs& args, WeightBinder& w, const std::string& p)
      : n_heads(args.num_attention_heads),
        n_kv_heads(args.num_key_value_heads),
        head_dim(args.hidden_size / n_heads),
        scale(static_cast<float>(std::pow(static_cast<double>(head_dim), -0.5))),
        q_proj(nn::Linear::load(w, p + ".q_proj", args.hidden_size, n_heads * head_dim, false)),
        k_proj(nn::Linear::load(w, p + ".k_proj", args.hidden_size, n_kv_heads * head_dim, false)),
        v_proj(nn::Linear::load(w, p + ".v_proj", args.hidden_size, n_kv_heads * head_dim, false)),
        o_proj(nn::Linear::load(w, p + ".o_proj", n_heads * head_dim, args.hidden_size, false)),
        // mixtral.py builds a plain nn.RoPE (rope_scaling is not used).
        rope(nn::Rope::initialize(head_dim, args.rope_theta, args.rope_traditional, json(), std::nullopt,
                                  w.config().source())) {}

  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const {
    const int B = x.shape(0), L = x.shape(1);
    auto queries = q_proj(x), keys = k_proj(x), values = v_proj(x);
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
  o.num_experts = a.num_local_experts;
  o.top_k = a.num_experts_per_tok;
  o.order = nn::RouterOrder::top_k_then_softmax;
  o.how = nn::TopK::negated_head;
  return o;
}

struct DecoderLayer {
  Attention self_attn;
  nn::SparseMoe block_sparse_moe;
  nn::RMSNorm input_layernorm, post_attention_layernorm;

  DecoderLayer(const ModelArgs& args, WeightBinder& w, const std::string& p)
      : self_attn(args, w, p + ".self_attn"),
        block_sparse_moe(nn::SparseMoe::load(w, p + ".block_sparse_moe", moe_options(args))),
        input_layernorm(nn::RMSNorm::load(w, p + ".input_layernorm", args.hidden_size, args.rms_norm_eps)),
        post_attention_layernorm(
            nn::RMSNorm::load(w, p + ".post_attention_layernorm", args.hidden_size, args.rms_norm_eps)) {}

  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const {
    auto r = self_attn(input_layernorm(x), mask, cache);
    auto h = mx::add(x, r);
    r = block_sparse_moe(post_attention_layernorm(h));
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
    const int head_dim = args_.hidden_size / args_.num_attention_heads;
    return std::vector<KvShape>(layers_.size(), {args_.num_key_value_heads, head_dim, head_dim});
  }
  int vocab_size() const override { return args_.vocab_size; }

 private:
  // sanitize(): a tied head drops lm_head.weight; experts saved one by one (experts.N.w1/w2/w3) are
  // stacked into switch_mlp's gate_proj/down_proj/up_proj, quantized tensors included.
  void sanitize(WeightBinder& w) const {
    if (args_.tie_word_embeddings) w.discard("lm_head.weight");
    if (!w.has("model.layers.0.block_sparse_moe.experts.0.w1.weight")) return;
    for (int l = 0; l < args_.num_hidden_layers; ++l) {
      const std::string prefix = "model.layers." + std::to_string(l) + ".block_sparse_moe";
      w.stack_experts(prefix + ".experts", prefix + ".switch_mlp", args_.num_local_experts,
                      {{"w1", "gate_proj"}, {"w2", "down_proj"}, {"w3", "up_proj"}}, {"weight", "scales", "biases"});
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

}  // namespace mlxrt::model::mixtral
