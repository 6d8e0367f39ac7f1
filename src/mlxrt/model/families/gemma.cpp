// Port of mlx_lm/models/gemma.py (mlx-lm 0.32.2): Gemma 1, a llama-shaped decoder with (1 + weight)
// norms, an exact-gelu gated MLP, embeddings scaled by sqrt(hidden_size) and a tied head.
#include "mlxrt/model/families/families.h"

#include <cmath>

#include <mlx/ops.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/model/families/gemma_common.h"
#include "mlxrt/model/nn/activations.h"
#include "mlxrt/model/nn/attention.h"
#include "mlxrt/model/nn/linear.h"
#include "mlxrt/model/nn/norm.h"
#include "mlxrt/model/nn/rope.h"

namespace mlxrt::model::gemma {

namespace {

using nlohmann::json;
using RMSNorm = nn::GemmaRMSNorm;

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads, head_dim;
  float rms_norm_eps;
  int vocab_size, num_key_value_heads;
  double rope_theta = 10000;
  bool rope_traditional = false;

  static ModelArgs from_fields(const JsonFields& f) {
    ModelArgs a;
    a.model_type = f.required<std::string>("model_type");
    a.hidden_size = f.required<int>("hidden_size");
    a.num_hidden_layers = f.required<int>("num_hidden_layers");
    a.intermediate_size = f.required<int>("intermediate_size");
    a.num_attention_heads = f.required<int>("num_attention_heads");
    a.head_dim = f.required<int>("head_dim");
    a.rms_norm_eps = f.required<float>("rms_norm_eps");
    a.vocab_size = f.required<int>("vocab_size");
    a.num_key_value_heads = f.required<int>("num_key_value_heads");
    a.rope_theta = f.value_or<double>("rope_theta", a.rope_theta);
    a.rope_traditional = f.value_or<bool>("rope_traditional", a.rope_traditional);
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
        head_dim(args.head_dim),
        scale(static_cast<float>(std::pow(static_cast<double>(head_dim), -0.5))),
        q_proj(nn::Linear::load(w, p + ".q_proj", args.hidden_size, n_heads * head_dim, false)),
        k_proj(nn::Linear::load(w, p + ".k_proj", args.hidden_size, n_kv_heads * head_dim, false)),
        v_proj(nn::Linear::load(w, p + ".v_proj", args.hidden_size, n_kv_heads * head_dim, false)),
        o_proj(nn::Linear::load(w, p + ".o_proj", n_heads * head_dim, args.hidden_size, false)),
        rope(nn::Rope::initialize(head_dim, args.rope_theta, args.rope_traditional, json(), std::nullopt,
                                  w.config().source())) {}

  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const {
    const int B = x.shape(0), L = x.shape(1);
    auto queries = mx::transpose(mx::reshape(q_proj(x), {B, L, n_heads, -1}), {0, 2, 1, 3});  // [B, H, L, D]
    auto keys = mx::transpose(mx::reshape(k_proj(x), {B, L, n_kv_heads, -1}), {0, 2, 1, 3});
    auto values = mx::transpose(mx::reshape(v_proj(x), {B, L, n_kv_heads, -1}), {0, 2, 1, 3});
    auto kv = nn::rope_and_update_cache(rope, queries, keys, values, cache);
    auto output = nn::scaled_dot_product_attention(queries, kv, scale, mask);
    return o_proj(mx::reshape(mx::transpose(output, {0, 2, 1, 3}), {B, L, -1}));
  }
};

struct TransformerBlock {
  Attention self_attn;
  gemma_common::GatedMLP mlp;
  RMSNorm input_layernorm, post_attention_layernorm;

  TransformerBlock(const ModelArgs& args, WeightBinder& w, const std::string& p)
      : self_attn(args, w, p + ".self_attn"),
        mlp(args.hidden_size, args.intermediate_size, nn::gelu, w, p + ".mlp"),
        input_layernorm(RMSNorm::load(w, p + ".input_layernorm", args.hidden_size, args.rms_norm_eps)),
        post_attention_layernorm(
            RMSNorm::load(w, p + ".post_attention_layernorm", args.hidden_size, args.rms_norm_eps)) {}

  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const {
    auto h = mx::add(x, self_attn(input_layernorm(x), mask, cache));
    return mx::add(h, mlp(post_attention_layernorm(h)));
  }
};

class Model final : public CausalLM {
 public:
  Model(ModelArgs args, WeightBinder& w)
      : args_(std::move(args)),
        embed_tokens_(nn::Embedding::load(w, "model.embed_tokens", args_.vocab_size, args_.hidden_size)),
        norm_(RMSNorm::load(w, "model.norm", args_.hidden_size, args_.rms_norm_eps)) {
    for (int i = 0; i < args_.num_hidden_layers; ++i)
      layers_.emplace_back(args_, w, "model.layers." + std::to_string(i));
  }

  mx::array operator()(const mx::array& inputs, CacheList* cache) override {
    auto out = hidden_states(inputs, cache);
    return embed_tokens_.as_linear(out);
  }

  /** model.model(...): the final norm's output, what the head reads. */
  mx::array hidden_states(const mx::array& inputs, CacheList* cache) override {
    auto h = gemma_common::scale_embeddings(embed_tokens_(inputs), args_.hidden_size);  // [B, L, hidden]
    auto layer_cache = [&](size_t i) { return cache ? (*cache)[i].get() : nullptr; };
    auto mask = nn::create_attention_mask(h.shape(1), layer_cache(0));
    for (size_t i = 0; i < layers_.size(); ++i) h = layers_[i](h, mask, layer_cache(i));
    return norm_(h);
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
  ModelArgs args_;
  nn::Embedding embed_tokens_;
  std::vector<TransformerBlock> layers_;
  RMSNorm norm_;
};

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  return std::make_unique<Model>(ModelArgs::from_fields(config.fields()), weights);
}

}  // namespace mlxrt::model::gemma
