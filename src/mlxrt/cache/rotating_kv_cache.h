#pragma once
#include <memory>
/** mlx-lm's RotatingKVCache (mlx_lm/models/cache.py): at most max_size positions, the first
 * `keep` of them never evicted. Single-token steps write in place into a ring buffer; multi-token
 * steps put the buffer back in temporal order and concatenate, keeping max_size + L - 1 positions
 * so every new query still sees max_size of context. Used for --max-kv-size and sliding-window
 * attention layers. */
#include <optional>

#include "mlxrt/cache/cache.h"

namespace mlxrt::cache {

class RotatingKVCache final : public Cache {
 public:
  static constexpr int kStep = 256;

  explicit RotatingKVCache(int max_size, int keep = 0);

  CachedKV update_and_fetch(const mx::array& keys, const mx::array& values) override;
  int offset() const override { return offset_; }
  bool empty() const override { return !keys_.has_value(); }
  std::vector<mx::array> state() const override;
  /** Cache.make_mask: a windowed causal mask for several queries, a ring-position mask for one
   * query when window_size < max_size. */
  AttentionMask make_mask(int n, std::optional<int> window_size = std::nullopt) const override;
  /** Trimmable only until the buffer wraps (offset < max_size), as in mlx-lm. */
  bool is_trimmable() const override { return offset_ < max_size_; }
  int trim(int n) override;
  size_t nbytes() const override;

  int max_size() const { return max_size_; }
  int keep() const { return keep_; }
  /** The next write position in the buffer (mlx-lm's `_idx`). */
  int idx() const { return idx_; }
  /** The stored keys and values in temporal order (mlx-lm's `_temporal_order`); nullopt while empty. */
  std::optional<PlainKV> in_temporal_order() const;
  /** The stored buffers as they are (not in temporal order); nullopt while empty. */
  std::optional<PlainKV> buffers() const;
  /** Replaces the whole state (mlx-lm's `state` setter, used by load_prompt_cache). */
  void set_state(std::optional<mx::array> keys, std::optional<mx::array> values, int offset, int keep, int max_size,
                 int idx);

  /** keys = mx.depends(keys, x), as KVCache::depend_keys_on (a pipeline stage's send). */
  void depend_keys_on(const mx::array& x);

  std::unique_ptr<Cache> clone() const override { return std::make_unique<RotatingKVCache>(*this); }

 private:
  CachedKV update_in_place(const mx::array& keys, const mx::array& values);
  CachedKV update_concat(const mx::array& keys, const mx::array& values);
  mx::array temporal_order(const mx::array& v) const;
  mx::array trim_front(int trim_size, const mx::array& v, const std::optional<mx::array>& append) const;
  PlainKV keys_and_values() const;

  int keep_;
  int max_size_;
  std::optional<mx::array> keys_;
  std::optional<mx::array> values_;
  int offset_ = 0;
  int idx_ = 0;
};

}  // namespace mlxrt::cache
