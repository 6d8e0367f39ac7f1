#pragma once
/** Perplexity as mlx_lm.perplexity computes it (port of mlx_lm/perplexity.py @ mlx-lm 0.32.2):
 * the per-token cross-entropy of batches of fixed-length rows, its mean, and the standard error
 * by the delta approximation. The same ops in the same order, so the numbers are equal. */
#include <cstdint>
#include <functional>
#include <vector>

#include <mlx/array.h>

#include "mlxrt/model/causal_lm.h"

namespace mlxrt::generate {

namespace mx = mlx::core;

/** mlx.nn.losses.cross_entropy(logits, targets, reduction="none") for class-index targets:
 * mx.fast.cross_entropy on a GPU default device, else the plain ops (max-shifted logits,
 * logsumexp minus the target's logit). */
mx::array cross_entropy(const mx::array& logits, const mx::array& targets);

struct PerplexityResult {
  double ppl = 0;             // exp(mean loss)
  double standard_error = 0;  // ppl * std(losses, ddof=1) / sqrt(N)
  mx::array losses;           // every token's loss, float32, in batch order
};

/** eval_ppl(model, data, batch_size): `data` is [rows, L] int32; each batch's first L-1 columns
 * go through one cache-free forward and are scored against the next tokens. `on_batch(done,
 * total)` is called after each batch (mlx-lm prints its progress line there). */
PerplexityResult eval_ppl(model::CausalLM& model, const mx::array& data, int batch_size,
                          const std::function<void(int, int)>& on_batch = {});

/** numpy's legacy np.random.seed(seed); np.random.permutation(n): MT19937 seeded by
 * init_genrand, Fisher-Yates from the end with a masked-rejection bounded draw. */
std::vector<int64_t> numpy_permutation(uint32_t seed, int64_t n);

}  // namespace mlxrt::generate
