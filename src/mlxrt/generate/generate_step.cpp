// Port of generate_step in mlx_lm/generate.py (mlx-lm 0.32.2).
#include "mlxrt/generate/generate_step.h"

#include <chrono>

#include <mlx/memory.h>
#include <mlx/ops.h>
#include <mlx/transforms.h>

#include "mlxrt/cache/quantized_kv_cache.h"
#include "mlxrt/kernels/cpu/argmax.h"
#include "mlxrt/kernels/cpu/l3_fused.h"
#include "mlxrt/kernels/cpu/logsumexp.h"
#include "mlxrt/model/make_prompt_cache.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::generate {

mx::array greedy_sample(const mx::array& logprobs) { return kernels::cpu::argmax_last_axis(logprobs); }

namespace {

mx::array slice_1d(const mx::array& a, int start, int stop) { return mx::slice(a, {start}, {stop}); }

}  // namespace

TokenGenerator::TokenGenerator(model::CausalLM& model, const std::vector<int32_t>& prompt_ids,
                               GenerateOptions options, model::CacheList* cache)
    : model_(model), options_(std::move(options)), y_(mx::array(0)), logprobs_(mx::array(0.0f)) {
  if (prompt_ids.empty()) throw UsageError("the prompt is empty: at least one token is needed");
  model::check_token_ids(model, prompt_ids);
  if (options_.prefill_step_size <= 0) throw UsageError("--prefill-step-size must be positive");
  if (!options_.sampler) options_.sampler = greedy_sample;
  cache::validate_kv_quantization(options_.kv_bits, options_.kv_group_size, options_.quantized_kv_start);
  if (cache) {
    cache_ = cache;
  } else {
    own_cache_ = model::make_prompt_cache(model_, options_.max_kv_size);
    cache_ = &own_cache_;
  }
  mx::array prompt(prompt_ids.data(), {static_cast<int>(prompt_ids.size())}, mx::int32);
  total_prompt_ = static_cast<int>(prompt_ids.size());
  int processed = 0;
  auto progress = [&](int done) {
    if (options_.prompt_progress) options_.prompt_progress(done, total_prompt_);
  };
  progress(0);
  while (total_prompt_ - processed > 1) {
    int remaining = (total_prompt_ - processed) - 1;
    int n = std::min(options_.prefill_step_size, remaining);
    auto chunk = slice_1d(prompt, 0, n);
    model_(mx::expand_dims(chunk, 0), cache_);
    quantize_cache();
    auto state = cache::state_arrays(*cache_);
    processed += n;
    // mlx-lm waits for every chunk. The last one is only dispatched: the last token's step is
    // then built and encoded while the device still runs the chunk, so its host time (several ms
    // on a large model) leaves the time to first token. Same kernels in the same order; the
    // buffer cache is cleared after the first token instead (clear_cache_pending_).
    const bool last_chunk = total_prompt_ - processed == 1;
    if (last_chunk)
      mx::async_eval(state);
    else
      mx::eval(state);
    if (!options_.logits_processors.empty())
      tokens_ = tokens_ ? mx::concatenate({*tokens_, chunk}) : chunk;
    progress(processed);
    prompt = slice_1d(prompt, n, prompt.shape(0));
    if (!last_chunk) mx::clear_cache();
  }
  std::tie(y_, logprobs_) = step(prompt);
  mx::async_eval({y_, logprobs_});
}

TokenGenerator::~TokenGenerator() {
  try {
    dispatch_deferred();
    mx::synchronize();
  } catch (...) {
    // A failed step has already been reported by whoever evaluated it; nothing is left to wait for.
  }
}

std::pair<mx::array, mx::array> TokenGenerator::step(const mx::array& input_tokens) {
  auto logits = model_(mx::expand_dims(input_tokens, 0), cache_);
  // logits[:, -1, :]
  const int L = logits.shape(1);
  logits = mx::squeeze(mx::slice(logits, {0, L - 1, 0}, {logits.shape(0), L, logits.shape(2)}), 1);
  if (!options_.logits_processors.empty() && input_tokens.size() > 0) {
    tokens_ = tokens_ ? mx::concatenate({*tokens_, input_tokens}) : input_tokens;
    for (const auto& processor : options_.logits_processors) logits = processor(*tokens_, logits);
  }
  quantize_cache();
  // At L3 on the CPU one fused node (MLX's exp is scalar there: ~5% of a small model's step).
  const auto fused = model_.l3_kernels() ? kernels::cpu::log_softmax(model_.l3_kernels(), logits) : std::nullopt;
  // mlx-lm's logsumexp over every axis of [1, V]: MLX's primitive over the last one.
  auto logprobs = fused ? *fused : kernels::cpu::log_probs_last_axis(model_.cpu_kernels(), logits);
  auto sampled = options_.sampler(logprobs);
  return {sampled, mx::squeeze(logprobs, 0)};
}

void TokenGenerator::quantize_cache() {
  cache::maybe_quantize_kv_cache(*cache_, options_.kv_bits, options_.kv_group_size, options_.quantized_kv_start);
}

void TokenGenerator::dispatch_deferred() {
  if (!deferred_) return;
  deferred_ = false;
  std::tie(y_, logprobs_) = step(y_);
  mx::async_eval({y_, logprobs_});
}

std::optional<GeneratedToken> TokenGenerator::next() {
  if (done_) return std::nullopt;
  dispatch_deferred();
  if (clear_cache_pending_) {
    mx::clear_cache();
    clear_cache_pending_ = false;
  }
  using Clock = std::chrono::steady_clock;
  const bool timed = options_.step_timing != nullptr && n_ > 0;
  const auto t0 = Clock::now();
  auto t1 = t0, t2 = t0;
  std::optional<std::pair<mx::array, mx::array>> upcoming;
  // mlx-lm dispatches the step after the first token before reading that token. Here the first
  // token is read first and its step dispatched at the next call (or by cache() or the
  // destructor, so nobody sees the cache without it): the caller gets the first token a step's
  // host dispatch earlier, and the device runs the same steps in the same order.
  const bool first = n_ == 0;
  if (n_ != options_.max_tokens && !first) {
    upcoming = step(y_);
    t1 = Clock::now();
    mx::async_eval({upcoming->first, upcoming->second});
    t2 = Clock::now();
  }
  if (first) {
    mx::eval({y_});
    if (options_.prompt_progress) options_.prompt_progress(total_prompt_, total_prompt_);
  }
  if (n_ == options_.max_tokens) {
    done_ = true;
    return std::nullopt;
  }
  GeneratedToken out{y_.item<int32_t>(), logprobs_};
  if (timed && upcoming) {
    auto& t = *options_.step_timing;
    t.build_s += std::chrono::duration<double>(t1 - t0).count();
    t.dispatch_s += std::chrono::duration<double>(t2 - t1).count();
    t.wait_s += std::chrono::duration<double>(Clock::now() - t2).count();
    ++t.steps;
  }
  clear_cache_pending_ = n_ % 256 == 0;
  ++n_;
  if (first) {
    deferred_ = true;  // y_ stays the token just read until dispatch_deferred
    return out;
  }
  y_ = upcoming->first;
  logprobs_ = upcoming->second;
  return out;
}

}  // namespace mlxrt::generate
