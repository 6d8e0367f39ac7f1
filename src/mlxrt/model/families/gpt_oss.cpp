// Port of mlx_lm/models/gpt_oss.py (mlx-lm 0.32.2): attention sinks, alternating sliding-window and
// full layers (RotatingKVCache / KVCache), experts with biases and the clamped swiglu_oai. The
// checkpoints are read as mlx-community stores them (switch layers already split into gate_proj and
// up_proj, experts mxfp4 with an 8-bit router, or any other MLX quantization), and as OpenAI's
// checkpoints store them (gate_up_proj_blocks / _scales / _bias, gate and up rows interleaved), which
// sanitize splits as gpt_oss.py's does.
#include "mlxrt/model/families/families.h"

#include <algorithm>
#include <cmath>

#include <mlx/ops.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/cache/rotating_kv_cache.h"
#include "mlxrt/model/nn/attention.h"
#include "mlxrt/model/nn/linear.h"
#include "mlxrt/model/nn/moe.h"
#include "mlxrt/model/nn/norm.h"
#include "mlxrt/model/nn/rope.h"

namespace mlxrt::model::gpt_oss {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type = "gpt_oss";
  int num_hidden_layers = 36, num_local_experts = 128, num_experts_per_tok = 4, vocab_size = 201088;
  float rms_norm_eps = 1e-05f;
  int hidden_size = 2880, intermediate_size = 2880, head_dim = 64, num_attention_heads = 64;
  int num_key_value_heads = 8, sliding_window = 128;
  double rope_theta = 150000;
  json rope_scaling;
  std::vector<bool> sliding;  // per layer: layer_types[i] != "full_attention"

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    ModelArgs a;
    a.model_type = f.value_or<std::string>("model_type", a.model_type);
    a.num_hidden_layers = f.value_or<int>("num_hidden_layers", a.num_hidden_layers);
    a.num_local_experts = f.value_or<int>("num_local_experts", a.num_local_experts);
    a.num_experts_per_tok = f.value_or<int>("num_experts_per_tok", a.num_experts_per_tok);
    a.vocab_size = f.value_or<int>("vocab_size", a.vocab_size);
    a.rms_norm_eps = f.value_or<float>("rms_norm_eps", a.rms_norm_eps);
    a.hidden_size = f.value_or<int>("hidden_size", a.hidden_size);
    a.intermediate_size = f.value_or<int>("intermediate_size", a.intermediate_size);
    a.head_dim = f.value_or<int>("head_dim", a.head_dim);
    a.num_attention_heads = f.value_or<int>("num_attention_heads", a.num_attention_heads);
    a.num_key_value_heads = f.value_or<int>("num_key_value_heads", a.num_key_value_heads);
    a.sliding_window = f.value_or<int>("sliding_window", a.sliding_window);
    a.rope_theta = f.value_or<double>("rope_theta", a.rope_theta);
    a.rope_scaling = f.has("rope_scaling") ? f.raw()["rope_scaling"] : json();
    nn::check_expert_counts(a.num_local_experts, a.num_experts_per_tok, "num_local_experts", config.source());
    // layer_types, or "sliding_attention", "full_attention" repeated num_hidden_layers // 2 times.
    std::vector<std::string> types;
    if (f.has("layer_types")) {
      const json& t = f.raw()["layer_types"];
      if (!t.is_array()) throw ConfigError(config.source() + ": 'layer_types' must be a list of strings");
      for (const auto& e : t) {
        if (!e.is_string()) throw ConfigError(config.source() + ": 'layer_types' must be a list of strings");
        types.push_back(e.get<std::string>());
      }
    } else {
      for (int i = 0; i < a.num_hidden_layers / 2; ++i) types.insert(types.end(), {"sliding_attention", "full_attention"});
    }
    if (static_cast<int>(types.size()) < a.num_hidden_layers)
      throw ConfigError(config.source() + ": 'layer_types' names " + std::to_string(types.size()) +
                        " layers, but num_hidden_layers is " + std::to_string(a.num_hidden_layers));
    types.resize(a.num_hidden_layers);
    for (const auto& t : types) a.sliding.push_back(t != "full_attention");
    // The model takes the first of each kind for its masks: gpt_oss.py needs both kinds.
    if (std::find(types.begin(), types.end(), "sliding_attention") == types.end() ||
        std::find(types.begin(), types.end(), "full_attention") == types.end())
      throw ConfigError(config.source() + ": 'layer_types' must hold both \"sliding_attention\" and " +
                        "\"full_attention\" layers (gpt_oss.py looks up the first of each)");
    if (a.sliding_window < 1) throw ConfigError(config.source() + ": 'sliding_window' must be a positive integer");
    return a;
  }
};

struct AttentionBlock {
  int head_dim, n_heads, n_kv_heads;
  float sm_scale;
  mx::array sinks;
  nn::Linear q_proj, k_proj, v_proj, o_proj;
  nn::Rope rope;

  // shard(): q/k/v all-to-sharded, o_proj sharded-to-all, this rank's heads and their sinks.
  AttentionBlock(const ModelArgs& args, WeightBinder& w, const std::string& p, int shards)
      : head_dim(args.head_dim),
        n_heads(args.num_attention_heads / shards),
        n_kv_heads(args.num_key_value_heads / shards),
        sm_scale(static_cast<float>(1 / std::sqrt(static_cast<double>(args.head_dim)))),
        sinks(w.take(p + ".sinks", {args.num_attention_heads})),
        q_proj(nn::Linear::load(w, p + ".q_proj", args.hidden_size, args.num_attention_heads * head_dim, true,
                                shards > 1 ? nn::Shard::all_to_sharded : nn::Shard::none)),
        k_proj(nn::Linear::load(w, p + ".k_proj", args.hidden_size, args.num_key_value_heads * head_dim, true,
                                shards > 1 ? nn::Shard::all_to_sharded : nn::Shard::none)),
        v_proj(nn::Linear::load(w, p + ".v_proj", args.hidden_size, args.num_key_value_heads * head_dim, true,
                                shards > 1 ? nn::Shard::all_to_sharded : nn::Shard::none)),
        o_proj(nn::Linear::load(w, p + ".o_proj", head_dim * args.num_attention_heads, args.hidden_size, true,
                                shards > 1 ? nn::Shard::sharded_to_all : nn::Shard::none)),
        rope(nn::Rope::initialize(head_dim, args.rope_theta, false, args.rope_scaling, std::nullopt,
                                  w.config().source())) {
    // sinks[n_heads * rank : n_heads * (rank + 1)]: the rank's contiguous part, as keep_shard cuts it.
    if (shards > 1) sinks = w.keep_shard(p + ".sinks", sinks, 0);
  }

  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const {
    const int B = x.shape(0), L = x.shape(1);
    auto q = mx::swapaxes(mx::reshape(q_proj(x), {B, L, -1, head_dim}), 1, 2);
    auto k = mx::swapaxes(mx::reshape(k_proj(x), {B, L, -1, head_dim}), 1, 2);
    auto v = mx::swapaxes(mx::reshape(v_proj(x), {B, L, -1, head_dim}), 1, 2);
    auto kv = nn::rope_and_update_cache(rope, q, k, v, cache);
    auto v_hat = nn::scaled_dot_product_attention(q, kv, sm_scale, mask, sinks);
    return o_proj(mx::reshape(mx::swapaxes(v_hat, 1, 2), {B, L, -1}));
  }
};

nn::SparseMoeOptions moe_options(const ModelArgs& a, int shards) {
  nn::SparseMoeOptions o;
  o.sharded = shards > 1;
  o.divide_down_bias = true;
  o.hidden_size = a.hidden_size;
  o.expert_hidden = a.intermediate_size;
  o.num_experts = a.num_local_experts;
  o.top_k = a.num_experts_per_tok;
  o.order = nn::RouterOrder::top_k_then_softmax;  // mlx_topk, then a softmax over the k logits
  o.how = nn::TopK::partition_tail;
  o.gate_name = "router";
  o.gate_bias = true;
  o.experts_name = "experts";
  o.expert_bias = true;
  o.activation = nn::SwitchActivation::swiglu_oai;
  return o;
}

struct TransformerBlock {
  AttentionBlock self_attn;
  nn::SparseMoe mlp;
  nn::RMSNorm input_layernorm, post_attention_layernorm;

  TransformerBlock(const ModelArgs& args, WeightBinder& w, const std::string& p, int shards)
      : self_attn(args, w, p + ".self_attn", shards),
        mlp(nn::SparseMoe::load(w, p + ".mlp", moe_options(args, shards))),
        input_layernorm(nn::RMSNorm::load(w, p + ".input_layernorm", args.hidden_size, args.rms_norm_eps)),
        post_attention_layernorm(
            nn::RMSNorm::load(w, p + ".post_attention_layernorm", args.hidden_size, args.rms_norm_eps)) {}

  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const {
    auto h = mx::add(x, self_attn(input_layernorm(x), mask, cache));
    return mx::add(h, mlp(post_attention_layernorm(h)));
  }
};

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  if (auto at = s.find(from); at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

// v[..., start::2, :] (rows) or v[..., start::2] (last axis), made contiguous.
mx::array every_second(const mx::array& v, int start, int axis) {
  mx::Shape begin(v.ndim(), 0), end = v.shape(), strides(v.ndim(), 1);
  const int a = axis < 0 ? axis + v.ndim() : axis;
  begin[a] = start;
  strides[a] = 2;
  return mx::contiguous(mx::slice(v, begin, end, strides));
}

// gpt_oss.py's sanitize: the original layout's fused, interleaved expert tensors, split into the
// switch layers' gate_proj / up_proj (mxfp4 blocks of uint8 viewed as uint32 words).
void sanitize(WeightBinder& w) {
  std::vector<std::string> names;
  for (const auto& [k, v] : w.remaining()) {
    if (contains(k, "gate_proj.weight")) return;  // already sanitized
    names.push_back(k);
  }
  for (const auto& k : names) {
    const bool bias = contains(k, "bias");
    if ((contains(k, "gate_up_proj") || contains(k, "down_proj")) && !bias) {
      auto v = *w.pop(k);
      std::string key = k;
      if (contains(key, "_blocks")) {
        v = mx::flatten(mx::view(v, mx::uint32), -2, -1);
        key = replaced(key, "_blocks", ".weight");
      }
      if (contains(key, "_scales")) key = replaced(key, "_scales", ".scales");
      if (contains(k, "gate_up_proj")) {
        w.put(replaced(key, "gate_up_proj", "gate_proj"), every_second(v, 0, -2));
        w.put(replaced(key, "gate_up_proj", "up_proj"), every_second(v, 1, -2));
      } else {
        w.put(key, v);
      }
    } else if (contains(k, "gate_up_proj_bias")) {
      auto v = *w.pop(k);
      w.put(replaced(k, "gate_up_proj_bias", "gate_proj.bias"), every_second(v, 0, -1));
      w.put(replaced(k, "gate_up_proj_bias", "up_proj.bias"), every_second(v, 1, -1));
    } else if (contains(k, "down_proj_bias")) {
      w.put(replaced(k, "down_proj_bias", "down_proj.bias"), *w.pop(k));
    }
  }
}

class Model final : public CausalLM {
 public:
  Model(ModelArgs args, WeightBinder& w, int shards)
      : args_(std::move(args)),
        shards_(shards),
        embed_tokens_(nn::Embedding::load(w, "model.embed_tokens", args_.vocab_size, args_.hidden_size)),
        norm_(nn::RMSNorm::load(w, "model.norm", args_.hidden_size, args_.rms_norm_eps)),
        lm_head_(nn::Linear::load(w, "lm_head", args_.hidden_size, args_.vocab_size, false)) {
    for (int i = 0; i < args_.num_hidden_layers; ++i)
      layers_.emplace_back(args_, w, "model.layers." + std::to_string(i), shards_);
    swa_idx_ = std::find(args_.sliding.begin(), args_.sliding.end(), true) - args_.sliding.begin();
    ga_idx_ = std::find(args_.sliding.begin(), args_.sliding.end(), false) - args_.sliding.begin();
  }

  mx::array operator()(const mx::array& inputs, CacheList* cache) override {
    auto out = hidden_states(inputs, cache);
    return lm_head_(out);
  }

  /** model.model(...): the final norm's output, what the head reads. */
  mx::array hidden_states(const mx::array& inputs, CacheList* cache) override {
    auto x = embed_tokens_(inputs);
    auto layer_cache = [&](size_t i) { return cache ? (*cache)[i].get() : nullptr; };
    auto full_mask = nn::create_attention_mask(x.shape(1), layer_cache(ga_idx_));
    auto swa_mask = nn::create_attention_mask(x.shape(1), layer_cache(swa_idx_), args_.sliding_window);
    for (size_t i = 0; i < layers_.size(); ++i) x = layers_[i](x, args_.sliding[i] ? swa_mask : full_mask, layer_cache(i));
    return norm_(x);
  }
  bool has_hidden_states() const override { return true; }

  CacheList make_cache() const override {
    CacheList caches;
    for (size_t i = 0; i < layers_.size(); ++i) {
      if (args_.sliding[i]) {
        caches.push_back(std::make_unique<cache::RotatingKVCache>(args_.sliding_window));
      } else {
        caches.push_back(std::make_unique<cache::KVCache>());
      }
    }
    return caches;
  }
  bool defines_make_cache() const override { return true; }
  std::vector<KvShape> kv_shapes() const override {
    return std::vector<KvShape>(layers_.size(), {args_.num_key_value_heads / shards_, args_.head_dim, args_.head_dim});
  }
  int vocab_size() const override { return args_.vocab_size; }

 private:
  ModelArgs args_;
  int shards_ = 1;  // tensor parallel: the group's size
  nn::Embedding embed_tokens_;
  std::vector<TransformerBlock> layers_;
  nn::RMSNorm norm_;
  nn::Linear lm_head_;
  size_t swa_idx_ = 0, ga_idx_ = 0;
};

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  auto args = ModelArgs::from_config(config);
  sanitize(weights);
  // shard(): every layer's attention heads (with their sinks) and experts' hidden units split over
  // the tensor group.
  int shards = 1;
  if (const auto* group = weights.tensor_group()) {
    shards = group->size();
    const std::string source = config.source();
    auto check = [&](int value, const char* field) {
      if (value % shards != 0)
        throw ConfigError(source + ": '" + field + "' is " + std::to_string(value) + ", which does not divide across " +
                          std::to_string(shards) + " ranks (tensor parallel)");
    };
    check(args.num_attention_heads, "num_attention_heads");
    check(args.num_key_value_heads, "num_key_value_heads");
    check(args.intermediate_size, "intermediate_size");
  }
  return std::make_unique<Model>(std::move(args), weights, shards);
}

}  // namespace mlxrt::model::gpt_oss
