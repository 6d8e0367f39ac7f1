#pragma once
/** The interface every family's Model implements: tokens in, logits out, with a per-layer cache. */
#include <memory>
#include <string>
#include <vector>

#include <mlx/array.h>

#include "mlxrt/cache/cache.h"

namespace mlxrt::model {

namespace mx = mlx::core;

using CacheList = cache::CacheList;

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  /** inputs [B, L] int32 -> logits [B, L, vocab]. `cache` (one entry per layer) may be null for a
   * cache-free forward over the whole sequence. */
  virtual mx::array operator()(const mx::array& inputs, CacheList* cache) = 0;
  /** mlx-lm's make_prompt_cache(model): one fresh cache per layer (KVCache unless the family
   * says otherwise). */
  virtual CacheList make_cache() const = 0;
  virtual int vocab_size() const = 0;
};

}  // namespace mlxrt::model
