#pragma once
#include <memory>
/** mlx-lm's KVCache (mlx_lm/models/cache.py): keys/values grown in steps of 256 positions,
 * written in place with slice updates, read back as the [0, offset) prefix. */
#include <optional>

#include "mlxrt/cache/cache.h"

namespace mlxrt::cache {

class KVCache final : public Cache {
 public:
  static constexpr int kStep = 256;

  CachedKV update_and_fetch(const mx::array& keys, const mx::array& values) override;
  int offset() const override { return offset_; }
  bool empty() const override { return !keys_.has_value(); }
  std::vector<mx::array> state() const override;
  bool is_trimmable() const override { return true; }
  int trim(int n) override;
  size_t nbytes() const override;

  /** The stored keys/values up to offset() (nullopt while empty). */
  std::optional<PlainKV> keys_and_values() const;
  /** The stored buffers as they are (capacity a multiple of 256; mlx-lm's `state`). */
  std::optional<PlainKV> buffers() const;
  /** Replaces the contents (mlx-lm's `state` setter, e.g. from a saved prompt cache). */
  void set_state(std::optional<mx::array> keys, std::optional<mx::array> values, int offset);

  /** keys = mx.depends(keys, x): evaluating the cache also evaluates `x` (a pipeline stage's send,
   * which a prefill that evaluates only the cache must still perform). */
  void depend_keys_on(const mx::array& x);

  std::unique_ptr<Cache> clone() const override { return std::make_unique<KVCache>(*this); }

 private:
  std::optional<mx::array> keys_;
  std::optional<mx::array> values_;
  int offset_ = 0;
};

}  // namespace mlxrt::cache
