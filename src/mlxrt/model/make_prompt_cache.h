#pragma once
/** make_prompt_cache (mlx_lm/models/cache.py) and the check of a loaded prompt cache against
 * the model that is about to use it. */
#include <optional>
#include <string>

#include "mlxrt/cache/cache.h"
#include "mlxrt/model/causal_lm.h"

namespace mlxrt::model {

/** mlx-lm's make_prompt_cache(model, max_kv_size): the family's own make_cache when its mlx-lm
 * Model defines one (max_kv_size is then ignored, as in mlx-lm), else one
 * RotatingKVCache(max_size=max_kv_size, keep=4) per layer when max_kv_size is set, else one
 * KVCache per layer. max_kv_size < 1 throws UsageError naming --max-kv-size. */
CacheList make_prompt_cache(const CausalLM& model, std::optional<int> max_kv_size = std::nullopt);

/** Checks that a prompt cache loaded from `source` fits `model`: one layer cache per layer, and
 * per layer the KV heads and head sizes the model attends with (a cache saved from another model
 * fails here with ConfigError naming the file, the layer and what differs, instead of failing
 * inside the graph). */
void check_prompt_cache(const CausalLM& model, const CacheList& cache, const std::string& source);

}  // namespace mlxrt::model
