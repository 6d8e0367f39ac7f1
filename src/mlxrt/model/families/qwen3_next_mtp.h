#pragma once
/** The multi-token-prediction (MTP) head that Qwen3-Next and Qwen3.5 checkpoints carry under
 * `mtp.` (mlx-lm drops it in sanitize; mlxrt binds it on request: LoadOptions::multi_token_prediction).
 *
 * What it is, from the public model definitions (vLLM's qwen3_next_mtp.py and qwen3_5_mtp.py, the
 * Hugging Face checkpoints' tensor names and configs):
 *  - tensors mtp.pre_fc_norm_embedding, mtp.pre_fc_norm_hidden, mtp.fc [H, 2H], mtp.layers.0.*
 *    (one decoder layer), mtp.norm; the embedding and the output head are the main model's;
 *  - entry j: RMSNorm(embed(t[j+1])) and RMSNorm(h[j]) concatenated in that order (embedding
 *    first), projected by fc, one decoder layer, the final norm, the shared head -> logits for
 *    t[j+2]; h[j] is the main model's hidden state after its final norm (what its head reads);
 *  - the decoder layer is a full-attention layer (layer_type "full_attention") with its own KV
 *    cache, at RoPE position j (the position of h[j]); its MLP is the model's: MoE in qwen3_next
 *    and qwen3_5_moe, dense in qwen3_5;
 *  - a further draft step feeds the head's own output hidden state back with the drafted token, one
 *    position on;
 *  - the norms are Qwen3-Next's zero-centred (1 + weight) RMSNorms: a Hugging Face layout
 *    checkpoint gets 1 added to them in sanitize, as the main model's norms do;
 *  - mtp_num_hidden_layers (Qwen3.5's config; num_nextn_predict_layers in vLLM's Qwen3-Next) is 1
 *    in every published checkpoint, and the only count supported here. */
#include <string>
#include <vector>

#include "mlxrt/model/families/qwen3_next.h"

namespace mlxrt::model::qwen3_next {

class MtpHead {
 public:
  /** Binds `prefix` + "mtp.*" (after the family's sanitize). ConfigError/WeightsError naming what
   * is missing when the checkpoint has no complete MTP head, or more than one MTP layer. */
  MtpHead(const Args& args, WeightBinder& w, const std::string& prefix, SparseLayers sparse,
          const LinearAttentionFactory& linear_attention);

  /** embeds [1, L, H] (the main model's embedding of t[j+1]), hidden [1, L, H] (h[j]) ->
   * the head's hidden [1, L, H] after mtp.norm. `cache`: make_cache()'s. */
  mx::array operator()(const mx::array& embeds, const mx::array& hidden, cache::CacheList* cache) const;

  cache::CacheList make_cache() const;

 private:
  nn::RMSNorm pre_fc_norm_embedding_, pre_fc_norm_hidden_;
  nn::Linear fc_;
  std::vector<DecoderLayer> layers_;
  nn::RMSNorm norm_;
};

}  // namespace mlxrt::model::qwen3_next
