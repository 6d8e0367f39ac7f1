#pragma once
/** The PRNG key sequence that mlx's Python `mx.random` keeps (`mx.random.seed`, `mx.random.state`):
 * a single key; every random op without an explicit key takes `next()`, which splits the key and
 * keeps the first half. mlx-lm's samplers draw from it, so reproducing its key sequence is what
 * makes a seed give the same tokens.
 *
 * One RandomState is owned by whoever owns the session (a CLI run, a server engine) and shared
 * with the samplers it makes; it is not thread-safe. */
#include <cstdint>

#include <mlx/array.h>

namespace mlxrt::generate {

namespace mx = mlx::core;

class RandomState {
 public:
  /** Seeded from the wall clock in milliseconds, as mlx does when imported without a seed. */
  RandomState();
  explicit RandomState(uint64_t seed);

  /** mx.random.seed(seed). */
  void seed(uint64_t seed);
  /** The key a random op without a key would use; advances the state. */
  mx::array next();
  /** `n` draws whose keys nobody uses (mlx-lm's model construction draws initial weights). */
  void skip(int n);

  /** mx.random.state[0]. */
  const mx::array& key() const { return key_; }
  void set_key(mx::array key) { key_ = std::move(key); }

 private:
  mx::array key_;
};

}  // namespace mlxrt::generate
