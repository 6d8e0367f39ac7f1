#pragma once
/** mlx-lm's BatchRotatingKVCache (mlx_lm/models/cache.py): the RotatingKVCache of a batch of
 * left-padded rows, for sliding-window attention layers (and --max-kv-size) in batched generation.
 * Single-token steps write into a ring buffer of at most max_size positions and the left padding
 * shrinks as the ring overwrites it; multi-token steps put the buffer back in temporal order and
 * concatenate, keeping max_size + L - 1 positions. Right-padded prompts are rolled so that padding
 * never evicts a real position. */
#include <memory>
#include <optional>
#include <vector>

#include "mlxrt/cache/batch_cache.h"
#include "mlxrt/cache/rotating_kv_cache.h"

namespace mlxrt::cache {

class BatchRotatingKVCache final : public BatchCache {
 public:
  static constexpr int kStep = 256;

  BatchRotatingKVCache(int max_size, const std::vector<int>& left_padding);

  CachedKV update_and_fetch(const mx::array& keys, const mx::array& values) override;
  const mx::array& offset_array() const override { return offset_; }
  std::vector<int> offsets() const override;
  bool empty() const override { return !keys_.has_value(); }
  std::vector<mx::array> state() const override;
  AttentionMask make_mask(int n, std::optional<int> window_size = std::nullopt) const override;
  bool is_trimmable() const override { return offset_scalar_ < max_size_; }
  int trim(int n) override;
  size_t nbytes() const override;
  std::unique_ptr<Cache> clone() const override { return std::make_unique<BatchRotatingKVCache>(*this); }

  void prepare(const std::optional<std::vector<int>>& left_padding, const std::vector<int>& lengths,
               const std::optional<std::vector<int>>& right_padding) override;
  void finalize() override;
  void filter(const std::vector<int>& batch_indices) override;
  void extend(BatchCache& other) override;
  /** Row `idx` as a RotatingKVCache in temporal order, without its padding. */
  std::unique_ptr<Cache> extract(int idx) const override;
  int batch_size() const override { return offset_.shape(0); }

  /** Single-sequence RotatingKVCaches of one max_size as one left-padded batch. */
  static std::unique_ptr<BatchRotatingKVCache> merge(const std::vector<const RotatingKVCache*>& caches);

  int max_size() const { return max_size_; }

  /** Each row's left padding, as the left_padding array holds it (kept on the host). */
  const std::vector<int>& host_left_padding() const { return host_left_padding_; }

 private:
  CachedKV update_concat(const mx::array& keys, const mx::array& values);
  /** Right-padded rows (prepare's lengths) rolled into left padding, arrays and host copies. */
  void roll_padded_rows();
  CachedKV update_in_place(const mx::array& keys, const mx::array& values);
  /** mlx-lm's `_temporal_order()`: unrolls the ring in place. */
  void to_temporal_order();
  PlainKV keys_and_values() const;

  std::optional<mx::array> keys_, values_;
  mx::array left_padding_;
  mx::array offset_;  // per row, [B] int32
  int max_size_;
  int idx_ = 0;
  int offset_scalar_ = 0;  // mlx-lm's `_offset`: positions written to the buffer
  bool rotated_ = false;
  std::optional<mx::array> lengths_;  // right-padded prompts: each row's real end
  /** The values of left_padding_, offset_ and lengths_, kept on the host as well: offsets() and
   * extract() read them here, not from the arrays, whose read would wait for the step in flight on
   * the device (the arrays' last nodes belong to it). */
  std::vector<int> host_left_padding_, host_offset_;
  std::optional<std::vector<int>> host_lengths_;
};

}  // namespace mlxrt::cache
