#pragma once
/** What lfm2_moe.py shares with lfm2.py: the arguments both ModelArgs read, the ShortConv layer
 * (a gated causal depthwise convolution whose last conv_L_cache - 1 inputs live in an ArraysCache),
 * and the hybrid model: each layer either attention (the decoder skeleton's, with per-head q/k
 * RMSNorms) over a KVCache or a ShortConv, followed by the layer's feed-forward. */
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <mlx/array.h>

#include "mlxrt/cache/arrays_cache.h"
#include "mlxrt/io/model_config.h"
#include "mlxrt/model/causal_lm.h"
#include "mlxrt/model/nn/decoder.h"
#include "mlxrt/model/nn/linear.h"
#include "mlxrt/model/nn/weight_binder.h"

namespace mlxrt::model::lfm2 {

/** The fields lfm2.ModelArgs and lfm2_moe.ModelArgs have in common, after __post_init__. */
struct Args {
  std::string model_type;
  int vocab_size = 0, hidden_size = 0, num_hidden_layers = 0, num_attention_heads = 0, num_key_value_heads = 0;
  float norm_eps = 0;
  bool conv_bias = false;
  int conv_L_cache = 0;
  double rope_theta = 1000000.0;
  std::vector<bool> is_attention;  // per layer: index in full_attn_idxs (or "full_attention" in layer_types)
  int fa_idx = 0;                  // Lfm2Model.fa_idx: the first attention layer listed (its cache makes the mask)
};

/** Reads and checks the shared fields of `f` (config.json): the required ones (present, maybe
 * null where mlx-lm accepts None), rope_parameters' rope_theta, and the attention layers from
 * full_attn_idxs, else layer_types. */
Args common_args(const JsonFields& f);

/** ShortConv: in_proj into B, C, x; (B * x) through the depthwise conv over the cached inputs;
 * C * conv; out_proj. */
class ShortConv {
 public:
  ShortConv(const Args& args, WeightBinder& w, const std::string& path);
  mx::array operator()(const mx::array& x, cache::ArraysCache* cache) const;

 private:
  int hidden_size_, L_cache_;
  nn::Linear in_proj_, out_proj_;
  mx::array conv_weight_;  // [hidden, L_cache, 1]: depthwise, groups = hidden
  std::optional<mx::array> conv_bias_;
};

using FeedForward = std::function<mx::array(const mx::array&)>;
/** Builds layer `layer`'s feed_forward from its weights under `path`. */
using FeedForwardFactory = std::function<FeedForward(int layer, WeightBinder& w, const std::string& path)>;

/** Lfm2DecoderLayer: r = operator(operator_norm(x)); h = x + r; h + feed_forward(ffn_norm(h)). */
struct DecoderLayer {
  std::optional<nn::Attention> self_attn;
  std::optional<ShortConv> conv;
  FeedForward feed_forward;
  nn::Norm operator_norm, ffn_norm;

  bool is_attention() const { return self_attn.has_value(); }
  mx::array operator()(const mx::array& x, const nn::AttentionMask& mask, cache::Cache* cache) const;
};

/** Lfm2Model with Model's tied head: embed_tokens, the layers, embedding_norm, embed_tokens.as_linear. */
class Model final : public CausalLM {
 public:
  Model(Args args, WeightBinder& w, const FeedForwardFactory& feed_forward);

  mx::array operator()(const mx::array& inputs, CacheList* cache) override;
  /** model.model(...): the final norm's output, what the head reads. */
  mx::array hidden_states(const mx::array& inputs, CacheList* cache) override;
  bool has_hidden_states() const override { return true; }
  CacheList make_cache() const override;
  bool defines_make_cache() const override { return true; }
  std::vector<KvShape> kv_shapes() const override;
  std::vector<std::vector<mx::Shape>> array_state_shapes() const override;
  int vocab_size() const override { return args_.vocab_size; }

 private:
  Args args_;
  nn::Embedding embed_tokens_;
  std::vector<DecoderLayer> layers_;
  nn::Norm embedding_norm_;
  size_t fa_idx_ = 0;
};

/** sanitize's conv rewrite: a conv.weight stored as Hugging Face stores it ([C, 1, K]) moved to
 * MLX's [C, K, 1]. */
void sanitize_conv(WeightBinder& w);

}  // namespace mlxrt::model::lfm2
