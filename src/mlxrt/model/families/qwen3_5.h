#pragma once
/** What qwen3_5_moe.cpp shares with qwen3_5.cpp (qwen3_5_moe.py subclasses qwen3_5.py's Model). */
#include <functional>
#include <memory>

#include "mlxrt/io/model_config.h"
#include "mlxrt/model/causal_lm.h"
#include "mlxrt/model/families/qwen3_next.h"
#include "mlxrt/model/nn/weight_binder.h"

namespace mlxrt::model::qwen3_5 {

/** ModelArgs.from_dict + TextModelArgs: the text model's arguments, from text_config when present. */
qwen3_next::Args model_args(const io::ModelConfig& config);

/** Model.sanitize + TextModel.sanitize on the checkpoint's tensors. */
void sanitize(WeightBinder& w);

/** Sanitizes (then runs `after_sanitize`, a subclass's own rewrite) and builds the text model with
 * `args` (language_model. prefix). */
std::unique_ptr<CausalLM> build_with(const io::ModelConfig& config, WeightBinder& weights, qwen3_next::Args args,
                                     const std::function<void(WeightBinder&)>& after_sanitize = {});

}  // namespace mlxrt::model::qwen3_5

namespace mlxrt::model::qwen3_5_moe {

/** qwen3_5_moe.py's Model: qwen3_5's, whose sanitize also splits Hugging Face's fused
 * experts.gate_up_proj into the SwitchGLU's gate and up projections. */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);

}  // namespace mlxrt::model::qwen3_5_moe
