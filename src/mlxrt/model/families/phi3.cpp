// Port of mlx_lm/models/phi3.py (mlx-lm 0.32.2): Phi-3, Phi-3.5 and Phi-4-mini. One fused
// qkv_proj split into queries, keys and values; one fused gate_up_proj split in halves (gate
// first); partial rotary embeddings; SuScaledRoPE for "longrope"/"su" scaling, built from the
// config's top-level max_position_embeddings and original_max_position_embeddings. phi3.py has
// no sanitize: the checkpoint must hold exactly the model's parameters.
#include "mlxrt/model/families/families.h"

#include <cmath>

#include <mlx/ops.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/model/nn/activations.h"
#include "mlxrt/model/nn/attention.h"
#include "mlxrt/model/nn/linear.h"
#include "mlxrt/model/nn/norm.h"
#include "mlxrt/model/nn/rope.h"

namespace mlxrt::model::phi3 {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads;
  float rms_norm_eps;
  int vocab_size, num_key_value_heads;
  double rope_theta = 10000;
  bool rope_traditional = false;
  json rope_scaling;  // null, or an object with "type" and "long_factor"
  std::string rope_type;  // "longrope", "su", "linear", or empty (plain RoPE)
  double partial_rotary_factor = 1.0;
  int max_position_embeddings = 131072;
  int original_max_position_embeddings = 4096;
  bool tie_word_embeddings = false;

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    const auto& src = config.source();
    ModelArgs a;
    a.model_type = f.required<std::string>("model_type");
    a.hidden_size = f.required<int>("hidden_size");
    a.num_hidden_layers = f.required<int>("num_hidden_layers");
    a.intermediate_size = f.required<int>("intermediate_size");
    a.num_attention_heads = f.required<int>("num_attention_heads");
    a.rms_norm_eps = f.required<float>("rms_norm_eps");
    a.vocab_size = f.required<int>("vocab_size");
    a.num_key_value_heads = f.value_or<int>("num_key_value_heads", a.num_attention_heads);
    a.rope_theta = f.value_or<double>("rope_theta", 10000);
    a.rope_traditional = f.value_or<bool>("rope_traditional", false);
    a.partial_rotary_factor = f.value_or<double>("partial_rotary_factor", 1.0);
    a.max_position_embeddings = f.value_or<int>("max_position_embeddings", 131072);
    a.original_max_position_embeddings = f.value_or<int>("original_max_position_embeddings", 4096);
    a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", false);
    if (a.num_attention_heads < 1)
      throw ConfigError(src + ": num_attention_heads must be a positive integer");
    a.read_rope_scaling(f.raw().contains("rope_scaling") ? f.raw()["rope_scaling"] : json(), src);
    return a;
  }

  // __post_init__: a non-empty rope_scaling must name "type" and "long_factor"; a type other than
  // longrope, su or linear is dropped (phi3.py warns and uses a plain RoPE).
  void read_rope_scaling(const json& s, const std::string& src) {
    const bool truthy = !s.is_null() && !(s.is_object() && s.empty()) && !(s.is_boolean() && !s.get<bool>());
    if (!truthy) return;
    if (!s.is_object()) throw ConfigError(src + ": rope_scaling must be an object or null");
    if (!s.contains("long_factor") || !s.contains("type"))
      throw ConfigError(src + ": rope_scaling must contain keys {'long_factor', 'type'}");
    const json& t = s["type"];
    const std::string type = t.is_string() ? t.get<std::string>() : std::string();
    if (type != "longrope" && type != "su" && type != "linear") return;
    rope_scaling = s;
    rope_type = type;
    if (type == "linear" && !(s.contains("factor") && s["factor"].is_number_float()))
      throw ConfigError(src + ": rope_scaling.factor must be a float for linear scaling");
    if (type != "linear" && !s.contains("short_factor"))
      throw ConfigError(src + ": rope_scaling.short_factor is required for " + type + " scaling");
  }
};

nn::Rope make_rope(const ModelArgs& args, int head_dim, const std::string& source) {
  const int rope_dim = static_cast<int>(head_dim * args.partial_rotary_factor);
  if (args.rope_type == "longrope" || args.rope_type == "su")
    return nn::Rope::su_scaled(rope_dim, args.rope_theta, args.max_position_embeddings,
                               args.original_max_position_embeddings, args.rope_scaling["long_factor"], 0, source);
  json plain = json::object({{"type", "default"}});
  if (args.rope_type == "linear") plain = json::object({{"type", "linear"}, {"factor", args.rope_scaling["factor"]}});
  return nn::Rope::initialize(rope_dim, args.rope_theta, args.rope_traditional, plain, std::nullopt, source);
}

struct Attention {
  int n_heads, n_kv_heads, head_dim;
  float scale;
  nn::Linear qkv_proj, o_proj;
  nn::Rope rope;

  Attention(const ModelArgs& args, WeightBinder& w, const std::string& p)
      : n_heads(args.num_attention_heads),
        n_kv_heads(args.num_key_value_heads),
        head_dim(args.hidden_size / n_heads),
        scale(static_cast<float>(std::pow(static_cast<double>(head_dim), -0.5))),
        qkv_proj(nn::Linear::load(w, p + ".qkv_proj", args.hidden_size,
                                  n_heads * head_dim + 2 * (n_kv_heads * head_dim), false)),
        o_proj(nn::Linear::load(w, p + ".o_proj", n_heads * head_dim, args.hidden_size, false)),
        rope(make_rope(args, head_dim, w.config().source())) {}

  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const {
    const int B = x.shape(0), L = x.shape(1);
    auto qkv = qkv_proj(x);
    const int query_pos = n_heads * head_dim;
    auto parts = mx::split(qkv, mx::Shape{query_pos, query_pos + n_kv_heads * head_dim}, -1);
    auto queries = mx::transpose(mx::reshape(parts[0], {B, L, n_heads, -1}), {0, 2, 1, 3});  // [B, H, L, D]
    auto keys = mx::transpose(mx::reshape(parts[1], {B, L, n_kv_heads, -1}), {0, 2, 1, 3});
    auto values = mx::transpose(mx::reshape(parts[2], {B, L, n_kv_heads, -1}), {0, 2, 1, 3});
    auto kv = nn::rope_and_update_cache(rope, queries, keys, values, cache);
    auto output = nn::scaled_dot_product_attention(queries, kv, scale, mask);
    output = mx::reshape(mx::transpose(output, {0, 2, 1, 3}), {B, L, -1});
    return o_proj(output);
  }
};

struct MLP {
  nn::Linear gate_up_proj, down_proj;
  MLP(int dim, int hidden, WeightBinder& w, const std::string& p)
      : gate_up_proj(nn::Linear::load(w, p + ".gate_up_proj", dim, 2 * hidden, false)),
        down_proj(nn::Linear::load(w, p + ".down_proj", hidden, dim, false)) {}
  mx::array operator()(const mx::array& x) const {
    auto halves = mx::split(gate_up_proj(x), 2, -1);  // gate, x
    return down_proj(nn::swiglu(halves[0], halves[1]));
  }
};

struct TransformerBlock {
  Attention self_attn;
  MLP mlp;
  nn::RMSNorm input_layernorm, post_attention_layernorm;

  TransformerBlock(const ModelArgs& args, WeightBinder& w, const std::string& p)
      : self_attn(args, w, p + ".self_attn"),
        mlp(args.hidden_size, args.intermediate_size, w, p + ".mlp"),
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
    if (!args_.tie_word_embeddings)
      lm_head_.emplace(nn::Linear::load(w, "lm_head", args_.hidden_size, args_.vocab_size, false));
  }

  mx::array operator()(const mx::array& inputs, CacheList* cache) override {
    auto h = embed_tokens_(inputs);
    auto mask = nn::create_attention_mask(h.shape(1), cache ? (*cache)[0].get() : nullptr);
    for (size_t i = 0; i < layers_.size(); ++i) h = layers_[i](h, mask, cache ? (*cache)[i].get() : nullptr);
    auto out = norm_(h);
    return lm_head_ ? (*lm_head_)(out) : embed_tokens_.as_linear(out);
  }

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
  ModelArgs args_;
  nn::Embedding embed_tokens_;
  std::vector<TransformerBlock> layers_;
  nn::RMSNorm norm_;
  std::optional<nn::Linear> lm_head_;
};

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  return std::make_unique<Model>(ModelArgs::from_config(config), weights);
}

}  // namespace mlxrt::model::phi3
