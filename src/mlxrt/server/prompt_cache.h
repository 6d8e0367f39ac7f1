#pragma once
/** The server's prompt cache: KV caches of earlier requests keyed by the tokens they hold, reused
 * for the longest common token prefix with a new prompt, evicted least-recently-used beyond a
 * count and a byte budget (mlx_lm's LRUPromptCache policy).
 *
 * An entry is handed out as a copy and stays cached, as mlx-lm's fetch_nearest_cache deep-copies
 * it: a later prompt sharing a longer prefix with that entry still finds it. The copy shares the
 * entry's arrays until the request writes. Not thread-safe: only the generation thread uses it. */
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <string>
#include <vector>

#include "mlxrt/cache/cache.h"

namespace mlxrt::server {

class PromptCache {
 public:
  PromptCache(size_t max_entries, std::optional<size_t> max_bytes)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}

  struct Hit {
    cache::CacheList cache;  // empty when nothing is reused
    size_t reused = 0;       // prompt tokens already in `cache`
  };

  /** A copy of the entry sharing the longest prefix with `prompt`, trimmed to that prefix; the
   * entry itself stays. At least one prompt token is always left to process. Only entries stored
   * under the same `model_key` (the adapter the KV was computed with; "" for the plain model) are
   * reused, as mlx-lm keys its cache by (model, adapter, draft model). */
  Hit fetch(const std::vector<int32_t>& prompt, const std::string& model_key = {}) const;

  /** Stores `cache` holding the KV of exactly `tokens`. Entries whose key is a prefix of `tokens`
   * are dropped (the new one serves them), then the oldest ones until within the limits. */
  void insert(std::vector<int32_t> tokens, cache::CacheList cache, const std::string& model_key = {});

  size_t size() const { return entries_.size(); }

  /** A distributed server's ranks hold different bytes for the same entries (a pipeline's ranks
   * hold different layers), so whether the byte budget is exceeded is the leader's answer,
   * `agree(mine)` (Lockstep::agree); the count limit needs no agreement. */
  void set_agreement(std::function<bool(bool)> agree) { agree_ = std::move(agree); }
  size_t nbytes() const { return nbytes_; }

 private:
  struct Entry {
    std::string model_key;
    std::vector<int32_t> tokens;
    cache::CacheList cache;
    size_t nbytes;
  };
  void evict();

  size_t max_entries_;
  std::optional<size_t> max_bytes_;
  std::list<Entry> entries_;  // front: least recently used
  size_t nbytes_ = 0;
  std::function<bool(bool)> agree_;
};

/** Bytes held by a cache list. */
size_t cache_nbytes(const cache::CacheList& cache);

}  // namespace mlxrt::server
