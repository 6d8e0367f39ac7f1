// Port of mlx_lm/perplexity.py (eval_ppl, the permutation of load_data) and of
// mlx/nn/losses.py cross_entropy @ mlx 0.32.4.
#include "mlxrt/generate/perplexity.h"

#include <cmath>
#include <numeric>
#include <random>

#include <mlx/device.h>
#include <mlx/fast.h>
#include <mlx/ops.h>
#include <mlx/transforms.h>

#include "mlxrt/util/errors.h"

namespace mlxrt::generate {

mx::array cross_entropy(const mx::array& logits, const mx::array& targets) {
  if (targets.ndim() + 1 != logits.ndim())
    throw UsageError("[cross_entropy] expected class-index targets with one axis fewer than the logits");
  const bool use_fast = mx::default_device() == mx::Device::gpu && mx::issubdtype(logits.dtype(), mx::floating) &&
                        mx::issubdtype(targets.dtype(), mx::integer);
  if (use_fast) return mx::astype(mx::fast::cross_entropy(logits, targets), logits.dtype());
  auto shifted = mx::subtract(logits, mx::stop_gradient(mx::max(logits, -1, true)));
  auto score = mx::squeeze(mx::take_along_axis(shifted, mx::expand_dims(targets, -1), -1), -1);
  auto logsumexp_logits = mx::logsumexp(shifted, -1);
  return mx::subtract(logsumexp_logits, score);
}

PerplexityResult eval_ppl(model::CausalLM& model, const mx::array& data, int batch_size,
                          const std::function<void(int, int)>& on_batch) {
  if (data.ndim() != 2 || data.shape(1) < 2)
    throw UsageError("[eval_ppl] expected [rows, L] tokens with L >= 2");
  if (batch_size < 1) throw UsageError("--batch-size: must be positive");
  // The embedding gather does not check its indices (model::check_token_ids says why).
  const int lowest = mx::min(data).item<int32_t>(), highest = mx::max(data).item<int32_t>();
  if (lowest < 0 || highest >= model.vocab_size())
    throw UsageError("token id " + std::to_string(lowest < 0 ? lowest : highest) +
                     " is outside the model's embedding table of " + std::to_string(model.vocab_size()) +
                     " rows (does the tokenizer have ids the model lacks?)");
  const int rows = data.shape(0), length = data.shape(1);
  const int num_batches = (rows + batch_size - 1) / batch_size;
  std::vector<mx::array> all_losses;
  for (int i = 0, s = 0; s < rows; ++i, s += batch_size) {
    const int end = std::min(rows, s + batch_size);
    auto batch = mx::slice(data, {s, 0}, {end, length});                                   // [b, L]
    auto inputs = mx::slice(batch, {0, 0}, {end - s, length - 1});                          // [b, L-1]
    auto targets = mx::slice(batch, {0, 1}, {end - s, length});                             // [b, L-1]
    auto logits = mx::astype(model(inputs, nullptr), mx::float32);                          // [b, L-1, V]
    auto losses = cross_entropy(logits, targets);                                           // [b, L-1]
    mx::eval(losses);
    all_losses.push_back(mx::flatten(losses));
    if (on_batch) on_batch(i + 1, num_batches);
  }
  auto losses = mx::concatenate(all_losses);
  // .item() turns each float32 into a Python float: the rest is double arithmetic.
  const double mean_loss = mx::mean(losses).item<float>();
  const double ppl = std::exp(mean_loss);
  const double std_dev = mx::sqrt(mx::var(losses, false, 1)).item<float>();
  const double standard_error = std_dev / std::sqrt(static_cast<double>(losses.size()));
  return {ppl, ppl * standard_error, losses};
}

std::vector<int64_t> numpy_permutation(uint32_t seed, int64_t n) {
  std::mt19937 gen(seed);  // numpy's mt19937_seed is the reference init_genrand
  std::vector<int64_t> out(static_cast<size_t>(std::max<int64_t>(n, 0)));
  std::iota(out.begin(), out.end(), 0);
  for (int64_t i = n - 1; i >= 1; --i) {
    // random_interval(max = i): the smallest all-ones mask covering i, draws above i rejected.
    uint64_t max = static_cast<uint64_t>(i), mask = max;
    for (int shift : {1, 2, 4, 8, 16, 32}) mask |= mask >> shift;
    uint64_t j;
    if (max <= 0xffffffffULL) {
      do j = gen() & mask;
      while (j > max);
    } else {
      do j = ((static_cast<uint64_t>(gen()) << 32) | gen()) & mask;
      while (j > max);
    }
    std::swap(out[static_cast<size_t>(i)], out[static_cast<size_t>(j)]);
  }
  return out;
}

}  // namespace mlxrt::generate
