#pragma once
/** The interface every family's Model implements: tokens in, logits out, with a per-layer cache. */
#include <memory>
#include <string>
#include <vector>

#include <mlx/array.h>

#include "mlxrt/cache/kv_cache.h"

namespace mlxrt::model {

namespace mx = mlx::core;

using KVCacheList = std::vector<cache::KVCache>;

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  /** inputs [B, L] int32 -> logits [B, L, vocab]. `cache` (one entry per layer) may be null for a
   * cache-free forward over the whole sequence. */
  virtual mx::array operator()(const mx::array& inputs, KVCacheList* cache) = 0;
  /** mlx-lm's make_prompt_cache(model): one fresh KVCache per layer. */
  virtual KVCacheList make_cache() const = 0;
  virtual int vocab_size() const = 0;
};

}  // namespace mlxrt::model
