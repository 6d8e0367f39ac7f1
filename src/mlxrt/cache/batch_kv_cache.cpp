// Port of BatchKVCache and dynamic_roll in mlx_lm/models/cache.py and of create_causal_mask's
// left_padding in mlx_lm/models/base.py (mlx-lm 0.32.2).
#include "mlxrt/cache/batch_kv_cache.h"

#include <algorithm>
#include <optional>
#include <vector>

#include <mlx/device.h>
#include <mlx/ops.h>
#include <mlx/transforms.h>

#include "mlxrt/cache/batch_rows.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::cache {

using batch_rows::int_array;
using batch_rows::positions;

mx::array create_causal_mask(int n, int offset, std::optional<int> window_size, const mx::array& left_padding) {
  auto rinds = mx::arange(offset + n);
  auto linds = offset ? mx::arange(offset, offset + n) : rinds;
  linds = mx::expand_dims(linds, 1);
  rinds = mx::expand_dims(rinds, 0);
  auto mask = mx::greater_equal(linds, rinds);
  if (window_size) mask = mx::logical_and(mask, mx::less(linds, mx::add(rinds, mx::array(*window_size))));
  mask = mx::logical_and(mask, mx::less_equal(mx::expand_dims(left_padding, {1, 2, 3}), rinds));
  return mask;
}

mx::array dynamic_roll(const mx::array& x, const mx::array& shifts, int axis) {
  const int n = x.shape(axis);
  const int ndim = static_cast<int>(x.ndim());
  // shifts[(...,) + (None,) * (x.ndim - axis)], mx.arange(n)[(...,) + (None,) * (x.ndim - axis - 1)]
  auto s = shifts;
  for (int i = 0; i < ndim - axis; ++i) s = mx::expand_dims(s, -1);
  auto ar = mx::arange(n);
  for (int i = 0; i < ndim - axis - 1; ++i) ar = mx::expand_dims(ar, -1);
  auto idx = mx::remainder(mx::subtract(ar, s), mx::array(n));
  return mx::take_along_axis(x, idx, axis);
}

BatchKVCache::BatchKVCache(const std::vector<int>& left_padding)
    : left_padding_(int_array(left_padding)), host_left_padding_(left_padding), offset_(mx::array(0)) {
  std::vector<int> neg(left_padding.size());
  std::transform(left_padding.begin(), left_padding.end(), neg.begin(), [](int l) { return -l; });
  offset_ = int_array(neg);
  host_offset_ = neg;
}

void BatchKVCache::depend_keys_on(const mx::array& x) {
  if (keys_) keys_ = mx::depends({*keys_}, {x})[0];
}

CachedKV BatchKVCache::update_and_fetch(const mx::array& keys, const mx::array& values) {
  const int prev = idx_;
  const int length = keys.shape(2);
  if (!keys_ || prev + length > keys_->shape(2)) {
    const int n_steps = (kStep + length - 1) / kStep;
    mx::Shape k_shape = {keys.shape(0), keys.shape(1), n_steps * kStep, keys.shape(3)};
    mx::Shape v_shape = {values.shape(0), values.shape(1), n_steps * kStep, values.shape(3)};
    auto new_k = mx::zeros(k_shape, keys.dtype());
    auto new_v = mx::zeros(v_shape, values.dtype());
    if (keys_) {
      if (prev % kStep != 0) {
        keys_ = positions(*keys_, 0, prev);
        values_ = positions(*values_, 0, prev);
      }
      keys_ = mx::concatenate({*keys_, new_k}, 2);
      values_ = mx::concatenate({*values_, new_v}, 2);
    } else {
      keys_ = new_k;
      values_ = new_v;
    }
  }
  auto& a = *last_advance_;
  if (a && a->length == length && a->dtype == offset_.dtype() && a->device == mx::default_device() &&
      a->from == host_offset_) {
    offset_ = a->to;
  } else {
    const auto dtype = offset_.dtype();
    offset_ = mx::add(offset_, mx::array(length));
    a = AdvancedOffsets{host_offset_, dtype, length, mx::default_device(), offset_};
  }
  for (auto& o : host_offset_) o += length;
  idx_ += length;
  mx::Shape start = {0, 0, prev, 0};
  mx::Shape k_stop = {keys_->shape(0), keys_->shape(1), idx_, keys_->shape(3)};
  mx::Shape v_stop = {values_->shape(0), values_->shape(1), idx_, values_->shape(3)};
  keys_ = mx::slice_update(*keys_, keys, start, k_stop);
  values_ = mx::slice_update(*values_, values, start, v_stop);
  // The buffers too, as KVCache gives them: a prefill's attention on CUDA reads past idx_ into them
  // (model/nn/attention.cpp, padded_prefill_attention).
  return PlainKV{positions(*keys_, 0, idx_), positions(*values_, 0, idx_), keys_, values_};
}

void BatchKVCache::share_forward_work(const BatchCache& first) {
  if (const auto* kv = dynamic_cast<const BatchKVCache*>(&first)) last_advance_ = kv->last_advance_;
}

void BatchKVCache::prepare(const std::optional<std::vector<int>>& left_padding, const std::vector<int>& /*lengths*/,
                           const std::optional<std::vector<int>>& right_padding) {
  if (left_padding) {
    if (keys_) throw UsageError("Left padding can only be added to an empty BatchKVCache");
    auto lp = int_array(*left_padding);
    left_padding_ = mx::add(left_padding_, lp);
    offset_ = mx::subtract(offset_, lp);
    for (size_t i = 0; i < host_offset_.size(); ++i) host_offset_[i] -= (*left_padding)[i];
    for (size_t i = 0; i < host_left_padding_.size(); ++i) host_left_padding_[i] += (*left_padding)[i];
  }
  if (right_padding && !right_padding->empty() &&
      *std::max_element(right_padding->begin(), right_padding->end()) > 0) {
    right_padding_ = int_array(*right_padding);
    host_right_padding_ = *right_padding;
  }
}

void BatchKVCache::finalize() {
  if (!right_padding_) return;
  auto padding = *right_padding_;
  auto shifts = mx::expand_dims(padding, 1);
  keys_ = dynamic_roll(*keys_, shifts, 2);
  values_ = dynamic_roll(*values_, shifts, 2);
  offset_ = mx::subtract(offset_, padding);
  for (size_t i = 0; i < host_offset_.size(); ++i) host_offset_[i] -= host_right_padding_[i];
  left_padding_ = mx::add(left_padding_, padding);
  for (size_t i = 0; i < host_left_padding_.size(); ++i) host_left_padding_[i] += host_right_padding_[i];
  right_padding_.reset();
}

std::vector<mx::array> BatchKVCache::state() const {
  std::vector<mx::array> s;
  if (keys_) {
    s.push_back(*keys_);
    s.push_back(*values_);
  }
  s.push_back(offset_);
  s.push_back(left_padding_);
  return s;
}

int BatchKVCache::trim(int n) {
  n = std::min(idx_, n);
  idx_ -= n;
  offset_ = mx::subtract(offset_, mx::array(n));
  for (auto& o : host_offset_) o -= n;
  return n;
}

AttentionMask BatchKVCache::make_mask(int n, std::optional<int> window_size) const {
  return AttentionMask::of(create_causal_mask(n, idx_, window_size, left_padding_));
}

void BatchKVCache::filter(const std::vector<int>& batch_indices) {
  auto indices = int_array(batch_indices);
  if (keys_) {
    keys_ = mx::take(*keys_, indices, 0);
    values_ = mx::take(*values_, indices, 0);
  }
  offset_ = mx::take(offset_, indices, 0);
  std::vector<int> kept;
  for (int i : batch_indices) kept.push_back(host_offset_.at(i));
  host_offset_ = std::move(kept);
  left_padding_ = mx::take(left_padding_, indices, 0);
  std::vector<int> pads;
  for (int i : batch_indices) pads.push_back(host_left_padding_.at(i));
  host_left_padding_ = std::move(pads);
  // Shift left to reduce padding
  const auto& kept_pads = host_left_padding_;
  const int min_left_pad = kept_pads.empty() ? 0 : *std::min_element(kept_pads.begin(), kept_pads.end());
  if (min_left_pad > 0) {
    if (keys_) {
      keys_ = positions(*keys_, min_left_pad, keys_->shape(2));
      values_ = positions(*values_, min_left_pad, values_->shape(2));
    }
    idx_ -= min_left_pad;
    left_padding_ = mx::subtract(left_padding_, mx::array(min_left_pad));
    for (auto& p : host_left_padding_) p -= min_left_pad;
  }
}

void BatchKVCache::extend(BatchCache& other_base) {
  const auto* other = dynamic_cast<const BatchKVCache*>(&other_base);
  if (!other) throw std::logic_error("BatchKVCache::extend: the other cache is of another kind");
  host_left_padding_ = batch_rows::join_left_padding(host_left_padding_, idx_, other->host_left_padding_,
                                                     other->idx_, keys_ || other->keys_);
  auto joined = batch_rows::join({keys_, values_, offset_, left_padding_, idx_},
                                 {other->keys_, other->values_, other->offset_, other->left_padding_, other->idx_});
  keys_ = std::move(joined.keys);
  values_ = std::move(joined.values);
  offset_ = std::move(joined.offset);
  left_padding_ = std::move(joined.left_padding);
  idx_ = joined.idx;
  host_offset_.insert(host_offset_.end(), other->host_offset_.begin(), other->host_offset_.end());
}

std::unique_ptr<Cache> BatchKVCache::extract(int idx) const {
  auto cache = std::make_unique<KVCache>();
  const int padding = host_left_padding_.at(idx);
  auto rows = [&](const mx::array& a) {
    mx::Shape lo = {idx, 0, padding, 0}, hi = a.shape();
    hi[0] = idx + 1;
    hi[2] = idx_;
    return mx::contiguous(mx::slice(a, lo, hi));
  };
  if (!keys_) return cache;
  auto k = rows(*keys_), v = rows(*values_);
  const int offset = k.shape(2);
  cache->set_state(k, v, offset);
  return cache;
}

std::unique_ptr<BatchKVCache> BatchKVCache::merge(const std::vector<const KVCache*>& caches) {
  std::vector<int> lengths;
  for (const auto* c : caches) lengths.push_back(c->offset());
  const int max_length = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  if (max_length == 0) return std::make_unique<BatchKVCache>(std::vector<int>(caches.size(), 0));
  std::vector<int> padding;
  for (int l : lengths) padding.push_back(max_length - l);
  const int B = static_cast<int>(caches.size());
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
    auto buf = caches[i]->buffers();
    if (!buf) continue;
    const int p = padding[i], off = caches[i]->offset();
    keys = mx::slice_update(keys, positions(buf->keys, 0, off), mx::Shape{i, 0, p, 0}, mx::Shape{i + 1, H, p + off, Dk});
    values = mx::slice_update(values, positions(buf->values, 0, off), mx::Shape{i, 0, p, 0},
                              mx::Shape{i + 1, H, p + off, Dv});
  }
  auto cache = std::make_unique<BatchKVCache>(padding);
  cache->keys_ = keys;
  cache->values_ = values;
  cache->offset_ = mx::add(cache->offset_, mx::array(max_length));
  for (auto& o : cache->host_offset_) o += max_length;
  cache->idx_ = max_length;
  return cache;
}

size_t BatchKVCache::nbytes() const { return keys_ ? keys_->nbytes() + values_->nbytes() : 0; }

}  // namespace mlxrt::cache
