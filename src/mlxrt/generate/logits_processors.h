#pragma once
/** mlx-lm's logits processors (make_logits_processors in mlx_lm/sample_utils.py @ mlx-lm 0.32.2):
 * logit bias, then repetition, presence and frequency penalties over the last context_size
 * tokens, each applied to the [1, vocab] logits in that order with mlx-lm's ops. */
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlxrt/generate/generate_step.h"
#include "mlxrt/generate/sampler.h"

namespace mlxrt::generate {

/** make_logits_processors's arguments, with its names and defaults. A penalty that is absent or 0
 * adds no processor. */
struct LogitsProcessorParams {
  /** token id -> additive bias, in the order given (mlx-lm keeps dict order). */
  std::vector<std::pair<int32_t, double>> logit_bias;
  std::optional<double> repetition_penalty;
  int repetition_context_size = 20;
  std::optional<double> presence_penalty;
  int presence_context_size = 20;
  std::optional<double> frequency_penalty;
  int frequency_context_size = 20;
};

/** The first bad parameter (argument names as above), or nullopt: a negative repetition penalty
 * (mlx-lm's own check), a context size below 1, a bias id outside [0, vocab_size) when vocab_size
 * is given, a non-finite bias. */
std::optional<ParamProblem> check_logits_processor_params(const LogitsProcessorParams& params,
                                                          std::optional<int> vocab_size = std::nullopt);

/** make_logits_processors(...). UsageError "<param>: <message>" on a bad parameter. */
std::vector<LogitsProcessor> make_logits_processors(const LogitsProcessorParams& params,
                                                    std::optional<int> vocab_size = std::nullopt);

/** The logit bias when it is all make_logits_processors makes of `params` (no penalty wanted), so
 * that a batch can tell rows it may bias with one add; nullopt otherwise. */
std::optional<std::vector<std::pair<int32_t, double>>> logit_bias_only(const LogitsProcessorParams& params);

/** A logit-bias object {"<id>": bias, ...} (JSON text, keys as decimal strings as OpenAI sends them,
 * or integers) -> pairs in document order, keys naming one id ("17", "017") merged as a Python dict
 * merges them (the first place, the last bias). UsageError naming `what` on malformed input. */
std::vector<std::pair<int32_t, double>> parse_logit_bias(const std::string& json_text, const std::string& what);
std::vector<std::pair<int32_t, double>> parse_logit_bias(const nlohmann::ordered_json& object, const std::string& what);

}  // namespace mlxrt::generate
