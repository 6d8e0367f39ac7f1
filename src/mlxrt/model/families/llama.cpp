// Port of mlx_lm/models/llama.py (mlx-lm 0.32.2). mlx-lm also runs "mistral" (and a few other
// model_types) through this file; the registry routes them here the same way.
#include "mlxrt/model/families/families.h"

#include <algorithm>
#include <cmath>

#include <mlx/ops.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/cache/rotating_kv_cache.h"
#include "mlxrt/model/nn/activations.h"
#include "mlxrt/model/nn/attention.h"
#include "mlxrt/model/nn/linear.h"
#include "mlxrt/model/nn/norm.h"
#include "mlxrt/model/nn/rope.h"

namespace mlxrt::model::llama {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads;
  float rms_norm_eps;
  int vocab_size;
  std::optional<int> head_dim, max_position_embeddings;
  int num_key_value_heads;
  bool attention_bias = false, mlp_bias = false;
  double rope_theta = 10000;
  bool rope_traditional = false;
  json rope_scaling;
  bool tie_word_embeddings = true;
  std::optional<int> sliding_window;
  std::vector<bool> sliding;  // per layer: layer_types[i] == "sliding_attention"

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
    a.head_dim = f.optional<int>("head_dim");
    a.max_position_embeddings = f.optional<int>("max_position_embeddings");
    a.num_key_value_heads = f.value_or<int>("num_key_value_heads", a.num_attention_heads);
    a.attention_bias = f.value_or<bool>("attention_bias", false);
    a.mlp_bias = f.value_or<bool>("mlp_bias", false);
    a.rope_theta = f.value_or<double>("rope_theta", 10000);
    a.rope_traditional = f.value_or<bool>("rope_traditional", false);
    a.rope_scaling = f.has("rope_scaling") ? f.raw()["rope_scaling"] : json();
    a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", true);
    a.sliding_window = f.optional<int>("sliding_window");
    // layer_types (one per layer): "sliding_attention" layers attend over the last sliding_window
    // positions through a RotatingKVCache; the mask of the first full layer serves every full one.
    if (f.has("layer_types")) {
      const auto& types = f.raw()["layer_types"];
      if (!types.is_array() || static_cast<int>(types.size()) != a.num_hidden_layers)
        throw ConfigError(config.source() + ": 'layer_types' must be a list of " +
                          std::to_string(a.num_hidden_layers) + " strings (one per layer)");
      for (const auto& t : types) {
        const auto name = t.is_string() ? t.get<std::string>() : t.dump();
        if (name != "full_attention" && name != "sliding_attention")
          throw UnsupportedError(config.source() + ": layer_types entry " + name + " is not supported by the " +
                                 "llama graph (supported: \"full_attention\", \"sliding_attention\")");
        a.sliding.push_back(name == "sliding_attention");
      }
    } else {
      a.sliding.assign(a.num_hidden_layers, false);
    }
    if (std::find(a.sliding.begin(), a.sliding.end(), false) == a.sliding.end())
      throw ConfigError(config.source() + ": 'layer_types' has no \"full_attention\" layer (mlx-lm's llama " +
                        "needs one)");
    const bool any_sliding = std::find(a.sliding.begin(), a.sliding.end(), true) != a.sliding.end();
    if (any_sliding && (!a.sliding_window || *a.sliding_window < 1))
      throw ConfigError(config.source() + ": 'sliding_window' must be a positive integer when layer_types has " +
                        "\"sliding_attention\" layers");
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
        head_dim(args.head_dim ? *args.head_dim : args.hidden_size / n_heads),
        scale(static_cast<float>(std::pow(static_cast<double>(head_dim), -0.5))),
        q_proj(nn::Linear::load(w, p + ".q_proj", args.hidden_size, n_heads * head_dim, args.attention_bias)),
        k_proj(nn::Linear::load(w, p + ".k_proj", args.hidden_size, n_kv_heads * head_dim, args.attention_bias)),
        v_proj(nn::Linear::load(w, p + ".v_proj", args.hidden_size, n_kv_heads * head_dim, args.attention_bias)),
        o_proj(nn::Linear::load(w, p + ".o_proj", n_heads * head_dim, args.hidden_size, args.attention_bias)),
        rope(nn::Rope::initialize(head_dim, args.rope_theta, args.rope_traditional, args.rope_scaling,
                                  args.max_position_embeddings, w.config().source())) {}

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

struct MLP {
  nn::Linear gate_proj, down_proj, up_proj;
  MLP(const ModelArgs& args, WeightBinder& w, const std::string& p)
      : gate_proj(nn::Linear::load(w, p + ".gate_proj", args.hidden_size, args.intermediate_size, args.mlp_bias)),
        down_proj(nn::Linear::load(w, p + ".down_proj", args.intermediate_size, args.hidden_size, args.mlp_bias)),
        up_proj(nn::Linear::load(w, p + ".up_proj", args.hidden_size, args.intermediate_size, args.mlp_bias)) {}
  mx::array operator()(const mx::array& x) const { return down_proj(nn::swiglu(gate_proj(x), up_proj(x))); }
};

struct TransformerBlock {
  Attention self_attn;
  MLP mlp;
  nn::RMSNorm input_layernorm, post_attention_layernorm;

  TransformerBlock(const ModelArgs& args, WeightBinder& w, const std::string& p)
      : self_attn(args, w, p + ".self_attn"),
        mlp(args, w, p + ".mlp"),
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
  Model(ModelArgs args, WeightBinder& w)
      : args_(std::move(args)),
        embed_tokens_(nn::Embedding::load(w, "model.embed_tokens", args_.vocab_size, args_.hidden_size)),
        norm_(nn::RMSNorm::load(w, "model.norm", args_.hidden_size, args_.rms_norm_eps)) {
    for (int i = 0; i < args_.num_hidden_layers; ++i)
      layers_.emplace_back(args_, w, "model.layers." + std::to_string(i));
    fa_idx_ = std::find(args_.sliding.begin(), args_.sliding.end(), false) - args_.sliding.begin();
    auto swa = std::find(args_.sliding.begin(), args_.sliding.end(), true);
    if (swa != args_.sliding.end()) swa_idx_ = swa - args_.sliding.begin();
    // sanitize(): drop precomputed rotary frequencies and, with a tied head, lm_head.weight.
    w.discard_containing("self_attn.rotary_emb.inv_freq");
    if (args_.tie_word_embeddings) {
      w.discard("lm_head.weight");
    } else {
      lm_head_.emplace(nn::Linear::load(w, "lm_head", args_.hidden_size, args_.vocab_size, false));
    }
  }

  mx::array operator()(const mx::array& inputs, CacheList* cache) override {
    auto h = embed_tokens_(inputs);
    auto layer_cache = [&](size_t i) { return cache ? (*cache)[i].get() : nullptr; };
    auto fa_mask = nn::create_attention_mask(h.shape(1), layer_cache(fa_idx_));
    std::optional<nn::AttentionMask> swa_mask;
    if (swa_idx_) swa_mask = nn::create_attention_mask(h.shape(1), layer_cache(*swa_idx_), args_.sliding_window);
    for (size_t i = 0; i < layers_.size(); ++i)
      h = layers_[i](h, args_.sliding[i] ? *swa_mask : fa_mask, layer_cache(i));
    auto out = norm_(h);
    return lm_head_ ? (*lm_head_)(out) : embed_tokens_.as_linear(out);
  }

  CacheList make_cache() const override {
    CacheList caches;
    for (size_t i = 0; i < layers_.size(); ++i) {
      if (args_.sliding[i]) {
        caches.push_back(std::make_unique<cache::RotatingKVCache>(*args_.sliding_window));
      } else {
        caches.push_back(std::make_unique<cache::KVCache>());
      }
    }
    return caches;
  }
  bool defines_make_cache() const override { return true; }
  std::vector<KvShape> kv_shapes() const override {
    std::vector<KvShape> shapes;
    for (const auto& l : layers_) shapes.push_back({l.self_attn.n_kv_heads, l.self_attn.head_dim, l.self_attn.head_dim});
    return shapes;
  }
  int vocab_size() const override { return args_.vocab_size; }

 private:
  ModelArgs args_;
  nn::Embedding embed_tokens_;
  std::vector<TransformerBlock> layers_;
  nn::RMSNorm norm_;
  std::optional<nn::Linear> lm_head_;
  size_t fa_idx_ = 0;                // first full-attention layer (its cache makes fa_mask)
  std::optional<size_t> swa_idx_;    // first sliding layer, if any
};

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  return std::make_unique<Model>(ModelArgs::from_config(config), weights);
}

}  // namespace mlxrt::model::llama
