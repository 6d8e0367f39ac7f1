#pragma once
#include <memory>
/** mlx-lm's ArraysCache (mlx_lm/models/cache.py): a fixed number of array slots a recurrent layer
 * keeps between calls (for the gated delta net: the causal convolution's last inputs and the
 * recurrent state). It is not a KV cache: update_and_fetch is refused, and it cannot be trimmed,
 * since a recurrent state cannot be rolled back by dropping positions. */
#include <optional>

#include "mlxrt/cache/cache.h"

namespace mlxrt::cache {

class ArraysCache final : public Cache {
 public:
  explicit ArraysCache(int size) : slots_(static_cast<size_t>(size)) {}

  CachedKV update_and_fetch(const mx::array& keys, const mx::array& values) override;
  /** Positions the layer has consumed (advance() calls). mlx-lm's ArraysCache has no offset; the
   * engine uses it to know how many prompt positions a cache holds. */
  int offset() const override { return offset_; }
  bool empty() const override { return !slots_.front().has_value(); }
  /** The arrays held (mlx-lm's state is (cache, left_padding, lengths); the last two are None in a
   * single-sequence run and hold nothing to evaluate). */
  std::vector<mx::array> state() const override;
  /** create_ssm_mask: no padding and no lengths in a single-sequence run, so no mask. */
  AttentionMask make_mask(int n, std::optional<int> window_size = std::nullopt) const override { return {}; }
  size_t nbytes() const override;

  int size() const { return static_cast<int>(slots_.size()); }
  const std::optional<mx::array>& operator[](int i) const { return slots_.at(static_cast<size_t>(i)); }
  void set(int i, std::optional<mx::array> value) { slots_.at(static_cast<size_t>(i)) = std::move(value); }
  /** The layer consumed `n` more positions. */
  void advance(int n) { offset_ += n; }
  /** Replaces the contents (mlx-lm's from_state); `offset` is the positions they stand for. */
  void set_state(std::vector<std::optional<mx::array>> slots, int offset);
  const std::vector<std::optional<mx::array>>& slots() const { return slots_; }

  /** A speculative verify window (multi-token prediction): while one is open the layer appends,
   * for each call, the inputs a state-only replay needs (its own layout: GatedDeltaCore's), and
   * the slots and offset from before the window are kept, so the layer can later leave the state
   * after any prefix of the window (GatedDeltaCore::keep_window). */
  struct Window {
    std::vector<std::optional<mx::array>> before;
    int offset_before = 0;
    std::vector<std::vector<mx::array>> calls;
  };
  void open_window() { window_ = Window{slots_, offset_, {}}; }
  void close_window() { window_.reset(); }
  Window* window() { return window_ ? &*window_ : nullptr; }

  std::unique_ptr<Cache> clone() const override { return std::make_unique<ArraysCache>(*this); }

 private:
  std::vector<std::optional<mx::array>> slots_;
  int offset_ = 0;
  std::optional<Window> window_;
};

}  // namespace mlxrt::cache
