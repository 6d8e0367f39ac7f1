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

  std::unique_ptr<Cache> clone() const override;

  /** One position written by a kernel into the buffers themselves (kernels/cuda/decoder_layer.h). */
  struct InPlaceWrite {
    mx::array keys, values;  // the buffers, [B, heads, capacity, head_dim]
    int position;            // where the kernel writes
    mx::array barrier;       // the launch's barrier state (uint32 [barrier_words], zeros at first)
  };
  /** For a kernel that writes the next position's keys and values into the buffers itself: the
   * buffers grown as update_and_fetch grows them for one position, and made this cache's alone
   * (copied where a clone, a read of the state or anything else may share them: MLX then writes
   * into the copy), the position, and the barrier state for the launch; the offset advances by one.
   * `shape` is the new keys' [B, heads, 1, head_dim], `type` theirs; `barrier_words` the size of
   * the kernel's barrier state. nullopt, the cache unchanged, where the buffers hold another shape
   * or type. end_in_place_write must follow the launch. */
  std::optional<InPlaceWrite> begin_in_place_write(const mx::Shape& shape, mx::Dtype type, int barrier_words);
  /** `next_barrier`: the launch's output that is the next launch's barrier state. Later readers of
   * the buffers (state(), clone(), update_and_fetch, ...) are made to wait for it: the kernel's
   * writes are not nodes of MLX's graph. */
  void end_in_place_write(const mx::array& next_barrier);

 private:
  // Whatever reads or shares the buffers first waits for the last in-place write, and the buffers
  // count as shared from then on.
  void expose() const;

  mutable std::optional<mx::array> keys_;
  mutable std::optional<mx::array> values_;
  int offset_ = 0;
  mutable bool exclusive_ = false;                // the buffers are this cache's alone
  mutable std::optional<mx::array> last_writer_;  // the last in-place write's launch (its barrier output)
  std::optional<mx::array> barrier_;              // the next in-place launch's barrier state
};

}  // namespace mlxrt::cache
