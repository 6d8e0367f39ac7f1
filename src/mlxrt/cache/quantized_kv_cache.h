#pragma once
#include <memory>
/** mlx-lm's QuantizedKVCache (mlx_lm/models/cache.py) and the generate-loop helper that converts
 * plain caches to it (maybe_quantize_kv_cache, mlx_lm/generate.py). Keys/values are stored as
 * mx.quantize triples (packed uint32, scales, biases) grown in steps of 256 positions; attention
 * reads them through quantized_scaled_dot_product_attention. */
#include <optional>

#include "mlxrt/cache/cache.h"
#include "mlxrt/cache/kv_cache.h"

namespace mlxrt::cache {

/** mlx-lm's DEFAULT_QUANTIZED_KV_START (--quantized-kv-start). */
inline constexpr int kDefaultQuantizedKvStart = 5000;
/** mlx-lm's default --kv-group-size. */
inline constexpr int kDefaultKvGroupSize = 64;

class QuantizedKVCache final : public Cache {
 public:
  static constexpr int kStep = 256;

  explicit QuantizedKVCache(int group_size = kDefaultKvGroupSize, int bits = 8);

  CachedKV update_and_fetch(const mx::array& keys, const mx::array& values) override;
  int offset() const override { return offset_; }
  bool empty() const override { return !keys_.has_value(); }
  /** The six arrays (keys then values: packed, scales, biases). */
  std::vector<mx::array> state() const override;
  bool is_trimmable() const override { return true; }
  int trim(int n) override;
  size_t nbytes() const override;

  int group_size() const { return group_size_; }
  int bits() const { return bits_; }
  /** The stored buffers as they are (capacity a multiple of 256); nullopt while empty. */
  std::optional<QuantizedKV> buffers() const;
  /** Replaces the whole state (mlx-lm's `state` setter, used by load_prompt_cache). */
  void set_state(std::optional<QuantizedTensor> keys, std::optional<QuantizedTensor> values, int offset,
                 int group_size, int bits);

  std::unique_ptr<Cache> clone() const override { return std::make_unique<QuantizedKVCache>(*this); }

 private:
  QuantizedKV keys_and_values() const;

  std::optional<QuantizedTensor> keys_;
  std::optional<QuantizedTensor> values_;
  int offset_ = 0;
  int group_size_;
  int bits_;
};

/** KVCache.to_quantized: the whole buffer (padding included) quantized, the offset kept. */
std::unique_ptr<QuantizedKVCache> to_quantized(const KVCache& cache, int group_size = kDefaultKvGroupSize,
                                               int bits = 4);

/** maybe_quantize_kv_cache: with kv_bits set, every layer cache that mlx-lm can convert
 * (KVCache) whose offset reached quantized_kv_start is replaced by its quantized copy. A
 * RotatingKVCache past the start throws UnsupportedError (mlx-lm raises "RotatingKVCache
 * Quantization NYI"); caches with no to_quantized (already quantized) are left alone.
 * Bad bits / group sizes throw UsageError naming --kv-bits / --kv-group-size. */
void maybe_quantize_kv_cache(CacheList& cache, std::optional<int> kv_bits, int kv_group_size,
                             int quantized_kv_start);

/** Checks --kv-bits / --kv-group-size / --quantized-kv-start before any work (UsageError naming
 * the flag): bits in {2, 3, 4, 5, 6, 8}, group size in {32, 64, 128}, start >= 0. */
void validate_kv_quantization(std::optional<int> kv_bits, int kv_group_size, int quantized_kv_start);

}  // namespace mlxrt::cache
