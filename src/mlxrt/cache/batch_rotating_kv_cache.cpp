// Port of BatchRotatingKVCache in mlx_lm/models/cache.py (mlx-lm 0.32.2).
#include "mlxrt/cache/batch_rotating_kv_cache.h"

#include <algorithm>

#include <mlx/ops.h>
#include <mlx/transforms.h>

#include "mlxrt/cache/batch_kv_cache.h"
#include "mlxrt/cache/batch_rows.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::cache {

using batch_rows::int_array;
using batch_rows::positions;

namespace {

// _trim(trim_size, v, append): the oldest trim_size positions dropped, `append` added at the end.
mx::array trim_front(int trim_size, const mx::array& v, const std::optional<mx::array>& append = std::nullopt) {
  auto out = trim_size > 0 ? positions(v, trim_size, v.shape(2)) : v;
  if (append) return mx::concatenate({out, *append}, 2);
  return out;
}

}  // namespace

BatchRotatingKVCache::BatchRotatingKVCache(int max_size, const std::vector<int>& left_padding)
    : left_padding_(int_array(left_padding)), offset_(mx::array(0)), max_size_(max_size) {
  std::vector<int> neg(left_padding.size());
  std::transform(left_padding.begin(), left_padding.end(), neg.begin(), [](int l) { return -l; });
  offset_ = int_array(neg);
  host_left_padding_ = left_padding;
  host_offset_ = neg;
}

std::vector<int> BatchRotatingKVCache::offsets() const { return host_offset_; }

namespace {

// The host copies of `left_padding += shift; offset -= shift`, a shift per row.
void move_into_padding(std::vector<int>& left_padding, std::vector<int>& offset, const std::vector<int>& shift) {
  for (size_t i = 0; i < shift.size(); ++i) left_padding.at(i) += shift[i], offset.at(i) -= shift[i];
}

void add_to(std::vector<int>& v, int d) {
  for (auto& x : v) x += d;
}

}  // namespace

void BatchRotatingKVCache::to_temporal_order() {
  if (!rotated_) return;
  keys_ = mx::roll(*keys_, -idx_, 2);
  values_ = mx::roll(*values_, -idx_, 2);
  idx_ = keys_->shape(2);
  rotated_ = false;
}

CachedKV BatchRotatingKVCache::update_concat(const mx::array& keys, const mx::array& values) {
  if (!keys_) {
    keys_ = keys;
    values_ = values;
  } else {
    // Put the keys/values in temporal order to preserve context
    to_temporal_order();
    // Slice off the end if needed
    if (keys_->shape(2) > idx_) {
      keys_ = positions(*keys_, 0, idx_);
      values_ = positions(*values_, 0, idx_);
    }
    // Roll right the rows that are padded so that no valid cache entry is trimmed
    if (lengths_) roll_padded_rows();
    // The largest size is max_size + S - 1 so that every token gets at least max_size of context
    const int trim_size = idx_ - max_size_ + 1;
    if (trim_size > 0) {
      left_padding_ = mx::subtract(left_padding_, mx::array(trim_size));
      add_to(host_left_padding_, -trim_size);
    }
    keys_ = trim_front(trim_size, *keys_, keys);
    values_ = trim_front(trim_size, *values_, values);
  }
  offset_ = mx::add(offset_, mx::array(keys.shape(2)));
  add_to(host_offset_, keys.shape(2));
  offset_scalar_ += keys.shape(2);
  idx_ = keys_->shape(2);
  // Make sure left_padding and offset are evaluated
  keys_ = mx::depends({*keys_}, {left_padding_, offset_})[0];
  return PlainKV{*keys_, *values_};
}

CachedKV BatchRotatingKVCache::update_in_place(const mx::array& keys, const mx::array& values) {
  if (lengths_)
    throw std::logic_error("finalize() should be called before deocoding with BatchRotatingKVCache");
  const int B = keys.shape(0), n_kv_heads = keys.shape(1), S = keys.shape(2);
  const int prev = offset_scalar_;
  // May not have hit the max size yet, so potentially keep growing the cache
  if (!keys_ || (prev >= keys_->shape(2) && keys_->shape(2) < max_size_)) {
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
  // Trim if needed
  const int trim_size = keys_->shape(2) - max_size_;
  if (trim_size > 0) {
    keys_ = trim_front(trim_size, *keys_);
    values_ = trim_front(trim_size, *values_);
    idx_ = max_size_;
    left_padding_ = mx::subtract(left_padding_, mx::array(trim_size));
    add_to(host_left_padding_, -trim_size);
  }
  // Rotate
  if (idx_ == max_size_) {
    rotated_ = true;
    idx_ = 0;
  }
  if (rotated_) {
    left_padding_ = mx::subtract(left_padding_, mx::array(S));
    add_to(host_left_padding_, -S);
  }
  // Assign
  mx::Shape start = {0, 0, idx_, 0};
  mx::Shape k_stop = {keys_->shape(0), keys_->shape(1), idx_ + S, keys_->shape(3)};
  mx::Shape v_stop = {values_->shape(0), values_->shape(1), idx_ + S, values_->shape(3)};
  keys_ = mx::slice_update(*keys_, keys, start, k_stop);
  values_ = mx::slice_update(*values_, values, start, v_stop);
  offset_scalar_ += S;
  offset_ = mx::add(offset_, mx::array(S));
  add_to(host_offset_, S);
  idx_ += S;
  // Make sure left_padding and offset are evaluated
  keys_ = mx::depends({*keys_}, {left_padding_, offset_})[0];
  return keys_and_values();
}

CachedKV BatchRotatingKVCache::update_and_fetch(const mx::array& keys, const mx::array& values) {
  if (keys.shape(2) == 1) return update_in_place(keys, values);
  return update_concat(keys, values);
}

PlainKV BatchRotatingKVCache::keys_and_values() const {
  if (offset_scalar_ < keys_->shape(2))
    return {positions(*keys_, 0, offset_scalar_), positions(*values_, 0, offset_scalar_)};
  return {*keys_, *values_};
}

void BatchRotatingKVCache::prepare(const std::optional<std::vector<int>>& left_padding, const std::vector<int>& lengths,
                                   const std::optional<std::vector<int>>& right_padding) {
  if (left_padding) {
    if (keys_) throw UsageError("Left padding can only be added to an empty BatchRotatingKVCache");
    auto lp = int_array(*left_padding);
    left_padding_ = mx::add(left_padding_, lp);
    offset_ = mx::subtract(offset_, lp);
    move_into_padding(host_left_padding_, host_offset_, *left_padding);
  }
  if (right_padding && !right_padding->empty() &&
      *std::max_element(right_padding->begin(), right_padding->end()) > 0) {
    lengths_ = mx::add(int_array(lengths), offset_);
    host_lengths_ = lengths;
    for (size_t i = 0; i < host_lengths_->size(); ++i) (*host_lengths_)[i] += host_offset_.at(i);
  }
}

// mlx-lm writes this roll twice (_update_concat and finalize): each right-padded row's entries
// moved right by how far its offset runs past its length, that much added to its left padding.
void BatchRotatingKVCache::roll_padded_rows() {
  auto roll = mx::maximum(mx::array(0), mx::subtract(offset_, *lengths_));
  keys_ = dynamic_roll(*keys_, mx::expand_dims(roll, 1), 2);
  values_ = dynamic_roll(*values_, mx::expand_dims(roll, 1), 2);
  left_padding_ = mx::add(left_padding_, roll);
  offset_ = mx::subtract(offset_, roll);
  std::vector<int> host_roll(host_offset_.size());  // the same maximum(0, offset - lengths)
  for (size_t i = 0; i < host_roll.size(); ++i) host_roll[i] = std::max(0, host_offset_[i] - host_lengths_->at(i));
  move_into_padding(host_left_padding_, host_offset_, host_roll);
}

void BatchRotatingKVCache::finalize() {
  if (!lengths_) return;
  roll_padded_rows();
  lengths_.reset();
  host_lengths_.reset();
}

std::vector<mx::array> BatchRotatingKVCache::state() const {
  std::vector<mx::array> s;
  if (keys_) {
    s.push_back(*keys_);
    s.push_back(*values_);
  }
  s.push_back(offset_);
  s.push_back(left_padding_);
  return s;
}

int BatchRotatingKVCache::trim(int n) {
  n = std::min(offset_scalar_, n);
  offset_scalar_ -= n;
  idx_ -= n;
  offset_ = mx::subtract(offset_, mx::array(n));
  add_to(host_offset_, -n);
  return n;
}

size_t BatchRotatingKVCache::nbytes() const { return keys_ ? keys_->nbytes() + values_->nbytes() : 0; }

AttentionMask BatchRotatingKVCache::make_mask(int n, std::optional<int> window_size) const {
  auto left_padding = left_padding_;
  // `window_size or self.max_size`
  const int window = window_size && *window_size != 0 ? *window_size : max_size_;
  const int offset = std::min(max_size_ - 1, offset_scalar_);
  auto rinds = mx::arange(offset + n);
  auto linds = offset ? mx::arange(offset, offset + n) : rinds;
  linds = mx::expand_dims(linds, 1);
  rinds = mx::expand_dims(rinds, 0);
  auto mask = mx::greater_equal(linds, rinds);
  mask = mx::logical_and(mask, mx::less(linds, mx::add(rinds, mx::array(window))));
  const int trim_size = idx_ - max_size_ + (n > 1 ? 1 : 0);
  if (trim_size > 0) left_padding = mx::subtract(left_padding, mx::array(trim_size));
  const bool rotated = n == 1 && (rotated_ || idx_ >= max_size_);
  if (rotated) left_padding = mx::subtract(left_padding, mx::array(1));
  mask = mx::logical_and(mask, mx::greater_equal(rinds, mx::expand_dims(left_padding, {1, 2, 3})));
  if (rotated) {
    const int idx = idx_ >= max_size_ ? 0 : idx_;
    mask = mx::roll(mask, idx + 1, -1);
  }
  return AttentionMask::of(mask);
}

void BatchRotatingKVCache::filter(const std::vector<int>& batch_indices) {
  auto indices = int_array(batch_indices);
  if (keys_) {
    keys_ = mx::take(*keys_, indices, 0);
    values_ = mx::take(*values_, indices, 0);
  }
  offset_ = mx::take(offset_, indices, 0);
  left_padding_ = mx::take(left_padding_, indices, 0);
  std::vector<int> offsets, pads;
  for (int i : batch_indices) offsets.push_back(host_offset_.at(i)), pads.push_back(host_left_padding_.at(i));
  host_offset_ = std::move(offsets);
  host_left_padding_ = std::move(pads);
}

void BatchRotatingKVCache::extend(BatchCache& other_base) {
  auto* other = dynamic_cast<BatchRotatingKVCache*>(&other_base);
  if (!other) throw std::logic_error("BatchRotatingKVCache::extend: the other cache is of another kind");
  if (keys_ || other->keys_) {
    if (rotated_ != other->rotated_ || idx_ != other->idx_) {
      to_temporal_order();
      other->to_temporal_order();
    }
    offset_scalar_ = std::max(offset_scalar_, other->offset_scalar_);
  }
  host_left_padding_ = batch_rows::join_left_padding(host_left_padding_, idx_, other->host_left_padding_,
                                                     other->idx_, keys_ || other->keys_);
  host_offset_.insert(host_offset_.end(), other->host_offset_.begin(), other->host_offset_.end());
  auto joined = batch_rows::join({keys_, values_, offset_, left_padding_, idx_},
                                 {other->keys_, other->values_, other->offset_, other->left_padding_, other->idx_});
  keys_ = std::move(joined.keys);
  values_ = std::move(joined.values);
  offset_ = std::move(joined.offset);
  left_padding_ = std::move(joined.left_padding);
  idx_ = joined.idx;
}

std::unique_ptr<Cache> BatchRotatingKVCache::extract(int idx) const {
  auto cache = std::make_unique<RotatingKVCache>(max_size_);
  const int padding = std::max(0, host_left_padding_.at(idx));
  const int offset = host_offset_.at(idx);
  if (!keys_) return cache;
  auto row = [&](const mx::array& a) {
    mx::Shape lo(a.ndim(), 0), hi = a.shape();
    lo[0] = idx;
    hi[0] = idx + 1;
    return mx::slice(a, lo, hi);
  };
  auto k = row(*keys_), v = row(*values_);
  int cache_idx = idx_;
  if (rotated_) {
    k = mx::roll(k, -idx_, 2);
    v = mx::roll(v, -idx_, 2);
    cache_idx = max_size_;
  }
  k = mx::contiguous(positions(k, padding, cache_idx));
  v = mx::contiguous(positions(v, padding, cache_idx));
  const int stored = k.shape(2);
  cache->set_state(k, v, offset, 0, max_size_, stored);
  return cache;
}

std::unique_ptr<BatchRotatingKVCache> BatchRotatingKVCache::merge(const std::vector<const RotatingKVCache*>& caches) {
  const int max_size = caches.front()->max_size();
  for (const auto* c : caches)
    if (c->max_size() != max_size)
      throw UsageError("BatchRotatingKVCache can only merge caches with the same maximum size");
  std::vector<int> offsets, lengths;
  for (const auto* c : caches) {
    offsets.push_back(c->offset());
    lengths.push_back(std::min(c->offset(), c->max_size()));  // RotatingKVCache.size()
  }
  const int max_length = *std::max_element(lengths.begin(), lengths.end());
  const int B = static_cast<int>(caches.size());
  // No cache has content so make an empty one
  if (max_length == 0) return std::make_unique<BatchRotatingKVCache>(max_size, std::vector<int>(B, 0));
  std::vector<int> padding;
  for (int l : lengths) padding.push_back(max_length - l);
  int H = 0, Dk = 0, Dv = 0;
  std::optional<mx::Dtype> dt;
  for (const auto* c : caches) {
    auto buf = c->buffers();
    if (!buf) continue;
    H = std::max(H, buf->keys.shape(1));
    Dk = std::max(Dk, buf->keys.shape(3));
    Dv = std::max(Dv, buf->values.shape(3));
    if (!dt) dt = buf->keys.dtype();
  }
  auto keys = mx::zeros({B, H, max_length, Dk}, *dt);
  auto values = mx::zeros({B, H, max_length, Dv}, *dt);
  for (int i = 0; i < B; ++i) {
    auto ordered = caches[i]->in_temporal_order();
    if (!ordered || lengths[i] == 0) continue;
    const int p = padding[i], l = lengths[i];
    auto last = [&](const mx::array& a) { return positions(a, a.shape(2) - l, a.shape(2)); };
    keys = mx::slice_update(keys, last(ordered->keys), mx::Shape{i, 0, p, 0}, mx::Shape{i + 1, H, p + l, Dk});
    values = mx::slice_update(values, last(ordered->values), mx::Shape{i, 0, p, 0}, mx::Shape{i + 1, H, p + l, Dv});
  }
  auto cache = std::make_unique<BatchRotatingKVCache>(max_size, padding);
  cache->keys_ = keys;
  cache->values_ = values;
  cache->offset_ = int_array(offsets);
  cache->host_offset_ = offsets;
  cache->idx_ = keys.shape(2);
  cache->offset_scalar_ = keys.shape(2);
  return cache;
}

}  // namespace mlxrt::cache
