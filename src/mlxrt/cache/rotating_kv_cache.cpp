// Port of RotatingKVCache in mlx_lm/models/cache.py (mlx-lm 0.32.2).
#include "mlxrt/cache/rotating_kv_cache.h"

#include <algorithm>
#include <string>

#include <mlx/ops.h>

#include "mlxrt/util/errors.h"

namespace mlxrt::cache {

void RotatingKVCache::depend_keys_on(const mx::array& x) {
  if (keys_) keys_ = mx::depends({*keys_}, {x})[0];
}

namespace {

// a[..., start:stop, :] on axis 2 of a [B, heads, L, D] array.
mx::array seq_slice(const mx::array& a, int start, int stop) {
  mx::Shape lo(a.ndim(), 0), hi = a.shape();
  lo[2] = start;
  hi[2] = stop;
  return mx::slice(a, lo, hi);
}

}  // namespace

RotatingKVCache::RotatingKVCache(int max_size, int keep) : keep_(keep), max_size_(max_size) {
  if (max_size < 1) throw UsageError("--max-kv-size must be at least 1, got " + std::to_string(max_size));
  if (keep < 0 || keep > max_size)
    throw UsageError("rotating KV cache: keep (" + std::to_string(keep) + ") must be within [0, max size " +
                     std::to_string(max_size) + "]");
}

mx::array RotatingKVCache::trim_front(int trim_size, const mx::array& v,
                                      const std::optional<mx::array>& append) const {
  std::vector<mx::array> to_cat;
  if (trim_size > 0) {
    to_cat = {seq_slice(v, 0, keep_), seq_slice(v, trim_size + keep_, v.shape(2))};
  } else {
    to_cat = {v};
  }
  if (append) to_cat.push_back(*append);
  return mx::concatenate(to_cat, 2);
}

mx::array RotatingKVCache::temporal_order(const mx::array& v) const {
  if (idx_ == v.shape(2)) return v;
  if (idx_ < offset_)
    return mx::concatenate({seq_slice(v, 0, keep_), seq_slice(v, idx_, v.shape(2)), seq_slice(v, keep_, idx_)}, 2);
  return seq_slice(v, 0, idx_);
}

CachedKV RotatingKVCache::update_concat(const mx::array& keys, const mx::array& values) {
  if (!keys_) {
    keys_ = keys;
    values_ = values;
  } else {
    // Back in temporal order to preserve context.
    keys_ = temporal_order(*keys_);
    values_ = temporal_order(*values_);
    idx_ = keys_->shape(2);
    // At most max_size + L - 1 positions, so every new query sees max_size of context.
    const int trim_size = idx_ - max_size_ + 1;
    keys_ = trim_front(trim_size, *keys_, keys);
    values_ = trim_front(trim_size, *values_, values);
  }
  offset_ += keys.shape(2);
  idx_ = keys_->shape(2);
  return PlainKV{*keys_, *values_};
}

CachedKV RotatingKVCache::update_in_place(const mx::array& keys, const mx::array& values) {
  const int B = keys.shape(0), n_kv_heads = keys.shape(1), S = keys.shape(2);
  const int prev = offset_;
  if (!keys_ || (prev >= keys_->shape(2) && keys_->shape(2) < max_size_)) {
    // Not at max size yet: grow by one step (or to max size).
    const int new_size = std::min(kStep, max_size_ - prev);
    auto new_k = mx::zeros({B, n_kv_heads, new_size, keys.shape(3)}, keys.dtype());
    auto new_v = mx::zeros({B, n_kv_heads, new_size, values.shape(3)}, values.dtype());
    if (keys_) {
      keys_ = mx::concatenate({*keys_, new_k}, 2);
      values_ = mx::concatenate({*values_, new_v}, 2);
    } else {
      keys_ = new_k;
      values_ = new_v;
    }
    idx_ = prev;
  }
  const int trim_size = keys_->shape(2) - max_size_;
  if (trim_size > 0) {
    keys_ = trim_front(trim_size, *keys_, std::nullopt);
    values_ = trim_front(trim_size, *values_, std::nullopt);
    idx_ = max_size_;
  }
  if (idx_ == max_size_) idx_ = keep_;  // rotate
  mx::Shape start = {0, 0, idx_, 0};
  mx::Shape k_stop = {keys_->shape(0), keys_->shape(1), idx_ + S, keys_->shape(3)};
  mx::Shape v_stop = {values_->shape(0), values_->shape(1), idx_ + S, values_->shape(3)};
  keys_ = mx::slice_update(*keys_, keys, start, k_stop);
  values_ = mx::slice_update(*values_, values, start, v_stop);
  offset_ += S;
  idx_ += S;
  return keys_and_values();
}

CachedKV RotatingKVCache::update_and_fetch(const mx::array& keys, const mx::array& values) {
  if (keys.shape(2) == 1) return update_in_place(keys, values);
  return update_concat(keys, values);
}

PlainKV RotatingKVCache::keys_and_values() const {
  if (offset_ < keys_->shape(2)) return {seq_slice(*keys_, 0, offset_), seq_slice(*values_, 0, offset_)};
  return {*keys_, *values_};
}

std::optional<PlainKV> RotatingKVCache::in_temporal_order() const {
  if (!keys_) return std::nullopt;
  return PlainKV{temporal_order(*keys_), temporal_order(*values_)};
}

std::optional<PlainKV> RotatingKVCache::buffers() const {
  if (!keys_) return std::nullopt;
  return PlainKV{*keys_, *values_};
}

std::vector<mx::array> RotatingKVCache::state() const {
  if (!keys_) return {};
  return {*keys_, *values_};
}

int RotatingKVCache::trim(int n) {
  n = std::min(offset_, n);
  offset_ -= n;
  idx_ -= n;
  return n;
}

size_t RotatingKVCache::nbytes() const { return keys_ ? keys_->nbytes() + values_->nbytes() : 0; }

AttentionMask RotatingKVCache::make_mask(int n, std::optional<int> window_size) const {
  if (n > 1) {
    // `window_size or self.max_size`
    const int window = window_size && *window_size != 0 ? *window_size : max_size_;
    const int offset = std::min(max_size_ - 1, offset_);
    if (offset + n > window) return AttentionMask::of(create_causal_mask(n, offset, window));
    return AttentionMask::causal();
  }
  if (!window_size) return {};
  // A single query needs a mask only when the window is shorter than the buffer.
  if (offset_ >= *window_size && max_size_ > *window_size) {
    const int idx = idx_ >= max_size_ ? 0 : idx_;
    const int mask_size = offset_ < max_size_ ? offset_ + 1 : max_size_;
    auto mask = mx::greater_equal(mx::arange(mask_size), mx::array(mask_size - *window_size));
    return AttentionMask::of(mx::roll(mask, idx + 1));
  }
  return {};
}

void RotatingKVCache::set_state(std::optional<mx::array> keys, std::optional<mx::array> values, int offset,
                                int keep, int max_size, int idx) {
  keys_ = std::move(keys);
  values_ = std::move(values);
  offset_ = offset;
  keep_ = keep;
  max_size_ = max_size;
  idx_ = idx;
}

}  // namespace mlxrt::cache
