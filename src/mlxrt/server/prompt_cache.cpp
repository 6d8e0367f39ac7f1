#include "mlxrt/server/prompt_cache.h"

#include <algorithm>

namespace mlxrt::server {

namespace {

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = std::min(a.size(), b.size()), i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

bool trimmable(const cache::CacheList& cache) {
  return std::all_of(cache.begin(), cache.end(), [](const auto& c) { return c->is_trimmable(); });
}

}  // namespace

size_t cache_nbytes(const cache::CacheList& cache) {
  size_t n = 0;
  for (const auto& c : cache) n += c->nbytes();
  return n;
}

PromptCache::Hit PromptCache::fetch(const std::vector<int32_t>& prompt, const std::string& model_key) const {
  if (prompt.empty()) return {};
  auto best = entries_.end();
  size_t best_len = 0;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->model_key != model_key) continue;
    size_t lcp = common_prefix(it->tokens, prompt);
    // The entry must end exactly at the shared prefix unless its cache can be trimmed back to it.
    size_t usable = std::min(lcp, prompt.size() - 1);
    if (usable < it->tokens.size() && !trimmable(it->cache)) continue;
    if (usable > best_len) {
      best = it;
      best_len = usable;
    }
  }
  if (best == entries_.end()) return {};
  Hit hit{{}, best_len};
  hit.cache.reserve(best->cache.size());
  for (const auto& c : best->cache) hit.cache.push_back(c->clone());
  const size_t extra = best->tokens.size() - best_len;
  if (extra > 0)
    for (auto& c : hit.cache) c->trim(static_cast<int>(extra));
  return hit;
}

void PromptCache::insert(std::vector<int32_t> tokens, cache::CacheList cache, const std::string& model_key) {
  if (max_entries_ == 0 || tokens.empty() || cache.empty()) return;
  for (auto it = entries_.begin(); it != entries_.end();) {
    bool same_or_prefix = it->model_key == model_key && it->tokens.size() <= tokens.size() &&
                          std::equal(it->tokens.begin(), it->tokens.end(), tokens.begin());
    if (same_or_prefix && (it->tokens.size() == tokens.size() || trimmable(cache))) {
      nbytes_ -= it->nbytes;
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  size_t bytes = cache_nbytes(cache);
  entries_.push_back(Entry{model_key, std::move(tokens), std::move(cache), bytes});
  nbytes_ += bytes;
  evict();
}

void PromptCache::evict() {
  while (!entries_.empty()) {
    const bool over_count = entries_.size() > max_entries_;
    bool over_bytes = max_bytes_ && nbytes_ > *max_bytes_;
    if (max_bytes_ && agree_) over_bytes = agree_(over_bytes);
    if (!over_count && !over_bytes) break;
    nbytes_ -= entries_.front().nbytes;
    entries_.pop_front();
  }
}

}  // namespace mlxrt::server
