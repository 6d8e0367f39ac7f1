// The batched caches' common ground: which single-sequence caches batch, and into what
// (mlx-lm: `type(caches[0]).merge(caches)` in _merge_caches of mlx_lm/generate.py).
#include "mlxrt/cache/batch_cache.h"

#include "mlxrt/cache/batch_kv_cache.h"
#include "mlxrt/cache/batch_rotating_kv_cache.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::cache {

int BatchCache::offset() const {
  throw UnsupportedError("this model's attention reads one position offset, which a batched KV cache (one offset "
                         "per row) does not have: batched generation is not supported for it");
}

bool BatchCache::batches(const Cache& c) {
  return dynamic_cast<const KVCache*>(&c) || dynamic_cast<const RotatingKVCache*>(&c);
}

std::unique_ptr<BatchCache> BatchCache::merge(const std::vector<const Cache*>& caches) {
  if (caches.empty()) throw std::logic_error("BatchCache::merge: no caches");
  if (dynamic_cast<const KVCache*>(caches.front())) {
    std::vector<const KVCache*> parts;
    for (const auto* c : caches) {
      const auto* kv = dynamic_cast<const KVCache*>(c);
      if (!kv) throw UnsupportedError("batched generation: caches of different kinds for one layer");
      parts.push_back(kv);
    }
    return BatchKVCache::merge(parts);
  }
  if (dynamic_cast<const RotatingKVCache*>(caches.front())) {
    std::vector<const RotatingKVCache*> parts;
    for (const auto* c : caches) {
      const auto* rotating = dynamic_cast<const RotatingKVCache*>(c);
      if (!rotating) throw UnsupportedError("batched generation: caches of different kinds for one layer");
      parts.push_back(rotating);
    }
    return BatchRotatingKVCache::merge(parts);
  }
  throw UnsupportedError("batched generation: this model's layers keep a cache that does not batch yet (only "
                         "KVCache and RotatingKVCache do)");
}

void BatchCache::link_layers(const CacheList& layers) {
  const BatchCache* first = nullptr;
  for (const auto& layer : layers) {
    auto* batched = dynamic_cast<BatchCache*>(layer.get());
    if (!batched) continue;
    if (first)
      batched->share_forward_work(*first);
    else
      first = batched;
  }
}

CacheList BatchCache::merge_rows(const std::vector<const CacheList*>& rows) {
  CacheList merged;
  if (rows.empty()) return merged;
  for (size_t layer = 0; layer < rows[0]->size(); ++layer) {
    std::vector<const Cache*> parts;
    for (const auto* row : rows) parts.push_back((*row)[layer].get());
    merged.push_back(merge(parts));
  }
  link_layers(merged);
  return merged;
}

std::unique_ptr<BatchCache> BatchCache::empty_like(const Cache& like, const std::vector<int>& left_padding) {
  if (const auto* rotating = dynamic_cast<const RotatingKVCache*>(&like))
    return std::make_unique<BatchRotatingKVCache>(rotating->max_size(), left_padding);
  if (dynamic_cast<const KVCache*>(&like)) return std::make_unique<BatchKVCache>(left_padding);
  throw UnsupportedError("batched generation: this model's layers keep a cache that does not batch yet (only "
                         "KVCache and RotatingKVCache do)");
}

}  // namespace mlxrt::cache
