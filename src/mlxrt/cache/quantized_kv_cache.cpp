// Port of QuantizedKVCache and KVCache.to_quantized (mlx_lm/models/cache.py) and
// maybe_quantize_kv_cache (mlx_lm/generate.py), mlx-lm 0.32.2.
#include "mlxrt/cache/quantized_kv_cache.h"

#include <string>

#include <mlx/ops.h>

#include "mlxrt/cache/rotating_kv_cache.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::cache {

namespace {

// x[..., :end, :]
mx::array seq_prefix(const mx::array& x, int end) {
  mx::Shape lo(x.ndim(), 0), hi = x.shape();
  hi[x.ndim() - 2] = end;
  return mx::slice(x, lo, hi);
}

QuantizedTensor map(const QuantizedTensor& t, const auto& f) { return {f(t.packed), f(t.scales), f(t.biases)}; }

QuantizedTensor quantize(const mx::array& x, int group_size, int bits) {
  auto q = mx::quantize(x, group_size, bits);
  return {q[0], q[1], q[2]};
}

// self.keys[i][..., prev:offset, :] = new[i]
mx::array write_rows(const mx::array& buffer, const mx::array& rows, int prev, int offset) {
  mx::Shape lo(buffer.ndim(), 0), hi = buffer.shape();
  lo[buffer.ndim() - 2] = prev;
  hi[buffer.ndim() - 2] = offset;
  return mx::slice_update(buffer, rows, lo, hi);
}

}  // namespace

QuantizedKVCache::QuantizedKVCache(int group_size, int bits) : group_size_(group_size), bits_(bits) {}

CachedKV QuantizedKVCache::update_and_fetch(const mx::array& keys, const mx::array& values) {
  const int B = keys.shape(0), n_kv_heads = keys.shape(1), num_steps = keys.shape(2);
  const int k_head_dim = keys.shape(3), v_head_dim = values.shape(-1);
  const int prev = offset_;
  if (!keys_ || prev + num_steps > keys_->packed.shape(-2)) {
    const int el_per_int = 8 * static_cast<int>(mx::uint32.size()) / bits_;
    const int new_steps = (kStep + num_steps - 1) / kStep * kStep;
    auto init_quant = [&](int dim) {
      return QuantizedTensor{mx::zeros({B, n_kv_heads, new_steps, dim / el_per_int}, mx::uint32),
                             mx::zeros({B, n_kv_heads, new_steps, dim / group_size_}, keys.dtype()),
                             mx::zeros({B, n_kv_heads, new_steps, dim / group_size_}, keys.dtype())};
    };
    auto expand_quant = [&](const mx::array& x) {
      auto new_x = mx::zeros({B, n_kv_heads, new_steps, x.shape(-1)}, x.dtype());
      return mx::concatenate({x, new_x}, -2);
    };
    if (keys_) {
      if (prev % kStep != 0) {
        auto cut = [&](const mx::array& x) { return seq_prefix(x, prev); };
        keys_ = map(*keys_, cut);
        values_ = map(*values_, cut);
      }
      keys_ = map(*keys_, expand_quant);
      values_ = map(*values_, expand_quant);
    } else {
      keys_ = init_quant(k_head_dim);
      values_ = init_quant(v_head_dim);
    }
  }
  offset_ += num_steps;
  auto qk = quantize(keys, group_size_, bits_);
  auto qv = quantize(values, group_size_, bits_);
  keys_ = QuantizedTensor{write_rows(keys_->packed, qk.packed, prev, offset_),
                          write_rows(keys_->scales, qk.scales, prev, offset_),
                          write_rows(keys_->biases, qk.biases, prev, offset_)};
  values_ = QuantizedTensor{write_rows(values_->packed, qv.packed, prev, offset_),
                            write_rows(values_->scales, qv.scales, prev, offset_),
                            write_rows(values_->biases, qv.biases, prev, offset_)};
  return keys_and_values();
}

QuantizedKV QuantizedKVCache::keys_and_values() const {
  if (offset_ == keys_->packed.shape(2)) return {*keys_, *values_, group_size_, bits_};
  auto cut = [&](const mx::array& x) { return seq_prefix(x, offset_); };
  return {map(*keys_, cut), map(*values_, cut), group_size_, bits_};
}

std::optional<QuantizedKV> QuantizedKVCache::buffers() const {
  if (!keys_) return std::nullopt;
  return QuantizedKV{*keys_, *values_, group_size_, bits_};
}

std::vector<mx::array> QuantizedKVCache::state() const {
  if (!keys_) return {};
  return {keys_->packed, keys_->scales, keys_->biases, values_->packed, values_->scales, values_->biases};
}

int QuantizedKVCache::trim(int n) {
  n = std::min(offset_, n);
  offset_ -= n;
  return n;
}

size_t QuantizedKVCache::nbytes() const {
  size_t total = 0;
  for (const auto& a : state()) total += a.nbytes();
  return total;
}

void QuantizedKVCache::set_state(std::optional<QuantizedTensor> keys, std::optional<QuantizedTensor> values,
                                 int offset, int group_size, int bits) {
  keys_ = std::move(keys);
  values_ = std::move(values);
  offset_ = offset;
  group_size_ = group_size;
  bits_ = bits;
}

std::unique_ptr<QuantizedKVCache> to_quantized(const KVCache& cache, int group_size, int bits) {
  auto out = std::make_unique<QuantizedKVCache>(group_size, bits);
  auto buffers = cache.buffers();
  std::optional<QuantizedTensor> keys, values;
  if (buffers) {
    keys = quantize(buffers->keys, group_size, bits);
    values = quantize(buffers->values, group_size, bits);
  }
  out->set_state(std::move(keys), std::move(values), cache.offset(), group_size, bits);
  return out;
}

void validate_kv_quantization(std::optional<int> kv_bits, int kv_group_size, int quantized_kv_start) {
  if (!kv_bits) return;
  const int b = *kv_bits;
  if (b != 2 && b != 3 && b != 4 && b != 5 && b != 6 && b != 8)
    throw UsageError("--kv-bits must be one of 2, 3, 4, 5, 6, 8 (got " + std::to_string(b) + ")");
  if (kv_group_size != 32 && kv_group_size != 64 && kv_group_size != 128)
    throw UsageError("--kv-group-size must be one of 32, 64, 128 (got " + std::to_string(kv_group_size) + ")");
  if (quantized_kv_start < 0)
    throw UsageError("--quantized-kv-start must be >= 0 (got " + std::to_string(quantized_kv_start) + ")");
}

void maybe_quantize_kv_cache(CacheList& cache, std::optional<int> kv_bits, int kv_group_size,
                             int quantized_kv_start) {
  if (!kv_bits) return;
  for (auto& c : cache) {
    if (c->offset() < quantized_kv_start) continue;
    if (const auto* kv = dynamic_cast<const KVCache*>(c.get())) {
      const int head_dim = kv->buffers() ? kv->buffers()->keys.shape(-1) : 0;
      if (head_dim % kv_group_size != 0)
        throw UsageError("--kv-group-size " + std::to_string(kv_group_size) +
                         " does not divide the model's head size " + std::to_string(head_dim));
      c = to_quantized(*kv, kv_group_size, *kv_bits);
    } else if (dynamic_cast<const RotatingKVCache*>(c.get())) {
      // mlx-lm: RotatingKVCache.to_quantized raises "RotatingKVCache Quantization NYI".
      throw UnsupportedError(
          "--kv-bits: a rotating KV cache (--max-kv-size or sliding-window layers) cannot be quantized "
          "(mlx-lm does not support it either)");
    }
  }
}

}  // namespace mlxrt::cache
