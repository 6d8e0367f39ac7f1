#pragma once
/** The attention pieces shared by the families (mlx_lm/models/base.py). */
#include <optional>
#include <string>

#include <mlx/array.h>
#include <mlx/fast.h>

#include "mlxrt/cache/kv_cache.h"

namespace mlxrt::model::nn {

namespace mx = mlx::core;

/** What create_attention_mask returns: nothing (one query), the "causal" mode, or an array. */
struct AttentionMask {
  enum class Kind { none, causal, array } kind = Kind::none;
  std::optional<mx::array> mask;
};

/** create_attention_mask(h, cache) for a full-attention layer: none for a single query,
 * "causal" otherwise (the cache's offset is handled by the fused kernel). */
inline AttentionMask create_attention_mask(int num_queries) {
  return num_queries == 1 ? AttentionMask{} : AttentionMask{AttentionMask::Kind::causal, std::nullopt};
}

/** mlx-lm's scaled_dot_product_attention for a plain (unquantized) cache. */
inline mx::array scaled_dot_product_attention(const mx::array& q, const mx::array& k, const mx::array& v,
                                              float scale, const AttentionMask& mask) {
  switch (mask.kind) {
    case AttentionMask::Kind::none: return mx::fast::scaled_dot_product_attention(q, k, v, scale, "");
    case AttentionMask::Kind::causal: return mx::fast::scaled_dot_product_attention(q, k, v, scale, "causal");
    case AttentionMask::Kind::array:
      return mx::fast::scaled_dot_product_attention(q, k, v, scale, "array", mask.mask);
  }
  return mx::fast::scaled_dot_product_attention(q, k, v, scale, "");
}

}  // namespace mlxrt::model::nn
