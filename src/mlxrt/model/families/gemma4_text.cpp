// Port of mlx_lm/models/gemma4_text.py (mlx-lm 0.32.2), and of gemma4.py, through which mlx-lm runs
// the text model of a multimodal Gemma 4 checkpoint (gemma4_unified remaps to it): arguments under
// text_config, weights under language_model., the vision and audio towers dropped.
#include "mlxrt/model/families/families.h"

#include <cmath>
#include <functional>
#include <map>
#include <set>

#include <mlx/compile.h>
#include <mlx/fast.h>
#include <mlx/ops.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/cache/rotating_kv_cache.h"
#include "mlxrt/model/families/gemma_common.h"
#include "mlxrt/model/nn/activations.h"
#include "mlxrt/model/nn/attention.h"
#include "mlxrt/model/nn/linear.h"
#include "mlxrt/model/nn/moe.h"
#include "mlxrt/model/nn/norm.h"
#include "mlxrt/model/nn/rope.h"
#include "mlxrt/model/nn/switch_layers.h"

namespace mlxrt::model::gemma4_text {

namespace {

using nlohmann::json;

const std::string kFull = "full_attention";
const std::string kSliding = "sliding_attention";

// A field the dataclass declares Optional: absent keeps the default, null is None.
template <typename T>
std::optional<T> nullable(const JsonFields& f, const std::string& key, std::optional<T> fallback) {
  if (!f.raw().contains(key)) return fallback;
  return f.optional<T>(key);
}

struct ModelArgs {
  std::string model_type = "gemma4_text";
  int hidden_size = 1536, num_hidden_layers = 35, intermediate_size = 6144, num_attention_heads = 8;
  int head_dim = 256;
  int global_head_dim = 512;  // 0 (or None): full layers keep head_dim
  float rms_norm_eps = 1.0e-6f;
  int vocab_size = 262144, vocab_size_per_layer_input = 262144, num_key_value_heads = 1;
  std::optional<int> num_global_key_value_heads;
  int num_kv_shared_layers = 20;
  int hidden_size_per_layer_input = 256;  // 0 (or None): no per-layer inputs
  bool rope_traditional = false;
  json rope_parameters;
  int sliding_window = 512, sliding_window_pattern = 5, max_position_embeddings = 131072;
  bool attention_k_eq_v = false;
  std::optional<double> final_logit_softcapping = 30.0;
  bool use_double_wide_mlp = true, enable_moe_block = false;
  // The MoE block's (Optional in the dataclass; required once enable_moe_block is set).
  std::optional<int> num_experts, top_k_experts, moe_intermediate_size;
  std::vector<std::string> layer_types;
  bool tie_word_embeddings = true;

  static ModelArgs from_fields(const JsonFields& f) {
    ModelArgs a;
    a.model_type = f.value_or<std::string>("model_type", a.model_type);
    a.hidden_size = f.value_or<int>("hidden_size", a.hidden_size);
    a.num_hidden_layers = f.value_or<int>("num_hidden_layers", a.num_hidden_layers);
    a.intermediate_size = f.value_or<int>("intermediate_size", a.intermediate_size);
    a.num_attention_heads = f.value_or<int>("num_attention_heads", a.num_attention_heads);
    a.head_dim = f.value_or<int>("head_dim", a.head_dim);
    a.global_head_dim = nullable<int>(f, "global_head_dim", a.global_head_dim).value_or(0);
    a.rms_norm_eps = f.value_or<float>("rms_norm_eps", a.rms_norm_eps);
    a.vocab_size = f.value_or<int>("vocab_size", a.vocab_size);
    a.vocab_size_per_layer_input = f.value_or<int>("vocab_size_per_layer_input", a.vocab_size_per_layer_input);
    a.num_key_value_heads = f.value_or<int>("num_key_value_heads", a.num_key_value_heads);
    a.num_global_key_value_heads = f.optional<int>("num_global_key_value_heads");
    a.num_kv_shared_layers = f.value_or<int>("num_kv_shared_layers", a.num_kv_shared_layers);
    a.hidden_size_per_layer_input =
        nullable<int>(f, "hidden_size_per_layer_input", a.hidden_size_per_layer_input).value_or(0);
    a.rope_traditional = f.value_or<bool>("rope_traditional", a.rope_traditional);
    a.sliding_window = f.value_or<int>("sliding_window", a.sliding_window);
    a.sliding_window_pattern = f.value_or<int>("sliding_window_pattern", a.sliding_window_pattern);
    a.max_position_embeddings = f.value_or<int>("max_position_embeddings", a.max_position_embeddings);
    a.attention_k_eq_v = f.value_or<bool>("attention_k_eq_v", a.attention_k_eq_v);
    a.final_logit_softcapping = nullable<double>(f, "final_logit_softcapping", a.final_logit_softcapping);
    a.use_double_wide_mlp = f.value_or<bool>("use_double_wide_mlp", a.use_double_wide_mlp);
    a.enable_moe_block = f.value_or<bool>("enable_moe_block", a.enable_moe_block);
    a.num_experts = f.optional<int>("num_experts");
    a.top_k_experts = f.optional<int>("top_k_experts");
    a.moe_intermediate_size = f.optional<int>("moe_intermediate_size");
    a.tie_word_embeddings = f.value_or<bool>("tie_word_embeddings", a.tie_word_embeddings);
    a.rope_parameters_from(f);
    a.layer_types_from(f);
    a.check(f.source());
    return a;
  }

  // __post_init__'s defaults: proportional RoPE on a quarter of the full layers' heads.
  void rope_parameters_from(const JsonFields& f) {
    if (!f.has("rope_parameters")) {
      rope_parameters = {
          {kFull, {{"partial_rotary_factor", 0.25}, {"rope_theta", 1000000.0}, {"rope_type", "proportional"}}},
          {kSliding, {{"partial_rotary_factor", 1.0}, {"rope_theta", 10000.0}, {"rope_type", "default"}}}};
      return;
    }
    rope_parameters = f.raw()["rope_parameters"];
    if (!rope_parameters.is_object())
      throw ConfigError(f.source() + ": 'rope_parameters' must be an object keyed by layer type, got " +
                        json_type_name(rope_parameters));
    for (const auto& key : {kFull, kSliding}) {
      if (!rope_parameters.contains(key)) continue;
      const auto& p = rope_parameters[key];
      if (!p.is_object())
        throw ConfigError(f.source() + ": 'rope_parameters." + key + "' must be an object, got " + json_type_name(p));
      if (p.contains("rope_theta") && !p["rope_theta"].is_number())
        throw ConfigError(f.source() + ": 'rope_parameters." + key + ".rope_theta' must be a number");
    }
  }

  // __post_init__: without layer_types, sliding_window_pattern - 1 sliding layers then a full one,
  // repeated (a Python list times a negative count is empty).
  void layer_types_from(const JsonFields& f) {
    if (!f.has("layer_types")) {
      std::vector<std::string> pattern(std::max(sliding_window_pattern - 1, 0), kSliding);
      pattern.push_back(kFull);
      for (int i = 0; i < num_hidden_layers; ++i) layer_types.push_back(pattern[i % pattern.size()]);
      return;
    }
    const auto& raw = f.raw()["layer_types"];
    if (!raw.is_array())
      throw ConfigError(f.source() + ": 'layer_types' must be a list, got " + json_type_name(raw));
    for (const auto& t : raw) {
      if (!t.is_string() || (t != kFull && t != kSliding))
        throw ConfigError(f.source() + ": 'layer_types' entries must be \"" + kFull + "\" or \"" + kSliding +
                          "\", got " + t.dump());
      layer_types.push_back(t.get<std::string>());
    }
    if (static_cast<int>(layer_types.size()) != num_hidden_layers)
      throw ConfigError(f.source() + ": 'layer_types' lists " + std::to_string(layer_types.size()) +
                        " layers, 'num_hidden_layers' is " + std::to_string(num_hidden_layers));
  }

  // What mlx-lm would fail on inside the graph, or cannot run at all, refused before any weight is read.
  void check(const std::string& source) const {
    if (enable_moe_block) check_moe(source);
    if (num_hidden_layers < 1)
      throw ConfigError(source + ": 'num_hidden_layers' must be at least 1, got " + std::to_string(num_hidden_layers));
    if (num_kv_shared_layers < 0 || num_kv_shared_layers >= num_hidden_layers)
      throw ConfigError(source + ": 'num_kv_shared_layers' (" + std::to_string(num_kv_shared_layers) +
                        ") must be at least 0 and less than 'num_hidden_layers' (" +
                        std::to_string(num_hidden_layers) + ")");
    // A shared layer reuses the last unshared layer of its type's keys and values.
    std::set<std::string> unshared(layer_types.begin(), layer_types.begin() + first_kv_shared());
    for (int i = first_kv_shared(); i < num_hidden_layers; ++i)
      if (!unshared.count(layer_types[i]))
        throw ConfigError(source + ": layer " + std::to_string(i) + " is KV-shared ('num_kv_shared_layers' " +
                          std::to_string(num_kv_shared_layers) + ") but no earlier layer of its type \"" +
                          layer_types[i] + "\" in 'layer_types' has keys and values to share");
    if (sliding_window < 1 && std::count(layer_types.begin(), layer_types.end(), kSliding))
      throw ConfigError(source + ": 'sliding_window' must be a positive integer, got " + std::to_string(sliding_window));
    if (final_logit_softcapping && *final_logit_softcapping <= 0)
      throw ConfigError(source + ": 'final_logit_softcapping' must be positive or null, got " +
                        std::to_string(*final_logit_softcapping));
  }

  // The sizes mlx-lm builds the router and experts with (None fails there, in nn.Linear or
  // SwitchGLU), and the top-k its argpartition can take.
  void check_moe(const std::string& source) const {
    const std::string why = " (the mixture-of-experts block 'enable_moe_block' enables needs it)";
    for (const auto& [key, value] : {std::pair{"num_experts", num_experts}, std::pair{"top_k_experts", top_k_experts},
                                     std::pair{"moe_intermediate_size", moe_intermediate_size}}) {
      if (!value) throw ConfigError(source + ": '" + key + "' is missing or null" + why);
      if (*value < 1)
        throw ConfigError(source + ": '" + key + "' must be a positive integer, got " + std::to_string(*value) + why);
    }
    if (*top_k_experts > *num_experts)
      throw ConfigError(source + ": 'top_k_experts' is " + std::to_string(*top_k_experts) +
                        ", but it must be at most 'num_experts' (" + std::to_string(*num_experts) + ")");
  }

  int first_kv_shared() const { return num_hidden_layers - num_kv_shared_layers; }
  bool is_full(int layer) const { return layer_types[layer] == kFull; }
  bool is_sliding(int layer) const { return layer_types[layer] == kSliding; }
  int layer_head_dim(int layer) const { return is_full(layer) && global_head_dim ? global_head_dim : head_dim; }
  bool k_eq_v(int layer) const { return attention_k_eq_v && !is_sliding(layer); }
  int layer_kv_heads(int layer) const {
    return k_eq_v(layer) && num_global_key_value_heads ? *num_global_key_value_heads : num_key_value_heads;
  }
};

// A Python float scalar in an MLX op takes the array's dtype.
mx::array scalar_like(double v, const mx::array& x) { return mx::array(static_cast<float>(v), x.dtype()); }

// What a layer hands the KV-shared layers after it: the keys/values it attended over and its offset.
struct SharedKV {
  std::optional<cache::CachedKV> kv;
  int offset = 0;
};

struct Attention {
  int layer_idx, n_heads, n_kv_heads, head_dim;
  bool has_kv, use_k_eq_v;
  float eps;
  nn::Linear q_proj;
  std::optional<nn::Linear> k_proj, v_proj;
  nn::Linear o_proj;
  nn::RMSNorm q_norm;
  std::optional<nn::RMSNorm> k_norm;
  nn::Rope rope;

  Attention(const ModelArgs& args, int idx, WeightBinder& w, const std::string& p)
      : layer_idx(idx),
        n_heads(args.num_attention_heads),
        n_kv_heads(args.layer_kv_heads(idx)),
        head_dim(args.layer_head_dim(idx)),
        has_kv(idx < args.first_kv_shared()),
        use_k_eq_v(args.k_eq_v(idx)),
        eps(args.rms_norm_eps),
        q_proj(nn::Linear::load(w, p + ".q_proj", args.hidden_size, n_heads * head_dim, false)),
        o_proj(nn::Linear::load(w, p + ".o_proj", n_heads * head_dim, args.hidden_size, false)),
        q_norm(nn::RMSNorm::load(w, p + ".q_norm", head_dim, eps)),
        rope(make_rope(args, idx, w.config().source())) {
    if (has_kv) {
      k_proj.emplace(nn::Linear::load(w, p + ".k_proj", args.hidden_size, n_kv_heads * head_dim, false));
      if (!use_k_eq_v)
        v_proj.emplace(nn::Linear::load(w, p + ".v_proj", args.hidden_size, n_kv_heads * head_dim, false));
      k_norm.emplace(nn::RMSNorm::load(w, p + ".k_norm", head_dim, eps));
    }
  }

  static nn::Rope make_rope(const ModelArgs& args, int idx, const std::string& source) {
    const auto& key = args.is_sliding(idx) ? kSliding : kFull;
    const json params = args.rope_parameters.contains(key) ? args.rope_parameters[key] : json::object();
    const double theta = params.contains("rope_theta") ? params["rope_theta"].get<double>() : 10000.0;
    return nn::Rope::initialize(args.layer_head_dim(idx), theta, args.rope_traditional, params,
                                args.max_position_embeddings, source + ": rope_parameters." + key);
  }

  // `shared` holds an earlier layer's keys and values for a KV-shared layer; on return it holds
  // this layer's, for the shared layers after it.
  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache,
                       SharedKV& shared) const {
    const int B = x.shape(0), L = x.shape(1);
    auto queries = q_norm(mx::reshape(q_proj(x), {B, L, n_heads, head_dim}));
    int offset = shared.offset;
    std::optional<mx::array> keys, values;
    if (!shared.kv) {
      if (!has_kv)
        throw std::logic_error("layer " + std::to_string(layer_idx) + " is KV-shared but received no shared KV");
      keys = mx::reshape((*k_proj)(x), {B, L, n_kv_heads, head_dim});
      values = use_k_eq_v ? *keys : mx::reshape((*v_proj)(x), {B, L, n_kv_heads, head_dim});
      offset = cache ? cache->offset() : 0;
      keys = rope(mx::transpose((*k_norm)(*keys), {0, 2, 1, 3}), offset);  // [B, KV, L, D]
      // v_norm: an RMSNorm without a learnable scale.
      values = mx::transpose(mx::fast::rms_norm(*values, std::nullopt, eps), {0, 2, 1, 3});
    }
    queries = rope(mx::transpose(queries, {0, 2, 1, 3}), offset);  // [B, H, L, D]
    cache::CachedKV kv = shared.kv ? *shared.kv : cache::PlainKV{*keys, *values};
    if (cache && keys) kv = cache->update_and_fetch(*keys, *values);
    auto output = nn::scaled_dot_product_attention(queries, kv, 1.0f, mask);
    shared = {kv, offset};
    return o_proj(mx::reshape(mx::transpose(output, {0, 2, 1, 3}), {B, L, -1}));
  }
};

struct MLP {
  nn::Linear gate_proj, down_proj, up_proj;
  MLP(int dim, int hidden_dim, WeightBinder& w, const std::string& p)
      : gate_proj(nn::Linear::load(w, p + ".gate_proj", dim, hidden_dim, false)),
        down_proj(nn::Linear::load(w, p + ".down_proj", hidden_dim, dim, false)),
        up_proj(nn::Linear::load(w, p + ".up_proj", dim, hidden_dim, false)) {}
  mx::array operator()(const mx::array& x) const { return down_proj(nn::geglu(gate_proj(x), up_proj(x))); }
};

// The per-layer input gate of the models with per-layer embeddings (E2B / E4B).
struct PerLayerInput {
  nn::Linear per_layer_input_gate, per_layer_projection;
  nn::RMSNorm post_per_layer_input_norm;
  PerLayerInput(const ModelArgs& args, WeightBinder& w, const std::string& p)
      : per_layer_input_gate(nn::Linear::load(w, p + ".per_layer_input_gate", args.hidden_size,
                                              args.hidden_size_per_layer_input, false)),
        per_layer_projection(nn::Linear::load(w, p + ".per_layer_projection", args.hidden_size_per_layer_input,
                                              args.hidden_size, false)),
        post_per_layer_input_norm(
            nn::RMSNorm::load(w, p + ".post_per_layer_input_norm", args.hidden_size, args.rms_norm_eps)) {}
  mx::array operator()(const mx::array& h, const mx::array& per_layer_input) const {
    auto gate = mx::multiply(nn::gelu_approx(per_layer_input_gate(h)), per_layer_input);
    return mx::add(h, post_per_layer_input_norm(per_layer_projection(gate)));
  }
};

// Router: an RMSNorm scaled by scale * hidden_size ** -0.5, the expert scores, the top k of them
// softmaxed and scaled per expert.
struct Router {
  int top_k;
  float eps;
  double root_size;
  nn::Linear proj;
  mx::array scale, per_expert_scale;

  Router(const ModelArgs& args, WeightBinder& w, const std::string& p)
      : top_k(*args.top_k_experts),
        eps(args.rms_norm_eps),
        root_size(std::pow(args.hidden_size, -0.5)),
        proj(nn::Linear::load(w, p + ".proj", args.hidden_size, *args.num_experts, false)),
        scale(w.take(p + ".scale", {args.hidden_size})),
        per_expert_scale(w.take(p + ".per_expert_scale", {*args.num_experts})) {}

  nn::Routing operator()(const mx::array& x) const {
    auto normed = mx::fast::rms_norm(x, mx::multiply(scale, scalar_like(root_size, scale)), eps);
    auto expert_scores = proj(normed);
    auto indices = nn::top_k_indices(expert_scores, top_k, nn::TopK::partition_tail);
    auto weights = mx::softmax(mx::take_along_axis(expert_scores, indices, -1), -1);
    return {indices, mx::multiply(weights, mx::take(per_expert_scale, indices, 0))};
  }
};

// The 26B model's sparse block beside the dense MLP: a router over the residual stream, experts
// (a SwitchGLU with geglu) over its own pre-norm, each branch post-normed before they are summed.
struct MoeBlock {
  Router router;
  nn::SwitchGLU experts;
  nn::RMSNorm post_feedforward_layernorm_1, post_feedforward_layernorm_2, pre_feedforward_layernorm_2;

  MoeBlock(const ModelArgs& args, WeightBinder& w, const std::string& p)
      : router(args, w, p + ".router"),
        experts(nn::SwitchGLU::load(w, p + ".experts.switch_glu", args.hidden_size, *args.moe_intermediate_size,
                                    *args.num_experts, false, nn::SwitchActivation::geglu)),
        post_feedforward_layernorm_1(
            nn::RMSNorm::load(w, p + ".post_feedforward_layernorm_1", args.hidden_size, args.rms_norm_eps)),
        post_feedforward_layernorm_2(
            nn::RMSNorm::load(w, p + ".post_feedforward_layernorm_2", args.hidden_size, args.rms_norm_eps)),
        pre_feedforward_layernorm_2(
            nn::RMSNorm::load(w, p + ".pre_feedforward_layernorm_2", args.hidden_size, args.rms_norm_eps)) {}

  // h1: the dense MLP's output (before its post-norm); h: the residual stream.
  mx::array operator()(const mx::array& h1, const mx::array& h) const {
    auto routing = router(h);
    auto h2 = nn::combine_experts(experts(pre_feedforward_layernorm_2(h), routing.indices), routing.scores);
    return mx::add(post_feedforward_layernorm_1(h1), post_feedforward_layernorm_2(h2));
  }
};

int mlp_width(const ModelArgs& args, int idx) {
  const int first_shared = args.first_kv_shared();
  const bool is_kv_shared_layer = idx >= first_shared && first_shared > 0;
  return args.intermediate_size * (args.use_double_wide_mlp && is_kv_shared_layer ? 2 : 1);
}

struct DecoderLayer {
  Attention self_attn;
  MLP mlp;
  nn::RMSNorm input_layernorm, post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm;
  std::optional<MoeBlock> moe;
  std::optional<PerLayerInput> per_layer;
  mx::array layer_scalar;

  DecoderLayer(const ModelArgs& args, int idx, WeightBinder& w, const std::string& p)
      : self_attn(args, idx, w, p + ".self_attn"),
        mlp(args.hidden_size, mlp_width(args, idx), w, p + ".mlp"),
        input_layernorm(nn::RMSNorm::load(w, p + ".input_layernorm", args.hidden_size, args.rms_norm_eps)),
        post_attention_layernorm(
            nn::RMSNorm::load(w, p + ".post_attention_layernorm", args.hidden_size, args.rms_norm_eps)),
        pre_feedforward_layernorm(
            nn::RMSNorm::load(w, p + ".pre_feedforward_layernorm", args.hidden_size, args.rms_norm_eps)),
        post_feedforward_layernorm(
            nn::RMSNorm::load(w, p + ".post_feedforward_layernorm", args.hidden_size, args.rms_norm_eps)),
        layer_scalar(w.take(p + ".layer_scalar", {1})) {
    if (args.enable_moe_block) moe.emplace(args, w, p);
    if (args.hidden_size_per_layer_input) per_layer.emplace(args, w, p);
  }

  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache,
                       const std::optional<mx::array>& per_layer_input, SharedKV& shared) const {
    auto h = mx::add(x, post_attention_layernorm(self_attn(input_layernorm(x), mask, cache, shared)));
    auto ff = mlp(pre_feedforward_layernorm(h));
    if (moe) ff = (*moe)(ff, h);
    h = mx::add(h, post_feedforward_layernorm(ff));
    if (per_layer && per_layer_input) h = (*per_layer)(h, *per_layer_input);
    return mx::multiply(h, layer_scalar);
  }
};

class Model final : public CausalLM {
 public:
  // `prefix` is "" for gemma4_text and "language_model." for gemma4.
  Model(ModelArgs args, WeightBinder& w, const std::string& prefix)
      : args_(std::move(args)),
        embed_tokens_(nn::Embedding::load(w, prefix + "model.embed_tokens", args_.vocab_size, args_.hidden_size)),
        norm_(nn::RMSNorm::load(w, prefix + "model.norm", args_.hidden_size, args_.rms_norm_eps)) {
    const int n = args_.num_hidden_layers, per_layer = args_.hidden_size_per_layer_input;
    for (int i = 0; i < n; ++i) layers_.emplace_back(args_, i, w, prefix + "model.layers." + std::to_string(i));
    if (per_layer) {
      embed_tokens_per_layer_.emplace(nn::Embedding::load(w, prefix + "model.embed_tokens_per_layer",
                                                          args_.vocab_size_per_layer_input, n * per_layer));
      per_layer_model_projection_.emplace(
          nn::Linear::load(w, prefix + "model.per_layer_model_projection", args_.hidden_size, n * per_layer, false));
      per_layer_projection_norm_.emplace(
          nn::RMSNorm::load(w, prefix + "model.per_layer_projection_norm", per_layer, args_.rms_norm_eps));
    }
    if (!args_.tie_word_embeddings)
      lm_head_.emplace(nn::Linear::load(w, prefix + "lm_head", args_.hidden_size, args_.vocab_size, false));
    if (args_.final_logit_softcapping)
      softcap_ = gemma_common::compiled_softcap(static_cast<float>(*args_.final_logit_softcapping));
    // Each KV-shared layer reads the last unshared layer of its type.
    const int first_shared = args_.first_kv_shared();
    std::map<std::string, int> kvs_by_type;
    for (int i = 0; i < n; ++i) {
      if (i < first_shared) kvs_by_type[args_.layer_types[i]] = i;
      previous_kvs_.push_back(i < first_shared ? i : kvs_by_type.at(args_.layer_types[i]));
    }
  }

  mx::array operator()(const mx::array& inputs, CacheList* cache) override {
    auto input_embeddings = embed_tokens_(inputs);  // [B, L, hidden]
    auto h = mx::multiply(input_embeddings, scalar_like(std::pow(args_.hidden_size, 0.5), input_embeddings));
    const int n = args_.num_hidden_layers;
    std::vector<std::optional<mx::array>> per_layer_inputs(n);
    if (args_.hidden_size_per_layer_input) {
      auto all = project_per_layer_inputs(h, get_per_layer_inputs(inputs));  // [B, L, layers, per_layer]
      const auto& s = all.shape();
      for (int i = 0; i < n; ++i)
        per_layer_inputs[i] = mx::squeeze(mx::slice(all, {0, 0, i, 0}, {s[0], s[1], i + 1, s[3]}), 2);
    }
    auto layer_cache = [&](int i) -> cache::Cache* {
      return cache && i < static_cast<int>(cache->size()) ? (*cache)[i].get() : nullptr;
    };
    // _make_masks: one mask per layer type, made with the cache of the first layer of that type.
    std::map<std::string, nn::AttentionMask> masks;
    for (int i = 0; i < n; ++i) {
      const auto& type = args_.layer_types[i];
      if (masks.count(type)) continue;
      masks[type] = args_.is_full(i) ? nn::create_attention_mask(h.shape(1), layer_cache(i))
                                     : nn::create_attention_mask(h.shape(1), layer_cache(i), args_.sliding_window);
    }
    std::vector<SharedKV> intermediates(n);
    for (int i = 0; i < n; ++i) {
      SharedKV shared = intermediates[previous_kvs_[i]];
      h = layers_[i](h, masks.at(args_.layer_types[i]), layer_cache(i), per_layer_inputs[i], shared);
      intermediates[i] = std::move(shared);
    }
    auto out = norm_(h);
    out = lm_head_ ? (*lm_head_)(out) : embed_tokens_.as_linear(out);
    return softcap_ ? softcap_({out})[0] : out;
  }

  CacheList make_cache() const override {
    CacheList caches;
    for (int i = 0; i < args_.first_kv_shared(); ++i) {
      if (args_.is_full(i)) {
        caches.push_back(std::make_unique<cache::KVCache>());
      } else {
        caches.push_back(std::make_unique<cache::RotatingKVCache>(args_.sliding_window, /*keep=*/0));
      }
    }
    return caches;
  }
  bool defines_make_cache() const override { return true; }
  std::vector<KvShape> kv_shapes() const override {
    std::vector<KvShape> shapes;
    for (int i = 0; i < args_.first_kv_shared(); ++i)
      shapes.push_back({args_.layer_kv_heads(i), args_.layer_head_dim(i), args_.layer_head_dim(i)});
    return shapes;
  }
  int vocab_size() const override { return args_.vocab_size; }

 private:
  // _get_per_layer_inputs for token ids: their per-layer embeddings, scaled, [B, L, layers, per_layer].
  mx::array get_per_layer_inputs(const mx::array& inputs) const {
    auto result = (*embed_tokens_per_layer_)(inputs);
    result = mx::multiply(result, scalar_like(std::pow(args_.hidden_size_per_layer_input, 0.5), result));
    return mx::unflatten(result, -1, {args_.num_hidden_layers, args_.hidden_size_per_layer_input});
  }

  mx::array project_per_layer_inputs(const mx::array& h, const mx::array& per_layer_inputs) const {
    auto projection = (*per_layer_model_projection_)(h);
    projection = mx::multiply(projection, scalar_like(std::pow(args_.hidden_size, -0.5), projection));
    projection = mx::unflatten(projection, -1, {args_.num_hidden_layers, args_.hidden_size_per_layer_input});
    projection = (*per_layer_projection_norm_)(projection);
    return mx::multiply(mx::add(projection, per_layer_inputs), scalar_like(std::pow(2.0, -0.5), projection));
  }

  ModelArgs args_;
  nn::Embedding embed_tokens_;
  std::vector<DecoderLayer> layers_;
  nn::RMSNorm norm_;
  std::optional<nn::Embedding> embed_tokens_per_layer_;
  std::optional<nn::Linear> per_layer_model_projection_;
  std::optional<nn::RMSNorm> per_layer_projection_norm_;
  std::optional<nn::Linear> lm_head_;
  std::function<std::vector<mx::array>(const std::vector<mx::array>&)> softcap_;
  std::vector<int> previous_kvs_;
};

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

std::string shape_text(const mx::Shape& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

// gemma4_text's sanitize: rotary tables and activation-range statistics are not parameters, and
// KV-shared layers have no key/value projections of their own.
void sanitize(WeightBinder& w, const ModelArgs& args) {
  std::vector<std::string> dropped;
  for (const auto& [name, _] : w.remaining()) {
    bool drop = false;
    for (const char* part : {"self_attn.rotary_emb", "input_max", "input_min", "output_max", "output_min"})
      drop = drop || contains(name, part);
    const bool kv_part = contains(name, ".self_attn.k_proj") || contains(name, ".self_attn.v_proj") ||
                         contains(name, ".self_attn.k_norm");
    if (!drop && kv_part) {
      // int(k.split("layers.")[1].split(".")[0]); names it cannot parse are kept.
      const auto at = name.find("layers.");
      if (at != std::string::npos) {
        const auto digits = name.substr(at + 7, name.find('.', at + 7) - (at + 7));
        try {
          size_t used = 0;
          const int layer = std::stoi(digits, &used);
          drop = used == digits.size() && layer >= args.first_kv_shared();
        } catch (const std::exception&) {
        }
      }
    }
    if (drop) dropped.push_back(name);
  }
  for (const auto& name : dropped) w.discard(name);
  // The experts as Hugging Face stores them: one gate_up_proj [E, 2 * I, H], split in halves along
  // -2 into the SwitchGLU's gate and up projections, and down_proj. Each half is made contiguous as
  // sanitize does (map(mx.contiguous, mx.split(...))): a strided view takes another gather_mm path on
  // the GPU, with other bytes.
  std::vector<std::string> fused;
  for (const auto& [name, _] : w.remaining())
    if (name.ends_with(".experts.gate_up_proj") || name.ends_with(".experts.down_proj")) fused.push_back(name);
  for (const auto& name : fused) {
    auto v = *w.pop(name);
    if (name.ends_with(".down_proj")) {
      w.put(name.substr(0, name.size() - 10) + ".switch_glu.down_proj.weight", v);
      continue;
    }
    const std::string base = name.substr(0, name.size() - 13);
    const int axis = static_cast<int>(v.ndim()) - 2;
    if (axis < 0 || v.shape(axis) % 2)
      throw WeightsError(name + " has shape " + shape_text(v.shape()) +
                         ": its second-to-last axis must split into equal gate and up halves");
    const int half = v.shape(axis) / 2;
    mx::Shape start(v.ndim(), 0), stop = v.shape();
    stop[axis] = half;
    w.put(base + ".switch_glu.gate_proj.weight", mx::contiguous(mx::slice(v, start, stop)));
    start[axis] = half;
    stop[axis] = 2 * half;
    w.put(base + ".switch_glu.up_proj.weight", mx::contiguous(mx::slice(v, start, stop)));
  }
}

// gemma4.py's Model: the text model under language_model.
std::unique_ptr<CausalLM> build_gemma4(const io::ModelConfig& config, WeightBinder& weights) {
  auto f = config.fields();
  const auto& raw = config.raw();
  if (f.has("text_config") && !raw["text_config"].is_object())
    throw ConfigError(config.source() + ": 'text_config' must be an object (gemma4 keeps the text model's " +
                      "arguments there), got " + json_type_name(raw["text_config"]));
  // ModelArgs.__post_init__: the top-level vocab_size wins, and the head counts have their own defaults.
  json text = f.has("text_config") ? raw["text_config"] : json::object();
  text["vocab_size"] = f.value_or<int>("vocab_size", 262144);
  if (!text.contains("num_attention_heads")) text["num_attention_heads"] = 8;
  if (!text.contains("num_key_value_heads")) text["num_key_value_heads"] = 1;
  auto args = ModelArgs::from_fields(JsonFields(text, config.source() + ": text_config"));
  // sanitize(): without their "model." prefix, the vision and audio towers are dropped; the text
  // model's "model.language_model." becomes "language_model.model.".
  std::vector<std::string> names;
  for (const auto& [name, _] : weights.remaining()) names.push_back(name);
  for (const auto& name : names) {
    const bool under_model = name.rfind("model.", 0) == 0;
    const std::string k = under_model ? name.substr(6) : name;
    bool tower = false;
    for (const char* p : {"vision_tower", "multi_modal_projector", "audio_tower", "embed_audio", "embed_vision",
                          "vision_embedder"})
      tower = tower || k.rfind(p, 0) == 0;
    if (tower) {
      weights.discard(name);
    } else if (under_model && k.rfind("language_model.", 0) == 0) {
      weights.rename(name, "language_model.model." + k.substr(15));
    } else if (under_model) {
      weights.rename(name, k);
    }
  }
  sanitize(weights, args);
  return std::make_unique<Model>(std::move(args), weights, "language_model.");
}

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  if (config.model_type() == "gemma4" || config.model_type() == "gemma4_unified")
    return build_gemma4(config, weights);
  auto args = ModelArgs::from_fields(config.fields());
  sanitize(weights, args);
  return std::make_unique<Model>(std::move(args), weights, "");
}

}  // namespace mlxrt::model::gemma4_text
