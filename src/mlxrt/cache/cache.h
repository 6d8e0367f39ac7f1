#pragma once
/** The per-layer cache interface (mlx_lm/models/cache.py's _BaseCache and the attention mask
 * helpers of mlx_lm/models/base.py). A family's attention calls update_and_fetch, then attends
 * over what it returns: plain keys/values, or quantized ones for a quantized cache. */
#include <memory>
#include <optional>
#include <variant>
#include <vector>

#include <mlx/array.h>

namespace mlxrt::cache {

namespace mx = mlx::core;

/** What create_attention_mask / make_mask return: nothing, the "causal" mode, or an array. */
struct AttentionMask {
  enum class Kind { none, causal, array } kind = Kind::none;
  std::optional<mx::array> mask;
  /** The mask array broadcast to the shapes attention asked for (model/nn/attention.cpp), kept
   * for every layer that shares this mask, its copies included. */
  std::shared_ptr<std::vector<mx::array>> broadcasts = std::make_shared<std::vector<mx::array>>();
  static AttentionMask causal() { return {Kind::causal, std::nullopt}; }
  static AttentionMask of(mx::array m) { return {Kind::array, std::move(m)}; }
};

/** mlx-lm's create_causal_mask(N, offset, window_size) as an array [N, offset + N]. */
mx::array create_causal_mask(int n, int offset, std::optional<int> window_size = std::nullopt);

/** The module-level create_attention_mask(N, offset, return_array, window_size) of cache.py. */
AttentionMask create_attention_mask(int n, int offset, bool return_array, std::optional<int> window_size);

/** One quantized tensor as mx.quantize returns it. */
struct QuantizedTensor {
  mx::array packed, scales, biases;
};

struct PlainKV {
  mx::array keys, values;
  /** When keys/values are the [0, offset) prefix of a cache's buffers (KVCache, BatchKVCache), those buffers, so
   * that a prefill's attention may read past the offset (model/nn/attention.cpp says why). */
  std::optional<mx::array> keys_buffer = std::nullopt, values_buffer = std::nullopt;
};
struct QuantizedKV {
  QuantizedTensor keys, values;
  int group_size, bits;
};
using CachedKV = std::variant<PlainKV, QuantizedKV>;

class Cache {
 public:
  virtual ~Cache() = default;
  /** Stores [B, heads, L, D] keys/values at offset() and returns what attention reads. */
  virtual CachedKV update_and_fetch(const mx::array& keys, const mx::array& values) = 0;
  /** Positions seen so far (the RoPE offset of the next token). */
  virtual int offset() const = 0;
  virtual bool empty() const = 0;
  /** The arrays mlx-lm evaluates after each prefill chunk (`cache.state`). */
  virtual std::vector<mx::array> state() const = 0;
  /** make_mask(N, window_size=...) for N new queries. */
  virtual AttentionMask make_mask(int n, std::optional<int> window_size = std::nullopt) const {
    return create_attention_mask(n, offset(), false, window_size);
  }
  virtual bool is_trimmable() const { return false; }
  /** Drops the last `n` positions; returns how many were dropped. */
  virtual int trim(int n) { return 0; }
  virtual size_t nbytes() const = 0;
  /** An independent copy (mlx-lm's copy.deepcopy of a cache): arrays are shared until either side
   * writes, and MLX never writes in place into a buffer both hold. */
  virtual std::unique_ptr<Cache> clone() const = 0;
};

using CacheList = std::vector<std::unique_ptr<Cache>>;

/** Every layer's state arrays in order (mlx-lm's [c.state for c in cache], flattened): what a
 * prefill chunk evaluates before the next one. */
std::vector<mx::array> state_arrays(const CacheList& caches);

}  // namespace mlxrt::cache
