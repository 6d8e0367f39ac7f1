// Port of mlx_lm/models/gemma3_text.py (mlx-lm 0.32.2), and of gemma3.py, through which mlx-lm runs
// the text model of a multimodal Gemma 3 checkpoint (arguments under text_config, weights under
// language_model., the vision tower dropped).
#include "mlxrt/model/families/families.h"

#include <cmath>

#include <mlx/compile.h>
#include <mlx/fast.h>
#include <mlx/ops.h>
#include <mlx/types/limits.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/cache/rotating_kv_cache.h"
#include "mlxrt/model/families/gemma_common.h"
#include "mlxrt/model/nn/activations.h"
#include "mlxrt/model/nn/attention.h"
#include "mlxrt/model/nn/linear.h"
#include "mlxrt/model/nn/norm.h"
#include "mlxrt/model/nn/rope.h"

namespace mlxrt::model::gemma3_text {

namespace {

using nlohmann::json;

// Every field has a default (the dataclass's), so a config may leave any of them out.
struct ModelArgs {
  std::string model_type;
  int hidden_size = 1152, num_hidden_layers = 26, intermediate_size = 6912, num_attention_heads = 4;
  int head_dim = 256;
  float rms_norm_eps = 1.0e-6f;
  int vocab_size = 262144, num_key_value_heads = 1;
  double rope_theta = 1'000'000.0, rope_local_base_freq = 10'000.0, query_pre_attn_scalar = 256;
  int sliding_window = 512, sliding_window_pattern = 6, max_position_embeddings = 32768;
  json rope_scaling;

  static ModelArgs from_fields(const JsonFields& f) {
    ModelArgs a;
    a.model_type = f.required<std::string>("model_type");
    a.hidden_size = f.value_or<int>("hidden_size", a.hidden_size);
    a.num_hidden_layers = f.value_or<int>("num_hidden_layers", a.num_hidden_layers);
    a.intermediate_size = f.value_or<int>("intermediate_size", a.intermediate_size);
    a.num_attention_heads = f.value_or<int>("num_attention_heads", a.num_attention_heads);
    a.head_dim = f.value_or<int>("head_dim", a.head_dim);
    a.rms_norm_eps = f.value_or<float>("rms_norm_eps", a.rms_norm_eps);
    a.vocab_size = f.value_or<int>("vocab_size", a.vocab_size);
    a.num_key_value_heads = f.value_or<int>("num_key_value_heads", a.num_key_value_heads);
    a.rope_theta = f.value_or<double>("rope_theta", a.rope_theta);
    a.rope_local_base_freq = f.value_or<double>("rope_local_base_freq", a.rope_local_base_freq);
    a.query_pre_attn_scalar = f.value_or<double>("query_pre_attn_scalar", a.query_pre_attn_scalar);
    a.sliding_window = f.value_or<int>("sliding_window", a.sliding_window);
    a.sliding_window_pattern = f.value_or<int>("sliding_window_pattern", a.sliding_window_pattern);
    a.max_position_embeddings = f.value_or<int>("max_position_embeddings", a.max_position_embeddings);
    a.rope_scaling = f.has("rope_scaling") ? f.raw()["rope_scaling"] : json();
    // mlx-lm fails inside the graph on these (a modulo by zero, cache[pattern - 1] out of range).
    if (a.sliding_window_pattern < 1)
      throw ConfigError(f.source() + ": 'sliding_window_pattern' must be at least 1, got " +
                        std::to_string(a.sliding_window_pattern));
    if (a.num_hidden_layers < a.sliding_window_pattern)
      throw ConfigError(f.source() + ": 'num_hidden_layers' (" + std::to_string(a.num_hidden_layers) +
                        ") must be at least 'sliding_window_pattern' (" +
                        std::to_string(a.sliding_window_pattern) +
                        "): the first global layer, sliding_window_pattern - 1, makes the global mask");
    if (a.sliding_window_pattern > 1 && a.sliding_window < 1)
      throw ConfigError(f.source() + ": 'sliding_window' must be a positive integer, got " +
                        std::to_string(a.sliding_window));
    return a;
  }

  bool is_global(int layer) const { return layer % sliding_window_pattern == sliding_window_pattern - 1; }
};

using RMSNorm = nn::GemmaRMSNorm;

struct Attention {
  int n_heads, n_kv_heads, head_dim;
  float scale;
  nn::Linear q_proj, k_proj, v_proj, o_proj;
  RMSNorm q_norm, k_norm;
  bool is_sliding;
  nn::Rope rope;

  Attention(const ModelArgs& args, int layer_idx, WeightBinder& w, const std::string& p)
      : n_heads(args.num_attention_heads),
        n_kv_heads(args.num_key_value_heads),
        head_dim(args.head_dim),
        scale(static_cast<float>(std::pow(args.query_pre_attn_scalar, -0.5))),
        q_proj(nn::Linear::load(w, p + ".q_proj", args.hidden_size, n_heads * head_dim, false)),
        k_proj(nn::Linear::load(w, p + ".k_proj", args.hidden_size, n_kv_heads * head_dim, false)),
        v_proj(nn::Linear::load(w, p + ".v_proj", args.hidden_size, n_kv_heads * head_dim, false)),
        o_proj(nn::Linear::load(w, p + ".o_proj", n_heads * head_dim, args.hidden_size, false)),
        q_norm(RMSNorm::load(w, p + ".q_norm", head_dim, args.rms_norm_eps)),
        k_norm(RMSNorm::load(w, p + ".k_norm", head_dim, args.rms_norm_eps)),
        is_sliding((layer_idx + 1) % args.sliding_window_pattern != 0),
        // Sliding layers rotate with the local base and no scaling; global ones with rope_theta
        // and the config's rope_scaling.
        rope(is_sliding ? nn::Rope::initialize(head_dim, args.rope_local_base_freq, false, json(), std::nullopt,
                                               w.config().source())
                        : nn::Rope::initialize(head_dim, args.rope_theta, false, args.rope_scaling,
                                               args.max_position_embeddings, w.config().source())) {}

  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const {
    const int B = x.shape(0), L = x.shape(1);
    auto queries = q_proj(x), keys = k_proj(x), values = v_proj(x);
    queries = mx::transpose(mx::reshape(queries, {B, L, n_heads, -1}), {0, 2, 1, 3});  // [B, H, L, D]
    keys = mx::transpose(mx::reshape(keys, {B, L, n_kv_heads, -1}), {0, 2, 1, 3});
    values = mx::transpose(mx::reshape(values, {B, L, n_kv_heads, -1}), {0, 2, 1, 3});
    queries = q_norm(queries);
    keys = k_norm(keys);
    auto kv = nn::rope_and_update_cache(rope, queries, keys, values, cache);
    auto output = nn::scaled_dot_product_attention(queries, kv, scale, mask);
    output = mx::reshape(mx::transpose(output, {0, 2, 1, 3}), {B, L, -1});
    return o_proj(output);
  }
};

// clip_residual, compiled shapeless as mlx-lm does: float16 sums are taken in float32 and clipped
// to float16's range; other dtypes add plainly. The branch is taken at trace time, per dtype.
mx::array clip_residual(const mx::array& x, const mx::array& y) {
  static const auto compiled = mx::compile(
      [](const std::vector<mx::array>& in) -> std::vector<mx::array> {
        const auto &a = in[0], &b = in[1];
        if (a.dtype() != mx::float16) return {mx::add(a, b)};
        const float bound = static_cast<float>(mx::numeric_limits<mx::float16_t>::max());
        auto sum = mx::add(mx::astype(a, mx::float32), mx::astype(b, mx::float32));
        return {mx::astype(mx::clip(sum, mx::array(-bound), mx::array(bound)), mx::float16)};
      },
      /*shapeless=*/true);
  return compiled({x, y})[0];
}

struct TransformerBlock {
  Attention self_attn;
  gemma_common::GatedMLP mlp;
  RMSNorm input_layernorm, post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm;

  TransformerBlock(const ModelArgs& args, int layer_idx, WeightBinder& w, const std::string& p)
      : self_attn(args, layer_idx, w, p + ".self_attn"),
        mlp(args.hidden_size, args.intermediate_size, nn::gelu_approx, w, p + ".mlp"),
        input_layernorm(RMSNorm::load(w, p + ".input_layernorm", args.hidden_size, args.rms_norm_eps)),
        post_attention_layernorm(
            RMSNorm::load(w, p + ".post_attention_layernorm", args.hidden_size, args.rms_norm_eps)),
        pre_feedforward_layernorm(
            RMSNorm::load(w, p + ".pre_feedforward_layernorm", args.hidden_size, args.rms_norm_eps)),
        post_feedforward_layernorm(
            RMSNorm::load(w, p + ".post_feedforward_layernorm", args.hidden_size, args.rms_norm_eps)) {}

  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const {
    auto r = self_attn(input_layernorm(x), mask, cache);
    auto h = clip_residual(x, post_attention_layernorm(r));
    r = mlp(pre_feedforward_layernorm(h));
    return clip_residual(h, post_feedforward_layernorm(r));
  }
};

class Model final : public CausalLM {
 public:
  // `prefix` is "" for gemma3_text and "language_model." for gemma3.
  Model(ModelArgs args, WeightBinder& w, const std::string& prefix)
      : args_(std::move(args)),
        embed_tokens_(nn::Embedding::load(w, prefix + "model.embed_tokens", args_.vocab_size, args_.hidden_size)),
        norm_(RMSNorm::load(w, prefix + "model.norm", args_.hidden_size, args_.rms_norm_eps)) {
    for (int i = 0; i < args_.num_hidden_layers; ++i)
      layers_.emplace_back(args_, i, w, prefix + "model.layers." + std::to_string(i));
    // sanitize(): the head is tied exactly when the checkpoint has no lm_head.weight
    // (config.json's tie_word_embeddings plays no part).
    if (w.has(prefix + "lm_head.weight"))
      lm_head_.emplace(nn::Linear::load(w, prefix + "lm_head", args_.hidden_size, args_.vocab_size, false));
  }

  mx::array operator()(const mx::array& inputs, CacheList* cache) override {
    auto out = hidden_states(inputs, cache);
    return lm_head_ ? (*lm_head_)(out) : embed_tokens_.as_linear(out);
  }

  /** model.model(...): the final norm's output, what the head reads. */
  mx::array hidden_states(const mx::array& inputs, CacheList* cache) override {
    auto h = embed_tokens_(inputs);  // [B, L, hidden]
    // The scale is rounded to bfloat16 first, whatever the model's dtype.
    const auto embed_scale = static_cast<float>(std::pow(static_cast<double>(args_.hidden_size), 0.5));
    h = mx::multiply(h, mx::astype(mx::array(embed_scale, mx::bfloat16), h.dtype()));
    auto layer_cache = [&](size_t i) { return cache ? (*cache)[i].get() : nullptr; };
    const int pattern = args_.sliding_window_pattern;
    auto global_mask = nn::create_attention_mask(h.shape(1), layer_cache(pattern - 1));
    nn::AttentionMask sliding_window_mask;
    if (pattern > 1) sliding_window_mask = nn::create_attention_mask(h.shape(1), layer_cache(0), args_.sliding_window);
    for (size_t i = 0; i < layers_.size(); ++i)
      h = layers_[i](h, args_.is_global(static_cast<int>(i)) ? global_mask : sliding_window_mask, layer_cache(i));
    return norm_(h);
  }
  bool has_hidden_states() const override { return true; }

  CacheList make_cache() const override {
    CacheList caches;
    for (int i = 0; i < args_.num_hidden_layers; ++i) {
      if (args_.is_global(i)) {
        caches.push_back(std::make_unique<cache::KVCache>());
      } else {
        caches.push_back(std::make_unique<cache::RotatingKVCache>(args_.sliding_window));
      }
    }
    return caches;
  }
  bool defines_make_cache() const override { return true; }
  std::vector<KvShape> kv_shapes() const override {
    return std::vector<KvShape>(layers_.size(), {args_.num_key_value_heads, args_.head_dim, args_.head_dim});
  }
  int vocab_size() const override { return args_.vocab_size; }

 private:
  ModelArgs args_;
  nn::Embedding embed_tokens_;
  std::vector<TransformerBlock> layers_;
  RMSNorm norm_;
  std::optional<nn::Linear> lm_head_;
};

}  // namespace

namespace {

// gemma3.py's Model: the text model under language_model.
std::unique_ptr<CausalLM> build_gemma3(const io::ModelConfig& config, WeightBinder& weights) {
  auto f = config.fields();
  const auto& raw = config.raw();
  if (!raw.contains("text_config") || !raw["text_config"].is_object())
    throw ConfigError(config.source() + ": 'text_config' must be an object (gemma3 keeps the text model's " +
                      "arguments there)");
  // ModelArgs.__post_init__: the top-level vocab_size wins, and the head counts have their own defaults.
  json text = raw["text_config"];
  text["vocab_size"] = f.value_or<int>("vocab_size", 262208);
  if (!text.contains("num_attention_heads")) text["num_attention_heads"] = 8;
  if (!text.contains("num_key_value_heads")) text["num_key_value_heads"] = 4;
  // gemma3_text.ModelArgs.from_dict requires a model_type in text_config.
  auto args = ModelArgs::from_fields(JsonFields(text, config.source() + ": text_config"));
  // sanitize(): the vision tower and its projector are not part of the language model.
  std::vector<std::string> vision;
  for (const auto& [name, _] : weights.remaining())
    if (name.rfind("vision_tower.", 0) == 0 || name.rfind("multi_modal_projector.", 0) == 0) vision.push_back(name);
  for (const auto& name : vision) weights.discard(name);
  return std::make_unique<Model>(std::move(args), weights, "language_model.");
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  if (config.model_type() == "gemma3") return build_gemma3(config, weights);
  return std::make_unique<Model>(ModelArgs::from_fields(config.fields()), weights, "");
}

}  // namespace mlxrt::model::gemma3_text
