// Port of ArraysCache in mlx_lm/models/cache.py (mlx-lm 0.32.2), for one sequence (no
// left_padding or lengths: those belong to batched generation).
#include "mlxrt/cache/arrays_cache.h"

#include "mlxrt/util/errors.h"

namespace mlxrt::cache {

CachedKV ArraysCache::update_and_fetch(const mx::array&, const mx::array&) {
  throw UnsupportedError("ArraysCache holds a recurrent layer's state, not keys and values");
}

std::vector<mx::array> ArraysCache::state() const {
  std::vector<mx::array> out;
  for (const auto& s : slots_)
    if (s) out.push_back(*s);
  return out;
}

size_t ArraysCache::nbytes() const {
  size_t n = 0;
  for (const auto& s : slots_)
    if (s) n += s->nbytes();
  return n;
}

void ArraysCache::set_state(std::vector<std::optional<mx::array>> slots, int offset) {
  slots_ = std::move(slots);
  offset_ = offset;
}

}  // namespace mlxrt::cache
