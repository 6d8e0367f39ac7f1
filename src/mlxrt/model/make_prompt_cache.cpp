// Port of make_prompt_cache (mlx_lm/models/cache.py, mlx-lm 0.32.2), and the check of a loaded
// prompt cache against the model (mlx-lm has none: a mismatched cache fails somewhere in the graph).
#include "mlxrt/model/make_prompt_cache.h"

#include <string>

#include "mlxrt/cache/arrays_cache.h"
#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/cache/prompt_cache.h"
#include "mlxrt/cache/quantized_kv_cache.h"
#include "mlxrt/cache/rotating_kv_cache.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::model {

CacheList make_prompt_cache(const CausalLM& model, std::optional<int> max_kv_size) {
  if (max_kv_size && *max_kv_size < 1)
    throw UsageError("--max-kv-size must be at least 1, got " + std::to_string(*max_kv_size));
  auto caches = model.make_cache();
  if (model.defines_make_cache() || !max_kv_size) return caches;
  const size_t num_layers = caches.size();
  caches.clear();
  for (size_t i = 0; i < num_layers; ++i)
    caches.push_back(std::make_unique<cache::RotatingKVCache>(*max_kv_size, /*keep=*/4));
  return caches;
}

namespace {

struct StoredShape {
  int batch, n_kv_heads, k_head_dim, v_head_dim;
};

// The [B, heads, L, D] layout a layer cache holds; nullopt while empty.
std::optional<StoredShape> stored_shape(const cache::Cache& c) {
  if (const auto* kv = dynamic_cast<const cache::KVCache*>(&c)) {
    auto b = kv->buffers();
    if (b) return StoredShape{b->keys.shape(0), b->keys.shape(1), b->keys.shape(3), b->values.shape(3)};
  } else if (const auto* r = dynamic_cast<const cache::RotatingKVCache*>(&c)) {
    auto b = r->buffers();
    if (b) return StoredShape{b->keys.shape(0), b->keys.shape(1), b->keys.shape(3), b->values.shape(3)};
  } else if (const auto* q = dynamic_cast<const cache::QuantizedKVCache*>(&c)) {
    auto b = q->buffers();
    // One scale per group: the head size is groups x group_size.
    if (b)
      return StoredShape{b->keys.scales.shape(0), b->keys.scales.shape(1), b->keys.scales.shape(3) * b->group_size,
                         b->values.scales.shape(3) * b->group_size};
  }
  return std::nullopt;
}

bool same_kind(const cache::Cache& expected, const cache::Cache& got) {
  const auto e = cache::cache_class_name(expected), g = cache::cache_class_name(got);
  // A plain cache may have been quantized (maybe_quantize_kv_cache) before it was saved.
  return e == g || (e == "KVCache" && g == "QuantizedKVCache");
}

}  // namespace

void check_prompt_cache(const CausalLM& model, const CacheList& cache, const std::string& source) {
  const auto expected = model.make_cache();
  if (cache.size() != expected.size())
    throw ConfigError(source + ": the prompt cache has " + std::to_string(cache.size()) +
                      " layers, the model has " + std::to_string(expected.size()) +
                      " (was it saved from another model?)");
  const auto shapes = model.kv_shapes();
  const auto array_shapes = model.array_state_shapes();
  for (size_t i = 0; i < cache.size(); ++i) {
    const auto layer = "layer " + std::to_string(i);
    if (model.defines_make_cache() && !same_kind(*expected[i], *cache[i]))
      throw ConfigError(source + ": " + layer + " holds a " + cache::cache_class_name(*cache[i]) +
                        ", the model uses a " + cache::cache_class_name(*expected[i]) + " there");
    if (const auto* arrays = dynamic_cast<const cache::ArraysCache*>(cache[i].get())) {
      const auto* want = i < array_shapes.size() ? &array_shapes[i] : nullptr;
      if (want && !want->empty() && static_cast<size_t>(arrays->size()) != want->size())
        throw ConfigError(source + ": " + layer + " holds " + std::to_string(arrays->size()) +
                          " state arrays, the model keeps " + std::to_string(want->size()));
      for (int j = 0; j < arrays->size(); ++j) {
        const auto& slot = (*arrays)[j];
        if (!slot) continue;
        if (want && !want->empty() && slot->shape() != (*want)[static_cast<size_t>(j)]) {
          auto str = [](const mx::Shape& s) {
            std::string out = "[";
            for (size_t d = 0; d < s.size(); ++d) out += (d ? ", " : "") + std::to_string(s[d]);
            return out + "]";
          };
          throw ConfigError(source + ": " + layer + " state array " + std::to_string(j) + " has shape " +
                            str(slot->shape()) + ", the model keeps " + str((*want)[static_cast<size_t>(j)]) +
                            " (was it saved from another model?)");
        }
      }
      continue;
    }
    auto got = stored_shape(*cache[i]);
    if (!got) continue;
    if (got->batch != 1)
      throw ConfigError(source + ": " + layer + " holds a batch of " + std::to_string(got->batch) +
                        " sequences, expected 1");
    if (i < shapes.size()) {
      const auto& want = shapes[i];
      if (got->n_kv_heads != want.n_kv_heads || got->k_head_dim != want.k_head_dim ||
          got->v_head_dim != want.v_head_dim)
        throw ConfigError(source + ": " + layer + " stores " + std::to_string(got->n_kv_heads) +
                          " KV heads of size " + std::to_string(got->k_head_dim) + "/" +
                          std::to_string(got->v_head_dim) + ", the model uses " + std::to_string(want.n_kv_heads) +
                          " of size " + std::to_string(want.k_head_dim) + "/" + std::to_string(want.v_head_dim) +
                          " (was it saved from another model?)");
    }
  }
}

}  // namespace mlxrt::model
