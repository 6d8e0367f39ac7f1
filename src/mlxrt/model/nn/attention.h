#pragma once
/** The attention pieces shared by the families (mlx_lm/models/base.py). */
#include <functional>

#include <mlx/array.h>

#include "mlxrt/cache/cache.h"
#include "mlxrt/model/nn/rope.h"

namespace mlxrt::model::nn {

namespace mx = mlx::core;

using cache::AttentionMask;

/** create_attention_mask(h, cache) for a full-attention layer with `n` new positions: the
 * cache's make_mask when there is a cache, else none for one query and "causal" otherwise. */
AttentionMask create_attention_mask(int n, const cache::Cache* cache,
                                    std::optional<int> window_size = std::nullopt);

/** The step every family's attention takes between its projections and the attention, in mlx-lm's
 * order: with a cache, RoPE on queries and keys at the cache's offset, then the keys and values
 * into the cache; without one, RoPE at position 0. `queries` is rotated in place; returns the keys
 * and values to attend over. */
cache::CachedKV rope_and_update_cache(const Rope& rope, mx::array& queries, const mx::array& keys,
                                      const mx::array& values, cache::Cache* cache);

/** mx.finfo(dtype).min as a scalar of that dtype (what a boolean mask fills masked scores with). */
mx::array dtype_lowest(mx::Dtype dtype);

/** The key length at which a causal prefill's fused attention over `keys` positions is run on
 * MLX's CUDA backend (attention.cpp): `keys` rounded up to the KV cache's 256-position step, never
 * past the cache buffer's `capacity`. */
int padded_attention_length(int keys, int capacity);

/** The query count a chunk of `queries` rows is padded to under a mask array at an offset off the
 * 256-position step (MLXRT_PAD_MASKED_ANY_OFFSET=0 turns it off): the next power of two from 16, then
 * multiples of 256, so that such chunks (a prompt-cache hit's, a prompt batch's second step) share
 * a few attention shapes instead of one per offset and length. Under an explicit mask a padded
 * query row need not line up with any key: its mask row is all masked. */
int padded_query_count(int queries);

/** The batch row count a chunk of `rows` rows is padded to under a mask array when its keys are a
 * contiguous copy (masked_prefill_contiguous; MLXRT_PAD_MASKED_ROWS=0 turns it off): the next power
 * of two. cuDNN keys its graph on the row count too, so a server whose prompt batches come with
 * every count from 1 to --prompt-concurrency would otherwise build (and warm) one graph per count;
 * an added row's queries, keys and values are zeros, its mask all masked, and it is dropped after. */
int padded_row_count(int rows);

/** A prefill's mask array [..., L or 1, Tk] widened for the padded attention's Lp queries and Tp
 * keys: every added entry masks (false; -inf for an additive mask), so a real row sees the keys it
 * saw, and a padded row (dropped after) sees none. nullopt for a mask of another shape. */
std::optional<mx::array> padded_attention_mask(const mx::array& mask, int L, int Tk, int Lp, int Tp);

/** Whether this process pads prefill attention to padded_attention_length: MLX's CUDA
 * backend is the default device, its attention runs through cuDNN, and
 * MLXRT_PAD_PREFILL_ATTENTION is not 0. Never on the CPU. Then a prefill's cuDNN graph (MLX builds
 * one per shape, 40-60 ms) depends only on the 256-position bucket, so warming the buckets
 * (generate/prefill_warm_up.h) removes the per-length cost. */
bool prefill_attention_padded();

/** Whether chunks under a mask array read their keys and values as a contiguous copy padded to
 * the next multiple of 256 (the default; MLXRT_PAD_MASKED_CONTIGUOUS=0 turns it off), so their attention shape no
 * longer depends on the batched cache's buffer capacity: then a prompt-cache hit's chunk has a
 * shape that repeats, and the server's warm-up builds those too. Never without
 * prefill_attention_padded(). */
bool masked_prefill_contiguous();

/** Whether such chunks also pad their row count to padded_row_count (the default with
 * masked_prefill_contiguous; MLXRT_PAD_MASKED_ROWS=0 turns it off). */
bool masked_prefill_rows_padded();

/** mlx-lm's scaled_dot_product_attention: the fused kernel over plain keys/values, or
 * quantized_scaled_dot_product_attention over a quantized cache's tensors. */
mx::array scaled_dot_product_attention(const mx::array& queries, const cache::CachedKV& kv, float scale,
                                       const AttentionMask& mask);

/** Row-exact attention (LoadOptions::row_exact): each of the L queries attends alone, through
 * `one(query, prefix)`, over the keys a decoding step at its position sees (causal, aligned at the
 * end: its own prefix; unmasked: all), and the rows are joined. A many-query call does not give a
 * row the bytes of a one-query call (the softmax and the product with the values run over the masked
 * length). UnsupportedError for a quantized cache or a mask array (a window, padded rows). */
mx::array attend_each_query(const mx::array& queries, const cache::CachedKV& kv, const AttentionMask& mask,
                            const std::function<mx::array(const mx::array&, const cache::CachedKV&)>& one);

/** The same with attention sinks (gpt-oss): one learned logit per query head that takes part in
 * the softmax. A quantized cache cannot attend with sinks (UnsupportedError, as mlx-lm refuses). */
mx::array scaled_dot_product_attention(const mx::array& queries, const cache::CachedKV& kv, float scale,
                                       const AttentionMask& mask, const mx::array& sinks);

}  // namespace mlxrt::model::nn
