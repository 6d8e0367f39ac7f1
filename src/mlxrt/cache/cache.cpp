// Port of create_causal_mask (mlx_lm/models/base.py) and create_attention_mask (cache.py).
#include "mlxrt/cache/cache.h"

#include <mlx/ops.h>

namespace mlxrt::cache {

std::vector<mx::array> state_arrays(const CacheList& caches) {
  std::vector<mx::array> state;
  for (const auto& c : caches)
    for (auto& a : c->state()) state.push_back(a);
  return state;
}

mx::array create_causal_mask(int n, int offset, std::optional<int> window_size) {
  auto rinds = mx::arange(offset + n);
  auto linds = offset ? mx::arange(offset, offset + n) : rinds;
  linds = mx::expand_dims(linds, 1);
  rinds = mx::expand_dims(rinds, 0);
  auto mask = mx::greater_equal(linds, rinds);
  if (window_size) mask = mx::logical_and(mask, mx::less(linds, mx::add(rinds, mx::array(*window_size))));
  return mask;
}

AttentionMask create_attention_mask(int n, int offset, bool return_array, std::optional<int> window_size) {
  if (window_size) return AttentionMask::of(create_causal_mask(n, offset, window_size));
  if (n == 1) return {};
  if (return_array) return AttentionMask::of(create_causal_mask(n, offset, window_size));
  return AttentionMask::causal();
}

}  // namespace mlxrt::cache
