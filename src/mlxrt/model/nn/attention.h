#pragma once
/** The attention pieces shared by the families (mlx_lm/models/base.py). */
#include <mlx/array.h>

#include "mlxrt/cache/cache.h"

namespace mlxrt::model::nn {

namespace mx = mlx::core;

using cache::AttentionMask;

/** create_attention_mask(h, cache) for a full-attention layer with `n` new positions: the
 * cache's make_mask when there is a cache, else none for one query and "causal" otherwise. */
AttentionMask create_attention_mask(int n, const cache::Cache* cache,
                                    std::optional<int> window_size = std::nullopt);

/** mlx-lm's scaled_dot_product_attention: the fused kernel over plain keys/values, or
 * quantized_scaled_dot_product_attention over a quantized cache's tensors. */
mx::array scaled_dot_product_attention(const mx::array& queries, const cache::CachedKV& kv, float scale,
                                       const AttentionMask& mask);

}  // namespace mlxrt::model::nn
