// Port of mlx_lm/models/lfm2.py (mlx-lm 0.32.2): LFM2's hybrid decoder. Attention layers (the
// decoder skeleton's attention: per-head q/k RMSNorms named q_layernorm / k_layernorm, out_proj, a
// plain RoPE) over a KVCache; the others ShortConv, a gated depthwise convolution whose last
// conv_L_cache - 1 inputs live in an ArraysCache. Every layer's MLP is w2(swiglu(w1(x), w3(x))) with
// the width block_auto_adjust_ff_dim computes; the head is the tied embedding.
#include "mlxrt/model/families/lfm2.h"

#include <algorithm>

#include <mlx/ops.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/model/families/families.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::model::lfm2 {

using nlohmann::json;

namespace {

// A dataclass field without a default: it must be in config.json, though it may be None there.
const json& present(const JsonFields& f, const std::string& key) {
  if (!f.raw().contains(key)) throw ConfigError(f.source() + ": missing required key '" + key + "'");
  return f.raw()[key];
}

void positive(const JsonFields& f, const char* name, int v) {
  if (v < 1) throw ConfigError(f.source() + ": '" + name + "' must be a positive integer, got " + std::to_string(v));
}

// __post_init__: full_attn_idxs, else the indices of layer_types' "full_attention" entries.
std::vector<bool> attention_layers(const JsonFields& f, int layers, int& first) {
  std::vector<bool> is_attention(static_cast<size_t>(layers), false);
  const auto& raw = f.raw();
  const bool has_idxs = raw.contains("full_attn_idxs") && !raw["full_attn_idxs"].is_null();
  if (has_idxs) {
    const auto& idxs = raw["full_attn_idxs"];
    if (!idxs.is_array() || idxs.empty())
      throw ConfigError(f.source() + ": 'full_attn_idxs' must be a non-empty list of layer indices");
    for (const auto& i : idxs) {
      if (!i.is_number_integer() || i.get<int>() < 0 || i.get<int>() >= layers)
        throw ConfigError(f.source() + ": 'full_attn_idxs' holds " + i.dump() + ", not a layer index below " +
                          "'num_hidden_layers' (" + std::to_string(layers) + ")");
      is_attention[i.get<size_t>()] = true;
    }
    first = idxs.front().get<int>();  // Lfm2Model.fa_idx: the first listed
  } else {
    if (!raw.contains("layer_types") || raw["layer_types"].is_null())
      throw ConfigError(f.source() + ": missing 'full_attn_idxs' and 'layer_types' (one of them names the " +
                        "attention layers)");
    const auto& types = raw["layer_types"];
    if (!types.is_array() || static_cast<int>(types.size()) != layers)
      throw ConfigError(f.source() + ": 'layer_types' must list " + std::to_string(layers) +
                        " strings (one per layer, 'num_hidden_layers'), got " +
                        (types.is_array() ? std::to_string(types.size()) + " entries" : json_type_name(types)));
    first = -1;
    for (int i = 0; i < layers; ++i) {
      const auto& t = types[static_cast<size_t>(i)];
      if (!t.is_string() || (t != "full_attention" && t != "conv"))
        throw ConfigError(f.source() + ": 'layer_types' entry " + std::to_string(i) + " is " + t.dump() +
                          ", expected \"full_attention\" or \"conv\"");
      is_attention[static_cast<size_t>(i)] = t == "full_attention";
      if (t == "full_attention" && first < 0) first = i;
    }
    if (first < 0)
      throw ConfigError(f.source() + ": 'layer_types' names no \"full_attention\" layer (mlx-lm's Lfm2Model " +
                        "reads the first one's cache for the attention mask)");
  }
  if (std::all_of(is_attention.begin(), is_attention.end(), [](bool a) { return a; }))
    throw ConfigError(f.source() + ": every layer is an attention layer ('" +
                      std::string(has_idxs ? "full_attn_idxs" : "layer_types") +
                      "'); mlx-lm's Lfm2Model needs at least one conv layer");
  return is_attention;
}

nn::AttentionOptions attention_options(const Args& a, const std::string& source) {
  nn::AttentionOptions o;
  o.hidden_size = a.hidden_size;
  o.n_heads = a.num_attention_heads;
  o.n_kv_heads = a.num_key_value_heads;
  o.head_dim = a.hidden_size / a.num_attention_heads;
  o.scale = nn::default_scale(o.head_dim);
  o.qk_norm = nn::QkNorm::per_head;
  o.qk_norm_eps = a.norm_eps;
  o.rope = nn::Rope::initialize(o.head_dim, a.rope_theta, false, json(), std::nullopt, source);
  o.o_proj = "out_proj";
  o.q_norm = "q_layernorm";
  o.k_norm = "k_layernorm";
  return o;
}

// lfm2's own fields: the MLP's width.
struct MlpArgs {
  int block_dim, block_multiple_of, block_ff_dim;
  std::optional<double> block_ffn_dim_multiplier;
  bool block_auto_adjust_ff_dim;

  // MLP.__init__'s ff_dim, in Python's arithmetic: int() truncates the float quotient and product.
  int ff_dim() const {
    int ff = block_ff_dim;
    if (!block_auto_adjust_ff_dim) return ff;
    ff = static_cast<int>(2.0 * ff / 3.0);
    if (block_ffn_dim_multiplier) ff = static_cast<int>(*block_ffn_dim_multiplier * ff);
    return block_multiple_of * ((ff + block_multiple_of - 1) / block_multiple_of);
  }

  static MlpArgs from_config(const JsonFields& f) {
    MlpArgs m;
    present(f, "block_dim");
    m.block_dim = f.required<int>("block_dim");
    present(f, "block_multiple_of");
    present(f, "block_ffn_dim_multiplier");
    m.block_ffn_dim_multiplier = f.optional<double>("block_ffn_dim_multiplier");
    present(f, "block_auto_adjust_ff_dim");
    m.block_auto_adjust_ff_dim = f.required<bool>("block_auto_adjust_ff_dim");
    m.block_multiple_of = m.block_auto_adjust_ff_dim ? f.required<int>("block_multiple_of")
                                                     : f.value_or<int>("block_multiple_of", 1);
    // __post_init__: block_ff_dim, else intermediate_size.
    auto ff = f.optional<int>("block_ff_dim");
    if (!ff) ff = f.optional<int>("intermediate_size");
    if (!ff) throw ConfigError(f.source() + ": Config must specify either 'block_ff_dim' or 'intermediate_size'");
    m.block_ff_dim = *ff;
    positive(f, "block_dim", m.block_dim);
    if (m.block_auto_adjust_ff_dim) positive(f, "block_multiple_of", m.block_multiple_of);
    if (m.ff_dim() < 1)
      throw ConfigError(f.source() + ": the MLP width from 'block_ff_dim' / 'intermediate_size' (" +
                        std::to_string(m.block_ff_dim) + ") must be positive, got " + std::to_string(m.ff_dim()));
    return m;
  }
};

}  // namespace

Args common_args(const JsonFields& f) {
  Args a;
  a.model_type = f.required<std::string>("model_type");
  a.vocab_size = f.required<int>("vocab_size");
  a.hidden_size = f.required<int>("hidden_size");
  a.num_hidden_layers = f.required<int>("num_hidden_layers");
  a.num_attention_heads = f.required<int>("num_attention_heads");
  // None falls back to num_attention_heads (lfm2.py's __post_init__).
  present(f, "num_key_value_heads");
  a.num_key_value_heads = f.value_or<int>("num_key_value_heads", a.num_attention_heads);
  present(f, "max_position_embeddings");  // required, though nn.RoPE does not read it
  a.norm_eps = f.required<float>("norm_eps");
  a.conv_bias = f.required<bool>("conv_bias");
  a.conv_L_cache = f.required<int>("conv_L_cache");
  a.rope_theta = f.value_or<double>("rope_theta", 1000000.0);
  if (f.has("rope_parameters")) {
    const auto& rp = f.raw()["rope_parameters"];
    if (!rp.is_object())
      throw ConfigError(f.source() + ": 'rope_parameters' must be an object, got " + json_type_name(rp));
    if (rp.contains("rope_theta")) a.rope_theta = JsonFields(rp, f.source() + ": rope_parameters").required<double>("rope_theta");
  }
  positive(f, "vocab_size", a.vocab_size);
  positive(f, "hidden_size", a.hidden_size);
  positive(f, "num_hidden_layers", a.num_hidden_layers);
  positive(f, "num_attention_heads", a.num_attention_heads);
  positive(f, "num_key_value_heads", a.num_key_value_heads);
  if (a.hidden_size < a.num_attention_heads)
    throw ConfigError(f.source() + ": 'hidden_size' (" + std::to_string(a.hidden_size) + ") leaves no head size for " +
                      std::to_string(a.num_attention_heads) + " 'num_attention_heads'");
  if (a.num_attention_heads % a.num_key_value_heads != 0)
    throw ConfigError(f.source() + ": 'num_attention_heads' (" + std::to_string(a.num_attention_heads) +
                      ") must be divisible by 'num_key_value_heads' (" + std::to_string(a.num_key_value_heads) + ")");
  if (a.conv_L_cache < 2)
    throw ConfigError(f.source() + ": 'conv_L_cache' must be at least 2 (the convolution keeps conv_L_cache - 1 " +
                      "inputs between calls), got " + std::to_string(a.conv_L_cache));
  int first = 0;
  a.is_attention = attention_layers(f, a.num_hidden_layers, first);
  a.fa_idx = first;
  return a;
}

ShortConv::ShortConv(const Args& args, WeightBinder& w, const std::string& path)
    : hidden_size_(args.hidden_size),
      L_cache_(args.conv_L_cache),
      in_proj_(nn::Linear::load(w, path + ".in_proj", args.hidden_size, 3 * args.hidden_size, args.conv_bias)),
      out_proj_(nn::Linear::load(w, path + ".out_proj", args.hidden_size, args.hidden_size, args.conv_bias)),
      conv_weight_(w.take(path + ".conv.weight", {args.hidden_size, args.conv_L_cache, 1})) {
  if (args.conv_bias) conv_bias_ = w.take(path + ".conv.bias", {args.hidden_size});
}

mx::array ShortConv::operator()(const mx::array& x, cache::ArraysCache* cache) const {
  auto BCx = mx::split(in_proj_(x), 3, -1);  // B, C, x
  // A single sequence's create_ssm_mask is None: no positions to zero.
  auto Bx = mx::multiply(BCx[0], BCx[2]);
  const int batch = Bx.shape(0), t = Bx.shape(1), n_keep = L_cache_ - 1;
  if (cache) {
    auto state = (*cache)[0] ? *(*cache)[0] : mx::zeros({batch, n_keep, hidden_size_}, Bx.dtype());
    Bx = mx::concatenate({state, Bx}, 1);
    const int length = Bx.shape(1);
    cache->set(0, mx::contiguous(mx::slice(Bx, {0, length - n_keep, 0}, {batch, length, hidden_size_})));
    cache->advance(t);
  } else {
    Bx = mx::pad(Bx, std::vector<std::pair<int, int>>{{0, 0}, {n_keep, 0}, {0, 0}});
  }
  auto conv_out = mx::conv1d(Bx, conv_weight_, 1, 0, 1, hidden_size_);
  if (conv_bias_) conv_out = mx::add(conv_out, *conv_bias_);
  return out_proj_(mx::multiply(BCx[1], conv_out));
}

mx::array DecoderLayer::operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const {
  auto normed = operator_norm(x);
  auto r = self_attn ? (*self_attn)(normed, mask, cache) : (*conv)(normed, static_cast<cache::ArraysCache*>(cache));
  auto h = mx::add(x, r);
  return mx::add(h, feed_forward(ffn_norm(h)));
}

Model::Model(Args args, WeightBinder& w, const FeedForwardFactory& feed_forward)
    : args_(std::move(args)),
      embed_tokens_(nn::Embedding::load(w, "model.embed_tokens", args_.vocab_size, args_.hidden_size)),
      embedding_norm_(nn::Norm::load(w, "model.embedding_norm", args_.hidden_size, args_.norm_eps)),
      fa_idx_(static_cast<size_t>(args_.fa_idx)) {
  const auto attention = attention_options(args_, w.config().source());
  for (int i = 0; i < args_.num_hidden_layers; ++i) {
    const auto p = "model.layers." + std::to_string(i);
    std::optional<nn::Attention> self_attn;
    std::optional<ShortConv> conv;
    if (args_.is_attention[static_cast<size_t>(i)]) {
      self_attn.emplace(attention, w, p + ".self_attn");
    } else {
      conv.emplace(args_, w, p + ".conv");
    }
    layers_.push_back(DecoderLayer{std::move(self_attn), std::move(conv), feed_forward(i, w, p + ".feed_forward"),
                                   nn::Norm::load(w, p + ".operator_norm", args_.hidden_size, args_.norm_eps),
                                   nn::Norm::load(w, p + ".ffn_norm", args_.hidden_size, args_.norm_eps)});
  }
}

mx::array Model::operator()(const mx::array& inputs, CacheList* cache) {
  return embed_tokens_.as_linear(hidden_states(inputs, cache));
}

mx::array Model::hidden_states(const mx::array& inputs, CacheList* cache) {
  auto h = embed_tokens_(inputs);
  auto layer_cache = [&](size_t i) { return cache ? (*cache)[i].get() : nullptr; };
  auto attn_mask = nn::create_attention_mask(h.shape(1), layer_cache(fa_idx_));
  for (size_t i = 0; i < layers_.size(); ++i) h = layers_[i](h, attn_mask, layer_cache(i));
  return embedding_norm_(h);
}

CacheList Model::make_cache() const {
  CacheList caches;
  for (const auto& l : layers_) {
    if (l.is_attention()) {
      caches.push_back(std::make_unique<cache::KVCache>());
    } else {
      caches.push_back(std::make_unique<cache::ArraysCache>(1));
    }
  }
  return caches;
}

std::vector<CausalLM::KvShape> Model::kv_shapes() const {
  // Conv layers hold no keys and values; their entries are never compared.
  const int head_dim = args_.hidden_size / args_.num_attention_heads;
  return std::vector<KvShape>(layers_.size(), {args_.num_key_value_heads, head_dim, head_dim});
}

std::vector<std::vector<mx::Shape>> Model::array_state_shapes() const {
  std::vector<std::vector<mx::Shape>> shapes;
  for (const auto& l : layers_) {
    if (l.is_attention()) {
      shapes.emplace_back();
    } else {
      shapes.push_back({{1, args_.conv_L_cache - 1, args_.hidden_size}});
    }
  }
  return shapes;
}

void sanitize_conv(WeightBinder& w) {
  for (const auto& name : w.names()) {
    if (name.find("conv.weight") == std::string::npos) continue;
    const auto v = w.remaining().at(name);
    if (v.ndim() == 3 && v.shape(-1) > v.shape(1)) w.replace(name, mx::transpose(v, {0, 2, 1}));
  }
}

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  const auto f = config.fields();
  auto args = common_args(f);
  const auto mlp = MlpArgs::from_config(f);
  sanitize_conv(weights);
  nn::MlpOptions o;
  o.dims = mlp.block_dim;
  o.hidden = mlp.ff_dim();
  o.gate_proj = "w1";
  o.up_proj = "w3";
  o.down_proj = "w2";
  auto feed_forward = [o](int, WeightBinder& w, const std::string& path) -> FeedForward {
    auto m = std::make_shared<nn::Mlp>(o, w, path);
    return [m](const mx::array& x) { return (*m)(x); };
  };
  return std::make_unique<Model>(std::move(args), weights, feed_forward);
}

}  // namespace mlxrt::model::lfm2
