// Port of mlx_lm/models/gemma3n.py (mlx-lm 0.32.2): Gemma 3n's text model as mlx-lm loads it (the
// arguments under text_config, the weights under model.language_model., the vision and audio towers
// dropped). AltUp keeps altup_num_inputs copies of the hidden state, of which one is "active": each
// layer predicts all of them from the active one, runs attention, a Laurel block and the MLP on the
// active prediction, then corrects all of them and adds its per-layer input to every copy but the
// first. The last num_kv_shared_layers layers read the keys and values of the last earlier layer of
// their type.
#include "mlxrt/model/families/families.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include <mlx/fast.h>
#include <mlx/ops.h>
#include <mlx/utils.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/cache/rotating_kv_cache.h"
#include "mlxrt/model/families/gemma_common.h"
#include "mlxrt/model/nn/activations.h"
#include "mlxrt/model/nn/attention.h"
#include "mlxrt/model/nn/linear.h"
#include "mlxrt/model/nn/norm.h"
#include "mlxrt/model/nn/rope.h"

namespace mlxrt::model::gemma3n {

namespace {

using nlohmann::json;

const std::string kFull = "full_attention";
const std::string kSliding = "sliding_attention";

// A Python float scalar in an MLX op takes the array's dtype.
mx::array scalar_like(double v, const mx::array& x) { return mx::array(static_cast<float>(v), x.dtype()); }

// x[i] along the first axis.
mx::array index0(const mx::array& x, int i) {
  mx::Shape start(x.ndim(), 0), stop = x.shape();
  start[0] = i;
  stop[0] = i + 1;
  return mx::squeeze(mx::slice(x, start, stop), 0);
}

// x[1:] along the first axis.
mx::array tail0(const mx::array& x) {
  mx::Shape start(x.ndim(), 0);
  start[0] = 1;
  return mx::slice(x, start, x.shape());
}

// x ** 2 and x ** 0.5 as mlx-lm writes them: power with a scalar of x's dtype.
mx::array rms_magnitude(const mx::array& x) {
  auto mean_square = mx::mean(mx::power(x, scalar_like(2, x)), -1, /*keepdims=*/true);
  return mx::power(mean_square, scalar_like(0.5, mean_square));
}

// TextConfig: every field but rope_scaling is required (the dataclass has no defaults); those the
// graph reads as Optional may be null.
struct TextConfig {
  int hidden_size, num_hidden_layers, num_attention_heads, head_dim, vocab_size, num_key_value_heads;
  int num_kv_shared_layers, vocab_size_per_layer_input, sliding_window, hidden_size_per_layer_input;
  int altup_num_inputs, altup_active_idx, laurel_rank;
  std::vector<int> intermediate_size;  // per layer (an int in the config applies to all)
  float rms_norm_eps;
  double rope_local_base_freq, rope_theta;
  std::optional<double> final_logit_softcapping, altup_coef_clip;
  std::vector<std::string> layer_types;
  std::vector<double> activation_sparsity;  // per layer; 0 when the pattern is null
  bool altup_correct_scale;

  static TextConfig from_fields(const JsonFields& f) {
    TextConfig c;
    // Present, possibly null: the dataclass requires the key, the graph tests it against None.
    auto nullable = [&](const std::string& key) {
      if (!f.raw().contains(key)) throw ConfigError(f.source() + ": missing required key '" + key + "'");
      return f.has(key);
    };
    f.required<std::string>("model_type");
    c.hidden_size = f.required<int>("hidden_size");
    c.num_hidden_layers = f.required<int>("num_hidden_layers");
    c.num_attention_heads = f.required<int>("num_attention_heads");
    c.head_dim = f.required<int>("head_dim");
    c.rms_norm_eps = f.required<float>("rms_norm_eps");
    c.vocab_size = f.required<int>("vocab_size");
    c.num_key_value_heads = f.required<int>("num_key_value_heads");
    c.num_kv_shared_layers = f.required<int>("num_kv_shared_layers");
    c.vocab_size_per_layer_input = f.required<int>("vocab_size_per_layer_input");
    c.sliding_window = f.required<int>("sliding_window");
    f.required<int>("max_position_embeddings");
    c.rope_local_base_freq = f.required<double>("rope_local_base_freq");
    c.rope_theta = f.required<double>("rope_theta");
    if (nullable("final_logit_softcapping")) c.final_logit_softcapping = f.required<double>("final_logit_softcapping");
    c.hidden_size_per_layer_input = f.required<int>("hidden_size_per_layer_input");
    c.altup_num_inputs = f.required<int>("altup_num_inputs");
    if (nullable("altup_coef_clip")) c.altup_coef_clip = f.required<double>("altup_coef_clip");
    c.altup_correct_scale = f.required<bool>("altup_correct_scale");
    c.altup_active_idx = f.required<int>("altup_active_idx");
    c.laurel_rank = f.required<int>("laurel_rank");
    c.intermediate_size_from(f);
    c.layer_types_from(f);
    if (nullable("activation_sparsity_pattern")) c.sparsity_from(f);
    else c.activation_sparsity.assign(c.num_hidden_layers, 0.0);
    c.check(f.source());
    return c;
  }

  void intermediate_size_from(const JsonFields& f) {
    if (!f.has("intermediate_size")) throw ConfigError(f.source() + ": missing required key 'intermediate_size'");
    const auto& raw = f.raw()["intermediate_size"];
    if (!raw.is_array()) {
      intermediate_size.assign(std::max(num_hidden_layers, 0), f.required<int>("intermediate_size"));
      return;
    }
    for (const auto& v : raw) {
      if (!v.is_number_integer())
        throw ConfigError(f.source() + ": 'intermediate_size' must be an integer or a list of integers, got " +
                          raw.dump());
      intermediate_size.push_back(v.get<int>());
    }
    if (static_cast<int>(intermediate_size.size()) < num_hidden_layers)
      throw ConfigError(f.source() + ": 'intermediate_size' lists " + std::to_string(intermediate_size.size()) +
                        " sizes, 'num_hidden_layers' is " + std::to_string(num_hidden_layers));
  }

  void layer_types_from(const JsonFields& f) {
    if (!f.has("layer_types")) throw ConfigError(f.source() + ": missing required key 'layer_types'");
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

  void sparsity_from(const JsonFields& f) {
    const auto& raw = f.raw()["activation_sparsity_pattern"];
    if (!raw.is_array())
      throw ConfigError(f.source() + ": 'activation_sparsity_pattern' must be a list of numbers or null, got " +
                        json_type_name(raw));
    for (const auto& v : raw) {
      if (!v.is_number())
        throw ConfigError(f.source() + ": 'activation_sparsity_pattern' entries must be numbers, got " + v.dump());
      activation_sparsity.push_back(v.get<double>());
    }
    if (static_cast<int>(activation_sparsity.size()) < num_hidden_layers)
      throw ConfigError(f.source() + ": 'activation_sparsity_pattern' lists " +
                        std::to_string(activation_sparsity.size()) + " layers, 'num_hidden_layers' is " +
                        std::to_string(num_hidden_layers));
  }

  // What mlx-lm fails on (in __init__, or inside the graph), refused before any weight is read.
  void check(const std::string& source) const {
    auto positive = [&](const char* key, int v) {
      if (v < 1) throw ConfigError(source + ": '" + key + "' must be a positive integer, got " + std::to_string(v));
    };
    positive("num_hidden_layers", num_hidden_layers);
    positive("num_attention_heads", num_attention_heads);
    positive("num_key_value_heads", num_key_value_heads);
    positive("head_dim", head_dim);
    positive("sliding_window", sliding_window);
    positive("hidden_size_per_layer_input", hidden_size_per_layer_input);
    positive("altup_num_inputs", altup_num_inputs);
    positive("laurel_rank", laurel_rank);
    if (num_attention_heads % num_key_value_heads)
      throw ConfigError(source + ": 'num_attention_heads' (" + std::to_string(num_attention_heads) +
                        ") must be a multiple of 'num_key_value_heads' (" + std::to_string(num_key_value_heads) + ")");
    if (altup_active_idx < -altup_num_inputs || altup_active_idx >= altup_num_inputs)
      throw ConfigError(source + ": 'altup_active_idx' (" + std::to_string(altup_active_idx) +
                        ") must index one of the 'altup_num_inputs' (" + std::to_string(altup_num_inputs) + ") inputs");
    if (num_kv_shared_layers < 0 || num_kv_shared_layers >= num_hidden_layers)
      throw ConfigError(source + ": 'num_kv_shared_layers' (" + std::to_string(num_kv_shared_layers) +
                        ") must be at least 0 and less than 'num_hidden_layers' (" +
                        std::to_string(num_hidden_layers) + ")");
    // The layers with caches of their own must hold both types: KV-shared layers read the last of
    // each, and the masks are made from the first of each.
    const auto concrete_begin = layer_types.begin(), concrete_end = layer_types.begin() + first_kv_shared();
    for (const auto& type : {kFull, kSliding})
      if (std::find(concrete_begin, concrete_end, type) == concrete_end)
        throw ConfigError(source + ": 'layer_types' has no \"" + type + "\" layer among the first " +
                          std::to_string(first_kv_shared()) + " (those not KV-shared, 'num_kv_shared_layers' " +
                          std::to_string(num_kv_shared_layers) + ")");
    for (int i = 0; i < num_hidden_layers; ++i)
      if (intermediate_size[i] < 1)
        throw ConfigError(source + ": 'intermediate_size' of layer " + std::to_string(i) +
                          " must be a positive integer, got " + std::to_string(intermediate_size[i]));
  }

  int first_kv_shared() const { return num_hidden_layers - num_kv_shared_layers; }
  bool is_full(int layer) const { return layer_types[layer] == kFull; }
  int active() const { return altup_active_idx < 0 ? altup_active_idx + altup_num_inputs : altup_active_idx; }
  // The last layer of `type` before the KV-shared ones.
  int last_concrete(const std::string& type) const {
    int idx = -1;
    for (int i = 0; i < first_kv_shared(); ++i)
      if (layer_types[i] == type) idx = i;
    return idx;
  }
  int first_of(const std::string& type) const {
    return static_cast<int>(std::find(layer_types.begin(), layer_types.end(), type) - layer_types.begin());
  }
};

struct Attention {
  int n_heads, n_kv_heads, head_dim;
  float eps;
  bool is_kv_shared_layer;
  nn::Linear q_proj, k_proj, v_proj, o_proj;
  nn::RMSNorm q_norm, k_norm;
  nn::Rope rope;

  Attention(const TextConfig& c, int idx, WeightBinder& w, const std::string& p)
      : n_heads(c.num_attention_heads),
        n_kv_heads(c.num_key_value_heads),
        head_dim(c.head_dim),
        eps(c.rms_norm_eps),
        is_kv_shared_layer(idx >= c.first_kv_shared()),
        q_proj(nn::Linear::load(w, p + ".q_proj", c.hidden_size, n_heads * head_dim, false)),
        k_proj(nn::Linear::load(w, p + ".k_proj", c.hidden_size, n_kv_heads * head_dim, false)),
        v_proj(nn::Linear::load(w, p + ".v_proj", c.hidden_size, n_kv_heads * head_dim, false)),
        o_proj(nn::Linear::load(w, p + ".o_proj", n_heads * head_dim, c.hidden_size, false)),
        q_norm(nn::RMSNorm::load(w, p + ".q_norm", head_dim, eps)),
        k_norm(nn::RMSNorm::load(w, p + ".k_norm", head_dim, eps)),
        // nn.RoPE over the whole head: the local base on sliding layers, rope_theta on full ones.
        rope(nn::Rope::initialize(head_dim, c.is_full(idx) ? c.rope_theta : c.rope_local_base_freq, false, json(),
                                  std::nullopt, w.config().source())) {}

  // A KV-shared layer with a cache attends over `shared` (what the owning layer's cache holds);
  // a layer with keys and values of its own stores what its cache returns there.
  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache, int offset,
                       std::optional<cache::CachedKV>& shared) const {
    const int B = x.shape(0), L = x.shape(1);
    auto queries = q_norm(mx::reshape(q_proj(x), {B, L, -1, head_dim}));
    std::optional<cache::CachedKV> kv;
    if (is_kv_shared_layer && cache) {
      if (!shared) throw std::logic_error("a KV-shared layer ran before the layer that owns its cache");
      kv = *shared;
    } else {
      auto keys = k_norm(mx::reshape(k_proj(x), {B, L, -1, head_dim}));
      keys = rope(mx::transpose(keys, {0, 2, 1, 3}), offset);
      // v_norm: an RMSNorm without a learnable scale.
      auto values = mx::fast::rms_norm(mx::reshape(v_proj(x), {B, L, -1, head_dim}), std::nullopt, eps);
      values = mx::transpose(values, {0, 2, 1, 3});
      kv = cache ? cache->update_and_fetch(keys, values) : cache::CachedKV{cache::PlainKV{keys, values}};
      if (cache) shared = kv;
    }
    queries = rope(mx::transpose(queries, {0, 2, 1, 3}), offset);
    auto output = nn::scaled_dot_product_attention(queries, *kv, 1.0f, mask);
    return o_proj(mx::reshape(mx::transpose(output, {0, 2, 1, 3}), {B, L, -1}));
  }
};

// down_proj(act(gate_proj(x)) * up_proj(x)); act keeps only the activations above mean + k * std
// (gelu_topk) on the layers with activation sparsity, plain gelu_approx elsewhere.
struct MLP {
  nn::Linear gate_proj, up_proj, down_proj;
  std::optional<mx::array> std_multiplier;

  MLP(const TextConfig& c, int idx, WeightBinder& w, const std::string& p)
      : gate_proj(nn::Linear::load(w, p + ".gate_proj", c.hidden_size, c.intermediate_size[idx], false)),
        up_proj(nn::Linear::load(w, p + ".up_proj", c.hidden_size, c.intermediate_size[idx], false)),
        down_proj(nn::Linear::load(w, p + ".down_proj", c.intermediate_size[idx], c.hidden_size, false)) {
    const double sparsity = c.activation_sparsity[idx];
    // math.sqrt(2.0) * mx.erfinv(2 * sparsity - 1): the argument a float32 scalar.
    if (sparsity > 0)
      std_multiplier = mx::multiply(mx::erfinv(mx::array(static_cast<float>(2 * sparsity - 1))),
                                    mx::array(static_cast<float>(std::sqrt(2.0))));
  }

  mx::array operator()(const mx::array& x) const {
    auto gate = gate_proj(x);
    auto activations = std_multiplier ? nn::gelu_topk(gate, *std_multiplier) : nn::gelu_approx(gate);
    return down_proj(mx::multiply(activations, up_proj(x)));
  }
};

// Learned Augmented Residual Layer: x + norm(right(left(x))).
struct LaurelBlock {
  nn::Linear linear_left, linear_right;
  nn::RMSNorm post_laurel_norm;

  LaurelBlock(const TextConfig& c, WeightBinder& w, const std::string& p)
      : linear_left(nn::Linear::load(w, p + ".linear_left", c.hidden_size, c.laurel_rank, false)),
        linear_right(nn::Linear::load(w, p + ".linear_right", c.laurel_rank, c.hidden_size, false)),
        post_laurel_norm(nn::RMSNorm::load(w, p + ".post_laurel_norm", c.hidden_size, c.rms_norm_eps)) {}
  mx::array operator()(const mx::array& x) const {
    return mx::add(x, post_laurel_norm(linear_right(linear_left(x))));
  }
};

// Alternating Updates: predictions of every input from the router's view of the active one, and
// their correction by what the layer made of the active prediction.
struct AltUp {
  int n, active, hidden_size;
  std::optional<double> coef_clip;
  mx::array correct_output_scale;
  mx::array correction_coefs, prediction_coefs;  // nn.Linear weights, used in float32, clipped
  nn::Linear modality_router;
  nn::RMSNorm router_norm;

  AltUp(const TextConfig& c, WeightBinder& w, const std::string& p)
      : n(c.altup_num_inputs),
        active(c.active()),
        hidden_size(c.hidden_size),
        coef_clip(c.altup_coef_clip),
        correct_output_scale(w.take(p + ".correct_output_scale", {c.hidden_size})),
        correction_coefs(w.take(p + ".correction_coefs.weight", {n, n})),
        prediction_coefs(w.take(p + ".prediction_coefs.weight", {n * n, n})),
        modality_router(nn::Linear::load(w, p + ".modality_router", c.hidden_size, n, false)),
        router_norm(nn::RMSNorm::load(w, p + ".router_norm", c.hidden_size, c.rms_norm_eps)) {}

  mx::array compute_router_modalities(const mx::array& x) const {
    auto router_inputs = router_norm(x);
    router_inputs = mx::multiply(router_inputs, scalar_like(std::pow(hidden_size, -1.0), router_inputs));
    return mx::tanh(mx::astype(modality_router(router_inputs), mx::float32));
  }

  // The weight as predict/correct leave it on the module: float32, clipped to +-altup_coef_clip.
  mx::array coefs(const mx::array& weight) const {
    auto w = mx::astype(weight, mx::float32);
    if (coef_clip)
      w = mx::clip(w, mx::array(static_cast<float>(-*coef_clip)), mx::array(static_cast<float>(*coef_clip)));
    return w;
  }

  // x [n, B, L, H] -> predictions [n, B, L, H]
  mx::array predict(const mx::array& x) const {
    auto modalities = compute_router_modalities(index0(x, active));  // [B, L, n]
    auto all_coefs = mx::matmul(modalities, mx::transpose(coefs(prediction_coefs)));
    auto shape = modalities.shape();
    shape.back() = n;
    shape.push_back(n);
    all_coefs = mx::transpose(mx::reshape(all_coefs, shape), {0, 1, 3, 2});
    auto x_up = mx::astype(x, mx::float32);
    auto predictions = mx::matmul(mx::transpose(x_up, {1, 2, 3, 0}), all_coefs);
    predictions = mx::add(mx::transpose(predictions, {3, 0, 1, 2}), x_up);
    return mx::astype(predictions, x.dtype());
  }

  mx::array correct(const mx::array& predictions, const mx::array& activated) const {
    auto modalities = compute_router_modalities(activated);
    auto all_coefs = mx::matmul(modalities, mx::transpose(coefs(correction_coefs)));
    all_coefs = mx::add(all_coefs, mx::array(1.0f, all_coefs.dtype()));
    auto innovation = mx::subtract(activated, index0(predictions, active));
    all_coefs = mx::moveaxis(all_coefs, 2, 0);  // [n, B, L]
    auto corrected = mx::multiply(mx::expand_dims(innovation, 0), mx::expand_dims(all_coefs, -1));
    corrected = mx::add(corrected, predictions);
    return mx::astype(corrected, activated.dtype());
  }
};

struct DecoderLayer {
  int active;
  bool correct_scale;
  Attention self_attn;
  MLP mlp;
  nn::RMSNorm input_layernorm, post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm;
  AltUp altup;
  LaurelBlock laurel;
  nn::Linear per_layer_input_gate, per_layer_projection;
  nn::RMSNorm post_per_layer_input_norm;

  DecoderLayer(const TextConfig& c, int idx, WeightBinder& w, const std::string& p)
      : active(c.active()),
        correct_scale(c.altup_correct_scale),
        self_attn(c, idx, w, p + ".self_attn"),
        mlp(c, idx, w, p + ".mlp"),
        input_layernorm(nn::RMSNorm::load(w, p + ".input_layernorm", c.hidden_size, c.rms_norm_eps)),
        post_attention_layernorm(
            nn::RMSNorm::load(w, p + ".post_attention_layernorm", c.hidden_size, c.rms_norm_eps)),
        pre_feedforward_layernorm(
            nn::RMSNorm::load(w, p + ".pre_feedforward_layernorm", c.hidden_size, c.rms_norm_eps)),
        post_feedforward_layernorm(
            nn::RMSNorm::load(w, p + ".post_feedforward_layernorm", c.hidden_size, c.rms_norm_eps)),
        altup(c, w, p + ".altup"),
        laurel(c, w, p + ".laurel"),
        per_layer_input_gate(
            nn::Linear::load(w, p + ".per_layer_input_gate", c.hidden_size, c.hidden_size_per_layer_input, false)),
        per_layer_projection(
            nn::Linear::load(w, p + ".per_layer_projection", c.hidden_size_per_layer_input, c.hidden_size, false)),
        post_per_layer_input_norm(
            nn::RMSNorm::load(w, p + ".post_per_layer_input_norm", c.hidden_size, c.rms_norm_eps)) {}

  // x [n, B, L, H] -> [n, B, L, H]
  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache,
                       const mx::array& per_layer_input, int offset, std::optional<cache::CachedKV>& shared) const {
    auto predictions = altup.predict(x);
    auto active_prediction = index0(predictions, active);
    auto active_prediction_normed = input_layernorm(active_prediction);
    auto laurel_output = laurel(active_prediction_normed);
    auto attn = post_attention_layernorm(self_attn(active_prediction_normed, mask, cache, offset, shared));
    auto attn_gated = mx::add(active_prediction, attn);
    auto attn_laurel = mx::add(attn_gated, laurel_output);
    attn_laurel = mx::multiply(attn_laurel, scalar_like(std::pow(2.0, -0.5), attn_laurel));
    auto attn_ffw_norm = post_feedforward_layernorm(mlp(pre_feedforward_layernorm(attn_laurel)));
    auto corrected = altup.correct(predictions, mx::add(attn_laurel, attn_ffw_norm));
    if (corrected.shape(0) == 1) return corrected;  // corrected[1:] is empty
    auto first_prediction = index0(corrected, active);
    if (correct_scale) first_prediction = mx::multiply(first_prediction, altup.correct_output_scale);
    first_prediction = nn::gelu_approx(per_layer_input_gate(first_prediction));
    first_prediction = mx::multiply(first_prediction, per_layer_input);
    first_prediction = post_per_layer_input_norm(per_layer_projection(first_prediction));
    return mx::concatenate({mx::slice(corrected, {0, 0, 0, 0}, {1, corrected.shape(1), corrected.shape(2),
                                                                 corrected.shape(3)}),
                            mx::add(tail0(corrected), first_prediction)},
                           0);
  }
};

class Model final : public CausalLM {
 public:
  Model(TextConfig c, WeightBinder& w, const std::string& p)
      : c_(std::move(c)),
        embed_tokens_(nn::Embedding::load(w, p + "embed_tokens", c_.vocab_size, c_.hidden_size)),
        embed_tokens_per_layer_(nn::Embedding::load(w, p + "embed_tokens_per_layer", c_.vocab_size_per_layer_input,
                                                    c_.num_hidden_layers * c_.hidden_size_per_layer_input)),
        per_layer_model_projection_(nn::Linear::load(w, p + "per_layer_model_projection", c_.hidden_size,
                                                     c_.num_hidden_layers * c_.hidden_size_per_layer_input, false)),
        per_layer_projection_norm_(
            nn::RMSNorm::load(w, p + "per_layer_projection_norm", c_.hidden_size_per_layer_input, c_.rms_norm_eps)),
        norm_(nn::RMSNorm::load(w, p + "norm", c_.hidden_size, c_.rms_norm_eps)) {
    for (int i = 0; i < c_.num_hidden_layers; ++i) layers_.emplace_back(c_, i, w, p + "layers." + std::to_string(i));
    for (int i = 1; i < c_.altup_num_inputs; ++i) {
      altup_projections_.push_back(nn::Linear::load(w, p + "altup_projections." + std::to_string(i - 1),
                                                    c_.hidden_size, c_.hidden_size, false));
      altup_unembed_projections_.push_back(nn::Linear::load(
          w, p + "altup_unembed_projections." + std::to_string(i - 1), c_.hidden_size, c_.hidden_size, false));
    }
    if (c_.final_logit_softcapping)
      softcap_ = gemma_common::compiled_softcap(static_cast<float>(*c_.final_logit_softcapping));
    // layer_idx_to_cache_idx: a KV-shared layer reads the last earlier layer of its type.
    for (int i = 0; i < c_.num_hidden_layers; ++i)
      cache_idx_.push_back(i < c_.first_kv_shared() ? i : c_.last_concrete(c_.layer_types[i]));
  }

  mx::array operator()(const mx::array& inputs, CacheList* cache) override {
    auto h = embed_tokens_(inputs);
    h = mx::multiply(h, scalar_like(std::pow(c_.hidden_size, 0.5), h));
    auto per_layer_inputs = project_per_layer_inputs(h, get_per_layer_inputs(inputs));  // [B, L, layers, D]
    auto layer_cache = [&](int i) -> cache::Cache* { return cache ? (*cache)[i].get() : nullptr; };
    const int L = h.shape(1);
    auto global_mask = nn::create_attention_mask(L, layer_cache(c_.first_of(kFull)));
    auto sliding_window_mask = nn::create_attention_mask(L, layer_cache(c_.first_of(kSliding)), c_.sliding_window);
    const auto h0 = h;
    const auto lowest = mx::finfo(h0.dtype()).min;
    // The other AltUp inputs: projections of the embedding, scaled to its magnitude.
    std::vector<mx::array> h_list{h0};
    for (const auto& proj : altup_projections_) h_list.push_back(proj(h0));
    h = rescale_tail(mx::stack(h_list, 0), rms_magnitude(h0), lowest);
    // One position offset for the whole forward: KV-shared layers read caches already advanced.
    const int offset = cache && !cache->empty() ? (*cache)[0]->offset() : 0;
    std::vector<std::optional<cache::CachedKV>> fetched(c_.num_hidden_layers);
    const auto& s = per_layer_inputs.shape();
    for (int i = 0; i < c_.num_hidden_layers; ++i) {
      auto per_layer_input = mx::squeeze(mx::slice(per_layer_inputs, {0, 0, i, 0}, {s[0], s[1], i + 1, s[3]}), 2);
      h = layers_[i](h, c_.is_full(i) ? global_mask : sliding_window_mask, layer_cache(cache_idx_[i]),
                     per_layer_input, offset, fetched[cache_idx_[i]]);
    }
    // The inputs back to one: the unembedding projections, scaled to the first's magnitude, averaged.
    auto target_magnitude = rms_magnitude(index0(h, 0));
    if (!altup_unembed_projections_.empty()) {
      std::vector<mx::array> parts{mx::expand_dims(index0(h, 0), 0)};
      for (size_t i = 0; i < altup_unembed_projections_.size(); ++i)
        parts.push_back(mx::expand_dims(altup_unembed_projections_[i](index0(h, static_cast<int>(i) + 1)), 0));
      h = mx::concatenate(parts, 0);
    }
    h = mx::mean(rescale_tail(h, target_magnitude, lowest), 0);
    auto out = embed_tokens_.as_linear(norm_(h));
    return softcap_ ? softcap_({out})[0] : out;
  }

  CacheList make_cache() const override {
    CacheList caches;
    for (int i = 0; i < c_.first_kv_shared(); ++i) {
      if (c_.is_full(i)) {
        caches.push_back(std::make_unique<cache::KVCache>());
      } else {
        caches.push_back(std::make_unique<cache::RotatingKVCache>(c_.sliding_window, /*keep=*/0));
      }
    }
    return caches;
  }
  bool defines_make_cache() const override { return true; }
  std::vector<KvShape> kv_shapes() const override {
    return std::vector<KvShape>(c_.first_kv_shared(), {c_.num_key_value_heads, c_.head_dim, c_.head_dim});
  }
  int vocab_size() const override { return c_.vocab_size; }

 private:
  // h[1:] = h[1:] * (target_magnitude / mx.maximum(mags, mx.finfo(h0.dtype).min))
  static mx::array rescale_tail(const mx::array& h, const mx::array& target_magnitude, double lowest) {
    if (h.shape(0) == 1) return h;
    auto rest = tail0(h);
    auto mags = rms_magnitude(rest);
    auto scale = mx::divide(target_magnitude, mx::maximum(mags, scalar_like(lowest, mags)));
    auto first = mx::slice(h, {0, 0, 0, 0}, {1, h.shape(1), h.shape(2), h.shape(3)});
    return mx::concatenate({first, mx::multiply(rest, scale)}, 0);
  }

  // Token ids past the per-layer vocabulary read row 0; the rows scaled by sqrt(per-layer size).
  mx::array get_per_layer_inputs(const mx::array& input_ids) const {
    auto in_vocab = mx::less(input_ids, mx::array(c_.vocab_size_per_layer_input, input_ids.dtype()));
    auto tokens = mx::where(in_vocab, input_ids, mx::zeros_like(input_ids));
    auto result = embed_tokens_per_layer_(tokens);
    result = mx::multiply(result, scalar_like(std::pow(c_.hidden_size_per_layer_input, 0.5), result));
    auto shape = input_ids.shape();
    shape.push_back(c_.num_hidden_layers);
    shape.push_back(c_.hidden_size_per_layer_input);
    return mx::reshape(result, shape);
  }

  mx::array project_per_layer_inputs(const mx::array& inputs_embeds, const mx::array& per_layer_inputs) const {
    auto projection = per_layer_model_projection_(inputs_embeds);
    projection = mx::multiply(projection, scalar_like(std::pow(c_.hidden_size, -0.5), projection));
    auto shape = inputs_embeds.shape();
    shape.back() = c_.num_hidden_layers;
    shape.push_back(c_.hidden_size_per_layer_input);
    projection = per_layer_projection_norm_(mx::reshape(projection, shape));
    auto sum = mx::add(projection, per_layer_inputs);
    return mx::multiply(sum, scalar_like(std::pow(2.0, -0.5), sum));
  }

  TextConfig c_;
  nn::Embedding embed_tokens_, embed_tokens_per_layer_;
  nn::Linear per_layer_model_projection_;
  nn::RMSNorm per_layer_projection_norm_;
  std::vector<DecoderLayer> layers_;
  std::vector<nn::Linear> altup_projections_, altup_unembed_projections_;
  nn::RMSNorm norm_;
  std::function<std::vector<mx::array>(const std::vector<mx::array>&)> softcap_;
  std::vector<int> cache_idx_;
};

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  const auto& raw = config.raw();
  if (!raw.contains("text_config") || !raw["text_config"].is_object())
    throw ConfigError(config.source() + ": 'text_config' must be an object (gemma3n keeps the text model's " +
                      "arguments there)");
  auto c = TextConfig::from_fields(JsonFields(raw["text_config"], config.source() + ": text_config"));
  // sanitize(): the towers under model. are not part of the language model.
  std::vector<std::string> towers;
  for (const auto& [name, _] : weights.remaining())
    for (const char* tower : {"vision_tower", "audio_tower", "embed_audio", "embed_vision"}) {
      const std::string key = std::string("model.") + tower;
      if (name == key || name.rfind(key + ".", 0) == 0) towers.push_back(name);
    }
  for (const auto& name : towers) weights.discard(name);
  return std::make_unique<Model>(std::move(c), weights, "model.language_model.");
}

}  // namespace mlxrt::model::gemma3n
