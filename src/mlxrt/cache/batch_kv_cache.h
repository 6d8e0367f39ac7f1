#pragma once
/** mlx-lm's BatchKVCache (mlx_lm/models/cache.py): one KV cache for a batch of sequences of
 * different lengths. Rows are left-padded; `left_padding` says how many leading positions of each
 * row are padding and `offset` (one per row) is each row's RoPE position. Prefill of right-padded
 * prompts goes through prepare(right_padding) / finalize(), which rolls the padding to the left. */
#include <memory>
#include <optional>
#include <vector>

#include <mlx/device.h>

#include "mlxrt/cache/batch_cache.h"
#include "mlxrt/cache/kv_cache.h"

namespace mlxrt::cache {

/** create_causal_mask(N, offset, window_size, left_padding=...) of mlx_lm/models/base.py: the
 * boolean mask [B, 1, N, offset + N] for rows with `left_padding` [B] leading pad positions. */
mx::array create_causal_mask(int n, int offset, std::optional<int> window_size, const mx::array& left_padding);

/** mlx_lm's dynamic_roll(x, shifts, axis): each row of x rolled along `axis` by its own shift. */
mx::array dynamic_roll(const mx::array& x, const mx::array& shifts, int axis);

/** The last offsets a BatchKVCache advanced: the values before (their host copy) and their dtype,
 * the count, the device and the sum. Shared by the layers of one batch (BatchCache::link_layers). */
struct AdvancedOffsets {
  std::vector<int> from;
  mx::Dtype dtype;
  int length;
  mx::Device device;
  mx::array to;
};

class BatchKVCache final : public BatchCache {
 public:
  static constexpr int kStep = 256;

  explicit BatchKVCache(const std::vector<int>& left_padding);

  CachedKV update_and_fetch(const mx::array& keys, const mx::array& values) override;
  /** Each row's offset, kept on the host too. */
  std::vector<int> offsets() const override { return host_offset_; }
  const mx::array& offset_array() const override { return offset_; }
  bool empty() const override { return !keys_.has_value(); }
  std::vector<mx::array> state() const override;
  AttentionMask make_mask(int n, std::optional<int> window_size = std::nullopt) const override;
  bool is_trimmable() const override { return true; }
  int trim(int n) override;
  size_t nbytes() const override;
  std::unique_ptr<Cache> clone() const override { return std::make_unique<BatchKVCache>(*this); }

  /** prepare(left_padding=..., right_padding=...) (BatchKVCache takes no use of `lengths`). */
  void prepare(const std::optional<std::vector<int>>& left_padding, const std::vector<int>& lengths,
               const std::optional<std::vector<int>>& right_padding) override;
  void finalize() override;
  /** Keeps the rows `batch_indices` (in that order) and drops the padding columns all rows share. */
  void filter(const std::vector<int>& batch_indices) override;
  /** Appends the rows of `other`, right-justifying both at the longer one's index. */
  void extend(BatchCache& other) override;
  /** Row `idx` without its padding, as a KVCache. */
  std::unique_ptr<Cache> extract(int idx) const override;
  int batch_size() const override { return offset_.shape(0); }
  /** Takes `first`'s record of advanced offsets when it is a BatchKVCache. */
  void share_forward_work(const BatchCache& first) override;
  /** The caches of single sequences (KVCaches, possibly empty) as one batch, left-padded. */
  static std::unique_ptr<BatchKVCache> merge(const std::vector<const KVCache*>& caches);

  int size() const { return idx_; }
  /** keys = mx.depends(keys, x), as the pipeline's last layer does with its cache. */
  void depend_keys_on(const mx::array& x);

 private:
  std::optional<mx::array> keys_, values_;
  mx::array left_padding_;
  /** left_padding_'s values: filter and extract read them here, not from the array, whose read
   * would wait for the step in flight on the device (a new node queues behind it). */
  std::vector<int> host_left_padding_;
  mx::array offset_;
  std::vector<int> host_offset_;  // offset_'s values
  int idx_ = 0;
  std::optional<mx::array> right_padding_;
  std::vector<int> host_right_padding_;
  /** Every layer of a batch advances the same offsets by the same count in a forward, and MLX
   * makes a node of each sum (and another of the count's broadcast): a layer whose offsets hold
   * the values another layer of the batch advanced from takes that layer's sum instead, the same
   * values, so RoPE and the next step read what its own sum would give, in two nodes a step
   * instead of two a layer (MLX spends host time on each node it dispatches). */
  std::shared_ptr<std::optional<AdvancedOffsets>> last_advance_ = std::make_shared<std::optional<AdvancedOffsets>>();
};

}  // namespace mlxrt::cache
