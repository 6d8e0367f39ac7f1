// The key sequence of mlx's Python `mx.random` module (PyKeySequence in mlx's python/src/random.cpp).
#include "mlxrt/generate/random_state.h"

#include <chrono>

#include <mlx/random.h>
#include <mlx/transforms.h>

namespace mlxrt::generate {

namespace {

uint64_t time_seed() {
  auto now = std::chrono::system_clock::now();
  return std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
}

}  // namespace

RandomState::RandomState() : RandomState(time_seed()) {}

RandomState::RandomState(uint64_t seed) : key_(mx::random::key(seed)) {}

void RandomState::seed(uint64_t seed) { key_ = mx::random::key(seed); }

mx::array RandomState::next() {
  auto [kept, used] = mx::random::split(key_);
  key_ = kept;
  return used;
}

void RandomState::skip(int n) {
  for (int i = 0; i < n; ++i) key_ = mx::random::split(key_).first;
  // A long lazy chain of splits would be evaluated recursively later: cut it here.
  mx::eval(key_);
}

}  // namespace mlxrt::generate
