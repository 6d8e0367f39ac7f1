#pragma once
/** What mlx-lm's two batched caches (BatchKVCache, BatchRotatingKVCache) do alike: small array
 * helpers, and `extend`'s joining of two batches' rows. */
#include <optional>
#include <vector>

#include <mlx/array.h>

namespace mlxrt::cache::batch_rows {

namespace mx = mlx::core;

mx::array int_array(const std::vector<int>& v);
/** a[..., start:stop, :] of a [B, H, S, D] array. */
mx::array positions(const mx::array& a, int start, int stop);
/** An integer array's values on the host (evaluates it). */
std::vector<int> to_ints(const mx::array& a);

/** One side of an extend: a batch's buffers, per-row offsets and left padding, and its write index. */
struct Rows {
  std::optional<mx::array> keys, values;
  mx::array offset, left_padding;
  int idx = 0;
};

/** extend(other) of mlx-lm's batched caches: both sides right-justified at the larger index, padded
 * to the longer buffer, their rows concatenated (the larger index is the result's). Two empty
 * sides concatenate their offsets and paddings only. */
Rows join(const Rows& a, const Rows& b);

/** join's left padding as the host keeps it: each side's rows raised by the distance from its index
 * to the larger one when either side holds keys (join right-justifies them there), concatenated. */
std::vector<int> join_left_padding(const std::vector<int>& a, int a_idx, const std::vector<int>& b, int b_idx,
                                   bool any_keys);

}  // namespace mlxrt::cache::batch_rows
