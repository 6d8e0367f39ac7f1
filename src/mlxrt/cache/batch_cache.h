#pragma once
/** What mlx-lm's BatchGenerator asks of a batched cache (BatchKVCache, BatchRotatingKVCache in
 * mlx_lm/models/cache.py): rows of different lengths, left-padded, each with its own position
 * offset; rows join (extend), leave (filter) and are taken out as single-sequence caches (extract)
 * between steps. */
#include <memory>
#include <optional>
#include <vector>

#include "mlxrt/cache/cache.h"

namespace mlxrt::cache {

class BatchCache : public Cache {
 public:
  /** A batched cache has no single offset: UnsupportedError (a model that reads one cannot batch). */
  int offset() const override;
  /** Each row's offset as the [B] int32 array mlx-lm's batched caches keep (what its RoPE takes). */
  virtual const mx::array& offset_array() const = 0;
  /** The same offsets on the host (a row at a time RoPE, for the RoPE types that take one offset). */
  virtual std::vector<int> offsets() const = 0;
  /** prepare(left_padding=..., lengths=..., right_padding=...): the padding the next update adds
   * (right padding is rolled to the left by finalize()). */
  virtual void prepare(const std::optional<std::vector<int>>& left_padding, const std::vector<int>& lengths,
                       const std::optional<std::vector<int>>& right_padding) = 0;
  virtual void finalize() = 0;
  /** Keeps the rows `batch_indices`, in that order. */
  virtual void filter(const std::vector<int>& batch_indices) = 0;
  /** Appends the rows of `other` (a cache of the same kind). */
  virtual void extend(BatchCache& other) = 0;
  /** Row `idx` without its padding, as the single-sequence cache it came from. */
  virtual std::unique_ptr<Cache> extract(int idx) const = 0;
  virtual int batch_size() const = 0;
  /** Lets this layer reuse, within a forward, what `first` (the batch's first layer) computed that
   * this layer would compute again with the same values (the layers of a batch advance the same
   * offsets by the same count). Nothing is shared by default. */
  virtual void share_forward_work(const BatchCache& /*first*/) {}

  /** Links the layers of one batch (share_forward_work with the first batched layer). */
  static void link_layers(const CacheList& layers);

  /** mlx-lm's `type(caches[0]).merge(caches)`: single-sequence caches of one kind (KVCache or
   * RotatingKVCache) as one left-padded batch. */
  static std::unique_ptr<BatchCache> merge(const std::vector<const Cache*>& caches);
  /** mlx-lm's `_merge_caches`: each layer of the rows' caches (one CacheList a row, all of one
   * model) merged into one batch, the layers linked (link_layers). UnsupportedError where a layer's
   * cache does not batch (`batches`). */
  static CacheList merge_rows(const std::vector<const CacheList*>& rows);
  /** An empty batched cache for rows with these left paddings, of the kind that batches `like`. */
  static std::unique_ptr<BatchCache> empty_like(const Cache& like, const std::vector<int>& left_padding);
  /** Whether caches of this kind batch (mlx-lm: the cache class has `merge`). */
  static bool batches(const Cache& c);
};

}  // namespace mlxrt::cache
