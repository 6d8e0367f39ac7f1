// Port of mlx_lm/models/phixtral.py (mlx-lm 0.32.2): Phixtral (Phi-2 experts merged into a mixture;
// mlx-lm also runs "phi-msft" checkpoints through it). A Phi-2-shaped parallel block: one LayerNorm
// `ln` feeds the attention `mixer` and the mixture `moe`, out = attn + moe + x. The attention is the
// skeleton's (nn/decoder.h) with one fused Wqkv split in thirds, out_proj, biases on both, a plain
// RoPE over rotary_dim dimensions, float32 queries and scale sqrt(1 / head_dim). The mixture routes
// with a bias-free `gate`: the top k logits (argpartition of the negated logits), a precise softmax
// over those, then SwitchMLP experts (fc1, gelu_approx, fc2, with biases). The head is its own
// module: lm_head.ln (LayerNorm) then lm_head.linear (with a bias).
#include <cmath>

#include <mlx/ops.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/model/families/families.h"
#include "mlxrt/model/nn/decoder.h"
#include "mlxrt/model/nn/moe.h"
#include "mlxrt/model/nn/switch_layers.h"

namespace mlxrt::model::phixtral {

namespace {

using nlohmann::json;

struct ModelArgs {
  std::string model_type;
  int num_vocab = 51200, model_dim = 2560, num_heads = 32, num_layers = 32, rotary_dim = 32;
  int num_experts_per_tok = 2, num_local_experts = 4;

  static ModelArgs from_config(const io::ModelConfig& config) {
    auto f = config.fields();
    const auto& source = config.source();
    ModelArgs a;
    a.model_type = f.required<std::string>("model_type");
    a.num_vocab = f.value_or<int>("num_vocab", a.num_vocab);
    a.model_dim = f.value_or<int>("model_dim", a.model_dim);
    a.num_heads = f.value_or<int>("num_heads", a.num_heads);
    a.num_layers = f.value_or<int>("num_layers", a.num_layers);
    a.rotary_dim = f.value_or<int>("rotary_dim", a.rotary_dim);
    a.num_experts_per_tok = f.value_or<int>("num_experts_per_tok", a.num_experts_per_tok);
    a.num_local_experts = f.value_or<int>("num_local_experts", a.num_local_experts);
    if (a.num_heads < 1 || a.model_dim % a.num_heads != 0)
      throw ConfigError(source + ": model_dim must be divisible by num_heads (got model_dim " +
                        std::to_string(a.model_dim) + " and num_heads " + std::to_string(a.num_heads) + ")");
    const int head_dim = a.model_dim / a.num_heads;
    if (a.rotary_dim < 0 || a.rotary_dim > head_dim)
      throw ConfigError(source + ": rotary_dim must be between 0 and the head size model_dim / num_heads = " +
                        std::to_string(head_dim) + " (got " + std::to_string(a.rotary_dim) + ")");
    nn::check_expert_counts(a.num_local_experts, a.num_experts_per_tok, "num_local_experts", source);
    return a;
  }
};

nn::AttentionOptions mixer_options(const ModelArgs& a, const std::string& source) {
  nn::AttentionOptions o;
  o.hidden_size = a.model_dim;
  o.n_heads = o.n_kv_heads = a.num_heads;
  o.head_dim = a.model_dim / a.num_heads;
  o.scale = static_cast<float>(std::sqrt(1.0 / o.head_dim));
  o.qkv_bias = o.o_bias = true;
  o.fused_qkv = true;  // mx.split(qkv, 3): with as many key/value heads as query heads, the same thirds
  o.qkv_proj = "Wqkv";
  o.o_proj = "out_proj";
  o.sdpa_cast = nn::SdpaCast::queries_f32;
  o.rope = nn::Rope::initialize(a.rotary_dim, 10000.0, false, json(), std::nullopt, source);
  return o;
}

constexpr float kLayerNormEps = 1e-5f;  // nn.LayerNorm's default

struct MOE {
  int k;
  nn::SwitchMLP switch_mlp;
  nn::Linear gate;

  MOE(const ModelArgs& a, WeightBinder& w, const std::string& p)
      : k(a.num_experts_per_tok),
        switch_mlp(nn::SwitchMLP::load(w, p + ".switch_mlp", a.model_dim, 4 * a.model_dim, a.num_local_experts,
                                       /*bias=*/true)),
        gate(nn::Linear::load(w, p + ".gate", a.model_dim, a.num_local_experts, false)) {}

  mx::array operator()(const mx::array& x) const {
    auto r = nn::route(gate(x), k, nn::RouterOrder::top_k_then_softmax, nn::TopK::negated_head);
    return nn::combine_experts(switch_mlp(x, r.indices), r.scores);
  }
};

struct ParallelBlock {
  nn::Attention mixer;
  nn::Norm ln;
  MOE moe;

  ParallelBlock(const ModelArgs& a, WeightBinder& w, const std::string& p)
      : mixer(mixer_options(a, w.config().source()), w, p + ".mixer"),
        ln(nn::Norm::load(w, p + ".ln", a.model_dim, kLayerNormEps, nn::Norm::Kind::layer)),
        moe(a, w, p + ".moe") {}

  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const {
    auto h = ln(x);
    auto attn_h = mixer(h, mask, cache);
    auto ff_h = moe(h);
    return mx::add(mx::add(attn_h, ff_h), x);
  }
};

class Model final : public CausalLM {
 public:
  Model(ModelArgs args, WeightBinder& w) : args_(std::move(args)) {
    sanitize(w);
    wte_.emplace(nn::Embedding::load(w, "transformer.embd.wte", args_.num_vocab, args_.model_dim));
    for (int i = 0; i < args_.num_layers; ++i) h_.emplace_back(args_, w, "transformer.h." + std::to_string(i));
    head_ln_.emplace(nn::Norm::load(w, "lm_head.ln", args_.model_dim, kLayerNormEps, nn::Norm::Kind::layer));
    head_linear_.emplace(nn::Linear::load(w, "lm_head.linear", args_.model_dim, args_.num_vocab, true));
  }

  mx::array operator()(const mx::array& inputs, CacheList* cache) override {
    auto mask = nn::create_attention_mask(inputs.shape(1), cache ? (*cache)[0].get() : nullptr);
    auto x = (*wte_)(inputs);
    for (size_t i = 0; i < h_.size(); ++i) x = h_[i](x, mask, cache ? (*cache)[i].get() : nullptr);
    return (*head_linear_)((*head_ln_)(x));
  }

  CacheList make_cache() const override {
    CacheList caches;
    for (size_t i = 0; i < h_.size(); ++i) caches.push_back(std::make_unique<cache::KVCache>());
    return caches;
  }
  std::vector<KvShape> kv_shapes() const override {
    const int head_dim = args_.model_dim / args_.num_heads;
    return std::vector<KvShape>(h_.size(), {args_.num_heads, head_dim, head_dim});
  }
  int vocab_size() const override { return args_.num_vocab; }

 private:
  // sanitize(): experts saved one by one (moe.mlp.N.fc1 / fc2) are stacked into moe.switch_mlp,
  // quantized tensors and biases included.
  void sanitize(WeightBinder& w) const {
    if (!w.has("transformer.h.0.moe.mlp.0.fc1.weight")) return;
    for (int l = 0; l < args_.num_layers; ++l) {
      const std::string prefix = "transformer.h." + std::to_string(l) + ".moe";
      w.stack_experts(prefix + ".mlp", prefix + ".switch_mlp", args_.num_local_experts,
                      {{"fc1", "fc1"}, {"fc2", "fc2"}}, {"weight", "scales", "biases", "bias"});
    }
  }

  ModelArgs args_;
  std::optional<nn::Embedding> wte_;
  std::vector<ParallelBlock> h_;
  std::optional<nn::Norm> head_ln_;
  std::optional<nn::Linear> head_linear_;
};

}  // namespace

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights) {
  return std::make_unique<Model>(ModelArgs::from_config(config), weights);
}

}  // namespace mlxrt::model::phixtral
