#pragma once
/** mlx-lm's samplers (mlx_lm/sample_utils.py @ mlx-lm 0.32.2), op for op: top_p, min_p, XTC and
 * top_k filters then categorical sampling at a temperature, each a compiled function that takes
 * and returns the PRNG key exactly as mlx-lm's `mx.compile(..., inputs=mx.random.state,
 * outputs=mx.random.state)` does. Greedy (argmax) at temp 0. The same seed gives the same tokens. */
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <mlx/array.h>

#include "mlxrt/generate/generate_step.h"
#include "mlxrt/generate/random_state.h"

namespace mlxrt::generate {

/** make_sampler's arguments, with its names and defaults. Floats are doubles because mlx-lm's
 * are Python floats: derived constants (1 / temp, log(min_p)) are computed in double first. */
struct SamplerParams {
  double temp = 0.0;
  double top_p = 0.0;  // applied when 0 < top_p < 1
  double min_p = 0.0;  // applied when != 0
  int min_tokens_to_keep = 1;
  int top_k = 0;  // applied when > 0
  double xtc_probability = 0.0;  // applied when > 0
  double xtc_threshold = 0.1;
  std::vector<int32_t> xtc_special_tokens;
};

/** A parameter outside its range: `param` is the make_sampler argument name (a front end maps it
 * to its flag or field), `message` says what was expected and what was given. */
struct ParamProblem {
  std::string param;
  std::string message;
};

/** The first out-of-range parameter, or nullopt. Stricter than mlx-lm where mlx-lm silently
 * misbehaves (negative temp, top_p outside [0, 1], negative top_k). */
std::optional<ParamProblem> check_sampler_params(const SamplerParams& params);

/** make_sampler(...). `rng` is required unless temp == 0 (greedy uses no randomness).
 * UsageError "<param>: <message>" on a bad parameter. top_k must also be below the vocabulary size
 * (checked on the first call, as mlx-lm does). */
Sampler make_sampler(const SamplerParams& params, std::shared_ptr<RandomState> rng);

/** The individual compiled steps, for tests and for callers that compose their own chain.
 * Each takes the key through, as mlx-lm's compiled functions do (only XTC and categorical
 * consume a draw). */
mx::array apply_top_p(const mx::array& logprobs, double top_p, RandomState& rng);
mx::array apply_min_p(const mx::array& logprobs, double min_p, int min_tokens_to_keep, RandomState& rng);
mx::array apply_top_k(const mx::array& logprobs, int top_k, RandomState& rng);
mx::array apply_xtc(const mx::array& logits, double xtc_probability, double xtc_threshold,
                    const std::vector<int32_t>& xtc_special_tokens, RandomState& rng);
mx::array categorical_sampling(const mx::array& logits, double temp, RandomState& rng);

/** The server's top_logprobs: the top `n` ids of a [vocab] logprobs vector in mlx-lm's order
 * (argpartition of -logprobs, first n), with their logprobs. */
struct TopLogprob {
  int32_t id;
  float logprob;
};
std::vector<TopLogprob> top_logprobs(const mx::array& logprobs, int n);

/** logprobs[token] as float32 (the server's per-token logprob). An evaluated row is read where it
 * lies, with no new node: a node would queue behind the step the generator has already dispatched
 * and wait for it. The same value either way (widening to float32 is exact). */
float token_logprob(const mx::array& logprobs, int32_t token);

}  // namespace mlxrt::generate
