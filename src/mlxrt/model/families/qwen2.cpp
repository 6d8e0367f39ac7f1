// Port of mlx_lm/models/qwen2.py (mlx-lm 0.32.2): llama's layout with biases on q/k/v (none on
// o_proj or the MLP), head_dim always hidden_size / num_attention_heads, and qwen2.py's own
// ModelArgs defaults (rope_theta 1e6, max_position_embeddings 32768, tied head).
#include "mlxrt/model/families/families.h"

#include <cmath>

#include <mlx/ops.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/model/nn/activations.h"
#include "mlxrt/model/nn/attention.h"
#include "mlxrt/model/nn/linear.h"
#include "mlxrt/model/nn/norm.h"
#include "mlxrt/model/nn/rope.h"

namespace mlxrt::model::qwen2 {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, num_hidden_layers, intermediate_size, num_attention_heads;
  float rms_norm_eps;
  int vocab_size, num_key_value_heads;
  int max_position_embeddings = 32768;
  double rope_theta = 1000000;
  bool rope_traditional = false;
  json rope_scaling;
  bool tie_word_embeddings = true;

  // qwen2.py's dataclass knows neither head_dim nor rope_parameters: both are ignored, as there.
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
    a.num_key_value_heads = f.required<int>("num_key_value_heads");
    a.max_position_embeddings = f.value_or<int>("max_position_embeddings", 32768);
    a.rope_theta = f.value_or<double>("rope_theta", 1000000);
    a.rope_traditional = f.value_or<bool>("rope_traditional", false);
    a.rope_scaling = f.has("rope_scaling") ? f.raw()["rope_scaling"] : json();
    a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", true);
    // head_dim is hidden_size // num_attention_heads (floor, as in Python); a zero divisor fails there too.
    if (a.num_attention_heads < 1)
      throw ConfigError(config.source() + ": num_attention_heads must be a positive integer");
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
        q_proj(nn::Linear::load(w, p + ".q_proj", args.hidden_size, n_heads * head_dim, true)),
        k_proj(nn::Linear::load(w, p + ".k_proj", args.hidden_size, n_kv_heads * head_dim, true)),
        v_proj(nn::Linear::load(w, p + ".v_proj", args.hidden_size, n_kv_heads * head_dim, true)),
        o_proj(nn::Linear::load(w, p + ".o_proj", n_heads * head_dim, args.hidden_size, false)),
        rope(nn::Rope::initialize(head_dim, args.rope_theta, args.rope_traditional, args.rope_scaling,
                                  args.max_position_embeddings, w.config().source())) {}

  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const {
    const int B = x.shape(0), L = x.shape(1);
    auto queries = q_proj(x), keys = k_proj(x), values = v_proj(x);
    queries = mx::transpose(mx::reshape(queries, {B, L, n_heads, -1}), {0, 2, 1, 3});  // [B, H, L, D]
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
  MLP(int dim, int hidden, WeightBinder& w, const std::string& p)
      : gate_proj(nn::Linear::load(w, p + ".gate_proj", dim, hidden, false)),
        down_proj(nn::Linear::load(w, p + ".down_proj", hidden, dim, false)),
        up_proj(nn::Linear::load(w, p + ".up_proj", dim, hidden, false)) {}
  mx::array operator()(const mx::array& x) const { return down_proj(nn::swiglu(gate_proj(x), up_proj(x))); }
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
    // sanitize(): a tied head drops lm_head.weight; precomputed rotary frequencies are dropped.
    if (args_.tie_word_embeddings) w.discard("lm_head.weight");
    w.discard_containing("self_attn.rotary_emb.inv_freq");
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

}  // namespace mlxrt::model::qwen2
