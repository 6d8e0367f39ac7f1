#pragma once
/** A model with a native multi-token-prediction (MTP) head, as Qwen3-Next and Qwen3.5 publish one:
 * besides its forward, it drafts the token after next from a token and the hidden state the main
 * model computed for the position before it (speculative decoding with the model's own head;
 * generate/mtp_speculative.h; the model rolls a verify window back with CausalLM::keep_window). */
#include <utility>

#include <mlx/array.h>

#include "mlxrt/cache/cache.h"

namespace mlxrt::model {

namespace mx = mlx::core;

class MultiTokenPredictor {
 public:
  virtual ~MultiTokenPredictor() = default;

  /** The main model's forward: inputs [1, L] -> {hidden [1, L, H] after the final norm (what the
   * head reads, and what the MTP head takes), logits [1, L, vocab]}. */
  virtual std::pair<mx::array, mx::array> forward_with_hidden(const mx::array& inputs, cache::CacheList* cache) = 0;

  /** The MTP head over L entries, entry j pairing token t(p + j + 1) with the hidden state of
   * position p + j (p: what `mtp_cache` holds): {its hidden [1, L, H] after its final norm (the
   * hidden a further draft step takes), its logits [1, L, vocab] through the shared head}. */
  virtual std::pair<mx::array, mx::array> predict(const mx::array& tokens, const mx::array& hidden,
                                                  cache::CacheList* mtp_cache) = 0;

  /** The MTP head's own caches (one KVCache per MTP layer). */
  virtual cache::CacheList make_mtp_cache() const = 0;
};

}  // namespace mlxrt::model
