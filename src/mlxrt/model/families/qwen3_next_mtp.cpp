// The multi-token-prediction head of Qwen3-Next / Qwen3.5 (qwen3_next_mtp.h says where each fact
// comes from). mlx-lm has no twin: tools/mtp_reference.py is the reference this file is checked
// against, byte for byte (tests/generate/test_mtp.py).
#include "mlxrt/model/families/qwen3_next_mtp.h"

#include <mlx/ops.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::model::qwen3_next {

namespace {

// `prefix` + "mtp.", once the tensors every MTP head has are there (a quantized fc or layer adds
// its scales and biases beside them).
std::string checked_mtp_prefix(const WeightBinder& w, const std::string& prefix, const Args& args) {
  const std::string p = prefix + "mtp.";
  if (args.mtp_num_hidden_layers != 1)
    throw UnsupportedError(w.config().source() + ": 'mtp_num_hidden_layers' is " +
                           std::to_string(args.mtp_num_hidden_layers) +
                           "; the multi-token-prediction head runs with exactly one layer (as every published "
                           "Qwen3-Next / Qwen3.5 checkpoint has)");
  static const char* const kRequired[] = {"fc.weight", "pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight",
                                          "norm.weight", "layers.0.input_layernorm.weight",
                                          "layers.0.self_attn.q_proj.weight"};
  std::string missing;
  for (const char* name : kRequired)
    if (!w.has(p + name)) missing += std::string(missing.empty() ? "" : ", ") + "mtp." + name;
  if (!missing.empty())
    throw WeightsError(w.config().dir().string() + ": --mtp needs the checkpoint's multi-token-prediction head " +
                       "(the mtp.* tensors of the original Hugging Face checkpoint, which mlx_lm.convert drops); " +
                       "missing: " + missing);
  return p;
}

}  // namespace

MtpHead::MtpHead(const Args& args, WeightBinder& w, const std::string& prefix, SparseLayers sparse,
                 const LinearAttentionFactory& linear_attention)
    : pre_fc_norm_embedding_(nn::RMSNorm::load(w, checked_mtp_prefix(w, prefix, args) + "pre_fc_norm_embedding",
                                               args.hidden_size, args.rms_norm_eps)),
      pre_fc_norm_hidden_(nn::RMSNorm::load(w, prefix + "mtp.pre_fc_norm_hidden", args.hidden_size, args.rms_norm_eps)),
      fc_(nn::Linear::load(w, prefix + "mtp.fc", 2 * args.hidden_size, args.hidden_size, false)),
      norm_(nn::RMSNorm::load(w, prefix + "mtp.norm", args.hidden_size, args.rms_norm_eps)) {
  // The layer is a full-attention decoder layer whatever full_attention_interval says; its MLP is
  // the one the main model's layer 0 would get (vLLM builds it with the layer index 0).
  layers_.push_back(load_decoder_layer(args, w, prefix + "mtp.layers.0", /*linear=*/false, args.sparse_at(0, sparse),
                                       linear_attention));
}

mx::array MtpHead::operator()(const mx::array& embeds, const mx::array& hidden, cache::CacheList* cache) const {
  // Embedding first, then the hidden state (vLLM: torch.cat([inputs_embeds, hidden_states], -1)).
  auto x = fc_(mx::concatenate({pre_fc_norm_embedding_(embeds), pre_fc_norm_hidden_(hidden)}, -1));
  for (size_t i = 0; i < layers_.size(); ++i) {
    cache::Cache* c = cache ? (*cache)[i].get() : nullptr;
    x = layers_[i](x, nn::create_attention_mask(x.shape(1), c), c);
  }
  return norm_(x);
}

cache::CacheList MtpHead::make_cache() const {
  cache::CacheList caches;
  for (size_t i = 0; i < layers_.size(); ++i) caches.push_back(std::make_unique<cache::KVCache>());
  return caches;
}

}  // namespace mlxrt::model::qwen3_next
