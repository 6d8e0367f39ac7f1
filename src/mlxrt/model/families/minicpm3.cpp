// Port of mlx_lm/models/minicpm3.py (mlx-lm 0.32.2): MiniCPM's scalings (embeddings times scale_emb,
// each sublayer's output times scale_depth / sqrt(num_hidden_layers), an untied head's input divided
// by hidden_size / dim_model_base) around multi-head latent attention: queries through a low-rank
// q_a_proj / q_a_layernorm / q_b_proj, keys and values from a compressed kv_a_proj_with_mqa whose
// last qk_rope_head_dim features are one RoPE'd key shared by every head, SuScaledRoPE from
// rope_scaling. No make_cache, no sanitize.
#include <cmath>

#include <mlx/ops.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/model/families/families.h"
#include "mlxrt/model/families/minicpm3.h"
#include "mlxrt/model/nn/decoder.h"

namespace mlxrt::model::minicpm3 {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int hidden_size, dim_model_base, num_hidden_layers, intermediate_size, num_attention_heads;
  float rms_norm_eps;
  int vocab_size, q_lora_rank, qk_nope_head_dim, qk_rope_head_dim, kv_lora_rank;
  double scale_depth, scale_emb;
  int max_position_embeddings;
  bool attention_bias = false;
  double rope_theta = 1000000.0;
  json rope_scaling;
  bool tie_word_embeddings = false;

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    const auto& source = config.source();
    ModelArgs a;
    a.model_type = f.required<std::string>("model_type");
    a.hidden_size = f.required<int>("hidden_size");
    a.dim_model_base = f.required<int>("dim_model_base");
    a.num_hidden_layers = f.required<int>("num_hidden_layers");
    a.intermediate_size = f.required<int>("intermediate_size");
    a.num_attention_heads = f.required<int>("num_attention_heads");
    a.rms_norm_eps = f.required<float>("rms_norm_eps");
    a.vocab_size = f.required<int>("vocab_size");
    // Required by the dataclass, read by no layer (every head shares the one RoPE'd key).
    if (!f.raw().contains("num_key_value_heads"))
      throw ConfigError(source + ": missing required key 'num_key_value_heads'");
    a.q_lora_rank = f.required<int>("q_lora_rank");
    a.qk_nope_head_dim = f.required<int>("qk_nope_head_dim");
    a.qk_rope_head_dim = f.required<int>("qk_rope_head_dim");
    a.kv_lora_rank = f.required<int>("kv_lora_rank");
    a.scale_depth = f.required<double>("scale_depth");
    a.scale_emb = f.required<double>("scale_emb");
    a.max_position_embeddings = f.required<int>("max_position_embeddings");
    a.attention_bias = f.value_or<bool>("attention_bias", false);
    a.rope_theta = f.value_or<double>("rope_theta", 1000000.0);
    a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", false);
    // Attention reads rope_scaling.get(...): without an object mlx-lm fails building the model.
    if (!f.has("rope_scaling") || !f.raw()["rope_scaling"].is_object())
      throw ConfigError(source + ": 'rope_scaling' must be an object (minicpm3's SuScaledRoPE reads " +
                        "original_max_position_embeddings and long_factor from it)");
    a.rope_scaling = f.raw()["rope_scaling"];
    auto positive = [&](const char* name, int v) {
      if (v < 1) throw ConfigError(source + ": '" + name + "' must be a positive integer, got " + std::to_string(v));
    };
    positive("hidden_size", a.hidden_size);
    positive("num_hidden_layers", a.num_hidden_layers);
    positive("num_attention_heads", a.num_attention_heads);
    positive("vocab_size", a.vocab_size);
    positive("q_lora_rank", a.q_lora_rank);
    positive("kv_lora_rank", a.kv_lora_rank);
    positive("qk_rope_head_dim", a.qk_rope_head_dim);
    if (a.qk_nope_head_dim < 0)
      throw ConfigError(source + ": 'qk_nope_head_dim' must not be negative, got " + std::to_string(a.qk_nope_head_dim));
    if (a.qk_rope_head_dim % 2 != 0)
      throw ConfigError(source + ": 'qk_rope_head_dim' must be even (RoPE rotates pairs), got " +
                        std::to_string(a.qk_rope_head_dim));
    if (a.hidden_size < a.num_attention_heads)
      throw ConfigError(source + ": 'hidden_size' (" + std::to_string(a.hidden_size) + ") leaves no value head size " +
                        "for " + std::to_string(a.num_attention_heads) + " 'num_attention_heads'");
    if (!a.tie_word_embeddings && a.dim_model_base == 0)
      throw ConfigError(source + ": 'dim_model_base' must not be 0 (the head divides by hidden_size / dim_model_base)");
    return a;
  }
};

double number_or(const json& obj, const char* key, double fallback, const std::string& source) {
  if (!obj.contains(key)) return fallback;
  if (!obj[key].is_number())
    throw ConfigError(source + ": rope_scaling." + key + " must be a number, got " + json_type_name(obj[key]));
  return obj[key].get<double>();
}

// Attention: multi-head latent attention with its caches' keys [B, H, L, nope + rope] and values
// [B, H, L, hidden / heads].
class Attention {
 public:
  Attention(const ModelArgs& a, WeightBinder& w, const std::string& p)
      : num_heads_(a.num_attention_heads),
        qk_nope_head_dim_(a.qk_nope_head_dim),
        qk_rope_head_dim_(a.qk_rope_head_dim),
        kv_lora_rank_(a.kv_lora_rank),
        softmax_scale_(nn::default_scale(a.qk_nope_head_dim + a.qk_rope_head_dim)),
        q_a_proj_(nn::Linear::load(w, p + ".q_a_proj", a.hidden_size, a.q_lora_rank, a.attention_bias)),
        // nn.RMSNorm(q_lora_rank) and nn.RMSNorm(kv_lora_rank): mlx's default eps, 1e-5.
        q_a_layernorm_(nn::Norm::load(w, p + ".q_a_layernorm", a.q_lora_rank, 1e-5f)),
        q_b_proj_(nn::Linear::load(w, p + ".q_b_proj", a.q_lora_rank,
                                   num_heads_ * (qk_nope_head_dim_ + qk_rope_head_dim_), false)),
        kv_a_proj_with_mqa_(nn::Linear::load(w, p + ".kv_a_proj_with_mqa", a.hidden_size,
                                             a.kv_lora_rank + a.qk_rope_head_dim, a.attention_bias)),
        kv_a_layernorm_(nn::Norm::load(w, p + ".kv_a_layernorm", a.kv_lora_rank, 1e-5f)),
        kv_b_proj_(nn::Linear::load(w, p + ".kv_b_proj", a.kv_lora_rank,
                                    num_heads_ * (qk_nope_head_dim_ + a.hidden_size / num_heads_), false)),
        o_proj_(nn::Linear::load(w, p + ".o_proj", num_heads_ * (a.hidden_size / num_heads_), a.hidden_size,
                                 a.attention_bias)),
        rope_(nn::Rope::su_scaled(a.qk_rope_head_dim, a.rope_theta, a.max_position_embeddings,
                                  number_or(a.rope_scaling, "original_max_position_embeddings", 4096,
                                            w.config().source()),
                                  a.rope_scaling.contains("long_factor") ? a.rope_scaling["long_factor"] : json(1.0),
                                  0, w.config().source())) {}

  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const {
    const int B = x.shape(0), L = x.shape(1);
    auto q = q_b_proj_(q_a_layernorm_(q_a_proj_(x)));
    q = mx::transpose(mx::reshape(q, {B, L, num_heads_, -1}), {0, 2, 1, 3});
    auto q_parts = mx::split(q, mx::Shape{qk_nope_head_dim_}, -1);  // q_nope, q_pe
    auto compressed = mx::split(kv_a_proj_with_mqa_(x), mx::Shape{kv_lora_rank_}, -1);  // compressed_kv, k_pe
    auto k_pe = mx::transpose(mx::reshape(compressed[1], {B, L, 1, qk_rope_head_dim_}), {0, 2, 1, 3});
    auto kv = kv_b_proj_(kv_a_layernorm_(compressed[0]));
    kv = mx::transpose(mx::reshape(kv, {B, L, num_heads_, -1}), {0, 2, 1, 3});
    auto kv_parts = mx::split(kv, mx::Shape{qk_nope_head_dim_}, -1);  // k_nope, values
    const int offset = cache ? cache->offset() : 0;
    auto q_pe = rope_(q_parts[1], offset);
    k_pe = rope_(k_pe, offset);
    auto k_pe_broadcasted = mx::broadcast_to(k_pe, {B, num_heads_, L, qk_rope_head_dim_});
    auto queries = mx::concatenate({q_parts[0], q_pe}, -1);
    auto keys = mx::concatenate({kv_parts[0], k_pe_broadcasted}, -1);
    cache::CachedKV cached = cache ? cache->update_and_fetch(keys, kv_parts[1]) : cache::PlainKV{keys, kv_parts[1]};
    auto output = nn::scaled_dot_product_attention(queries, cached, softmax_scale_, mask);
    return o_proj_(mx::reshape(mx::transpose(output, {0, 2, 1, 3}), {B, L, -1}));
  }

 private:
  int num_heads_, qk_nope_head_dim_, qk_rope_head_dim_, kv_lora_rank_;
  float softmax_scale_;
  nn::Linear q_a_proj_;
  nn::Norm q_a_layernorm_;
  nn::Linear q_b_proj_, kv_a_proj_with_mqa_;
  nn::Norm kv_a_layernorm_;
  nn::Linear kv_b_proj_, o_proj_;
  nn::Rope rope_;
};

// DecoderLayer: llama's pre-norm block, each sublayer's output scaled before its residual add.
struct DecoderLayer {
  Attention self_attn;
  nn::Mlp mlp;
  nn::Norm input_layernorm, post_attention_layernorm;
  float residual_scale;  // scale_depth / num_hidden_layers ** 0.5, a Python float

  mx::array scaled(const mx::array& r) const { return mx::multiply(r, mx::array(residual_scale, r.dtype())); }
  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const {
    auto h = mx::add(x, scaled(self_attn(input_layernorm(x), mask, cache)));
    return mx::add(h, scaled(mlp(post_attention_layernorm(h))));
  }
};

class Model final : public CausalLM {
 public:
  Model(ModelArgs args, WeightBinder& w)
      : args_(std::move(args)),
        embed_tokens_(nn::Embedding::load(w, "model.embed_tokens", args_.vocab_size, args_.hidden_size)),
        norm_(nn::Norm::load(w, "model.norm", args_.hidden_size, args_.rms_norm_eps)) {
    nn::MlpOptions mlp;
    mlp.dims = args_.hidden_size;
    mlp.hidden = args_.intermediate_size;
    const auto residual = static_cast<float>(args_.scale_depth / std::pow(args_.num_hidden_layers, 0.5));
    for (int i = 0; i < args_.num_hidden_layers; ++i) {
      const auto p = "model.layers." + std::to_string(i);
      layers_.push_back(DecoderLayer{Attention(args_, w, p + ".self_attn"), nn::Mlp(mlp, w, p + ".mlp"),
                                     nn::Norm::load(w, p + ".input_layernorm", args_.hidden_size, args_.rms_norm_eps),
                                     nn::Norm::load(w, p + ".post_attention_layernorm", args_.hidden_size,
                                                    args_.rms_norm_eps),
                                     residual});
    }
    if (!args_.tie_word_embeddings)
      lm_head_.emplace(nn::Linear::load(w, "lm_head", args_.hidden_size, args_.vocab_size, false));
  }

  mx::array operator()(const mx::array& inputs, CacheList* cache) override {
    auto out = hidden_states(inputs, cache);
    if (!lm_head_) return embed_tokens_.as_linear(out);
    const auto divisor = static_cast<float>(static_cast<double>(args_.hidden_size) / args_.dim_model_base);
    return (*lm_head_)(mx::divide(out, mx::array(divisor, out.dtype())));
  }

  /** model.model(...): the final norm's output, what the head reads. */
  mx::array hidden_states(const mx::array& inputs, CacheList* cache) override {
    auto h = embed_tokens_(inputs);
    h = mx::multiply(h, mx::array(static_cast<float>(args_.scale_emb), h.dtype()));
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
    const int v_head_dim = args_.hidden_size / args_.num_attention_heads;
    return std::vector<KvShape>(layers_.size(), {args_.num_attention_heads,
                                                 args_.qk_nope_head_dim + args_.qk_rope_head_dim, v_head_dim});
  }
  int vocab_size() const override { return args_.vocab_size; }

 private:
  ModelArgs args_;
  nn::Embedding embed_tokens_;
  std::vector<DecoderLayer> layers_;
  nn::Norm norm_;
  std::optional<nn::Linear> lm_head_;
};

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  return std::make_unique<Model>(ModelArgs::from_config(config), weights);
}

}  // namespace mlxrt::model::minicpm3
