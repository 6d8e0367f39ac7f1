#pragma once
/** mlx-lm's KVCache (mlx_lm/models/cache.py): keys/values grown in steps of 256 positions,
 * written in place with slice updates, read back as the [0, offset) prefix. */
#include <optional>
#include <utility>

#include <mlx/array.h>

namespace mlxrt::cache {

namespace mx = mlx::core;

class KVCache {
 public:
  static constexpr int kStep = 256;

  /** Appends [B, heads, L, D] keys/values at `offset` and returns the whole cached prefix. */
  std::pair<mx::array, mx::array> update_and_fetch(const mx::array& keys, const mx::array& values);

  int offset() const { return offset_; }
  bool empty() const { return !keys_.has_value(); }
  /** The arrays to evaluate after a prefill chunk (mlx-lm evaluates `cache.state`). */
  std::vector<mx::array> state() const;
  /** Drops the last `n` positions (mlx-lm's trim); returns how many were dropped. */
  int trim(int n);

 private:
  std::optional<mx::array> keys_;
  std::optional<mx::array> values_;
  int offset_ = 0;
};

}  // namespace mlxrt::cache
