// Port of KVCache in mlx_lm/models/cache.py (mlx-lm 0.32.2).
#include "mlxrt/cache/kv_cache.h"

#include <algorithm>

#include <mlx/ops.h>

namespace mlxrt::cache {

namespace {

// a[..., :end, :]
mx::array prefix(const mx::array& a, int end) {
  mx::Shape start(a.ndim(), 0), stop = a.shape();
  stop[2] = end;
  return mx::slice(a, start, stop);
}

}  // namespace

void KVCache::depend_keys_on(const mx::array& x) {
  if (keys_) keys_ = mx::depends({*keys_}, {x})[0];
}

CachedKV KVCache::update_and_fetch(const mx::array& keys, const mx::array& values) {
  const int prev = offset_;
  const int length = keys.shape(2);
  if (!keys_ || prev + length > keys_->shape(2)) {
    const int n_steps = (kStep + length - 1) / kStep;
    mx::Shape k_shape = {keys.shape(0), keys.shape(1), n_steps * kStep, keys.shape(3)};
    mx::Shape v_shape = {values.shape(0), values.shape(1), n_steps * kStep, values.shape(3)};
    auto new_k = mx::zeros(k_shape, keys.dtype());
    auto new_v = mx::zeros(v_shape, values.dtype());
    if (keys_) {
      if (prev % kStep != 0) {
        keys_ = prefix(*keys_, prev);
        values_ = prefix(*values_, prev);
      }
      keys_ = mx::concatenate({*keys_, new_k}, 2);
      values_ = mx::concatenate({*values_, new_v}, 2);
    } else {
      keys_ = new_k;
      values_ = new_v;
    }
  }
  offset_ += length;
  mx::Shape start = {0, 0, prev, 0};
  mx::Shape k_stop = {keys_->shape(0), keys_->shape(1), offset_, keys_->shape(3)};
  mx::Shape v_stop = {values_->shape(0), values_->shape(1), offset_, values_->shape(3)};
  keys_ = mx::slice_update(*keys_, keys, start, k_stop);
  values_ = mx::slice_update(*values_, values, start, v_stop);
  auto kv = *keys_and_values();
  kv.keys_buffer = keys_;
  kv.values_buffer = values_;
  return kv;
}

std::optional<PlainKV> KVCache::keys_and_values() const {
  if (!keys_) return std::nullopt;
  if (offset_ < keys_->shape(2)) return PlainKV{prefix(*keys_, offset_), prefix(*values_, offset_)};
  return PlainKV{*keys_, *values_};
}

std::vector<mx::array> KVCache::state() const {
  if (!keys_) return {};
  return {*keys_, *values_};
}

int KVCache::trim(int n) {
  n = std::min(offset_, n);
  offset_ -= n;
  return n;
}

size_t KVCache::nbytes() const { return keys_ ? keys_->nbytes() + values_->nbytes() : 0; }

std::optional<PlainKV> KVCache::buffers() const {
  if (!keys_) return std::nullopt;
  return PlainKV{*keys_, *values_};
}

void KVCache::set_state(std::optional<mx::array> keys, std::optional<mx::array> values, int offset) {
  keys_ = std::move(keys);
  values_ = std::move(values);
  offset_ = offset;
}

}  // namespace mlxrt::cache
