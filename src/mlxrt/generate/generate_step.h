#pragma once
/** mlx-lm's generate_step (mlx_lm/generate.py): chunked prefill keeping the last prompt token,
 * then one model step per token, each step dispatched (async_eval) before the previous token is
 * read, so the device never waits for the host. */
#include <functional>
#include <optional>
#include <vector>

#include <mlx/array.h>

#include "mlxrt/model/causal_lm.h"

namespace mlxrt::generate {

namespace mx = mlx::core;

/** logprobs [1, vocab] -> token [1]. */
using Sampler = std::function<mx::array(const mx::array& logprobs)>;
/** (tokens so far [n], logits [1, vocab]) -> logits. */
using LogitsProcessor = std::function<mx::array(const mx::array& tokens, const mx::array& logits)>;

/** argmax over the vocabulary (mlx-lm's greedy sampler). */
mx::array greedy_sample(const mx::array& logprobs);

/** Where a decode step's wall time goes, summed over the steps after the first token (`mlxrt
 * benchmark --step-timing`). With MLX's stream pipelining (the next step dispatched before this
 * token is read) build + dispatch close to the whole step means the host, not the device, sets
 * the pace: a faster kernel then changes nothing until the step has fewer nodes. */
struct StepTiming {
  double build_s = 0;     // the lazy graph of one step (the model's forward, sampling)
  double dispatch_s = 0;  // mx::async_eval of it: MLX encodes every node's kernels here
  double wait_s = 0;      // reading the token: the device still working on the step before
  int steps = 0;
};

struct GenerateOptions {
  int max_tokens = 256;              // -1: no limit
  int prefill_step_size = 2048;
  Sampler sampler;                   // empty: greedy
  std::vector<LogitsProcessor> logits_processors;
  /** --max-kv-size: the fresh cache is make_prompt_cache(model, max_kv_size). */
  std::optional<int> max_kv_size;
  /** --kv-bits / --kv-group-size / --quantized-kv-start: maybe_quantize_kv_cache after every
   * prefill chunk and every step, as mlx-lm's generate_step does. */
  std::optional<int> kv_bits;
  int kv_group_size = 64;
  int quantized_kv_start = 5000;
  /** Called with (processed, total) prompt tokens as prefill advances. */
  std::function<void(int, int)> prompt_progress;
  /** When set, next() adds each decode step's host and wait times to it. */
  StepTiming* step_timing = nullptr;
};

struct GeneratedToken {
  int32_t token;
  mx::array logprobs;  // [vocab], log-softmax of the (processed) logits
  bool from_draft = false;  // speculative decoding: an accepted draft token
};

class TokenGenerator {
 public:
  /** Prefills `prompt` into `cache` (made fresh when null) and dispatches the first step. */
  TokenGenerator(model::CausalLM& model, const std::vector<int32_t>& prompt, GenerateOptions options,
                 model::CacheList* cache = nullptr);
  /** Waits for the step still in flight: the process may exit right after, and MLX's worker
   * thread then still running that step while the allocator is torn down corrupts the heap. */
  ~TokenGenerator();

  /** The next token, or nullopt once max_tokens have been produced. */
  std::optional<GeneratedToken> next();

  /** The cache with every step dispatched so far (the one owed after the first token included). */
  model::CacheList& cache() {
    dispatch_deferred();
    return *cache_;
  }

 private:
  std::pair<mx::array, mx::array> step(const mx::array& input_tokens);
  /** Dispatches the step after the first token once that token has been handed out (next()). */
  void dispatch_deferred();
  /** maybe_quantize_kv_cache with the options' --kv-bits settings. */
  void quantize_cache();

  model::CausalLM& model_;
  GenerateOptions options_;
  model::CacheList own_cache_;
  model::CacheList* cache_;
  std::optional<mx::array> tokens_;  // history for the logits processors
  mx::array y_, logprobs_;
  int n_ = 0;
  int total_prompt_ = 0;
  bool done_ = false;
  bool deferred_ = false;  // the first token was handed out, the step after it not yet dispatched
  // mlx-lm clears MLX's buffer cache every 256 tokens right after yielding the token, so the
  // caller has it first (for the first token this is the prefill's buffers, and freeing them can
  // take as long as a small model's prefill): done at the start of the following call.
  bool clear_cache_pending_ = false;
};

}  // namespace mlxrt::generate
