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

void KVCache::expose() const {
  if (last_writer_ && keys_) {
    auto waited = mx::depends({*keys_, *values_}, {*last_writer_});
    keys_ = waited[0];
    values_ = waited[1];
  }
  last_writer_.reset();
  exclusive_ = false;
}

std::unique_ptr<Cache> KVCache::clone() const {
  expose();
  auto copy = std::make_unique<KVCache>(*this);
  copy->barrier_.reset();  // a barrier state belongs to one chain of launches
  return copy;
}

void KVCache::depend_keys_on(const mx::array& x) {
  expose();
  if (keys_) keys_ = mx::depends({*keys_}, {x})[0];
}

std::optional<KVCache::InPlaceWrite> KVCache::begin_in_place_write(const mx::Shape& shape, mx::Dtype type,
                                                                   int barrier_words) {
  if (shape.size() != 4 || shape[2] != 1) return std::nullopt;
  if (keys_ && (keys_->dtype() != type || values_->dtype() != type || keys_->shape(0) != shape[0] ||
                keys_->shape(1) != shape[1] || keys_->shape(3) != shape[3] || values_->shape() != keys_->shape()))
    return std::nullopt;
  const int prev = offset_;
  if (!keys_ || prev + 1 > keys_->shape(2)) {
    // update_and_fetch's growth for one position; the new buffers are nobody else's.
    const mx::Shape grown = {shape[0], shape[1], kStep, shape[3]};
    const auto zeros = mx::zeros(grown, type);
    if (keys_) {
      expose();  // the concatenation reads the old buffers after the last write
      const auto k = prev % kStep != 0 ? prefix(*keys_, prev) : *keys_;
      const auto v = prev % kStep != 0 ? prefix(*values_, prev) : *values_;
      keys_ = mx::concatenate({k, zeros}, 2);
      values_ = mx::concatenate({v, zeros}, 2);
    } else {
      keys_ = zeros;  // MLX's zeros are a buffer of their own (its Full node)
      values_ = mx::zeros(grown, type);
    }
    exclusive_ = true;
  }
  if (!exclusive_) {
    // Someone may hold these buffers (a clone, a prompt cache, the state read out): the positions
    // so far into new buffers of the same capacity. (mx::copy would not do: MLX's Copy shares its
    // input's buffer, arrays being immutable to everyone but such kernels.)
    expose();
    const int capacity = keys_->shape(2);
    const mx::Shape tail = {shape[0], shape[1], capacity - prev, shape[3]};
    keys_ = mx::concatenate({prefix(*keys_, prev), mx::zeros(tail, type)}, 2);
    values_ = mx::concatenate({prefix(*values_, prev), mx::zeros(tail, type)}, 2);
    exclusive_ = true;
  }
  if (!barrier_ || barrier_->size() != static_cast<size_t>(barrier_words))
    barrier_ = mx::zeros({barrier_words}, mx::uint32);
  offset_ = prev + 1;
  return InPlaceWrite{*keys_, *values_, prev, *barrier_};
}

void KVCache::end_in_place_write(const mx::array& next_barrier) {
  barrier_ = next_barrier;
  last_writer_ = next_barrier;
}

CachedKV KVCache::update_and_fetch(const mx::array& keys, const mx::array& values) {
  expose();
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
  expose();
  if (offset_ < keys_->shape(2)) return PlainKV{prefix(*keys_, offset_), prefix(*values_, offset_)};
  return PlainKV{*keys_, *values_};
}

std::vector<mx::array> KVCache::state() const {
  if (!keys_) return {};
  expose();
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
  expose();
  return PlainKV{*keys_, *values_};
}

void KVCache::set_state(std::optional<mx::array> keys, std::optional<mx::array> values, int offset) {
  expose();
  keys_ = std::move(keys);
  values_ = std::move(values);
  offset_ = offset;
}

}  // namespace mlxrt::cache
