#pragma once
/** minicpm3: MiniCPM 3 (minicpm's scalings around multi-head latent attention, SuScaledRoPE). */
#include <memory>

#include "mlxrt/io/model_config.h"
#include "mlxrt/model/causal_lm.h"
#include "mlxrt/model/nn/weight_binder.h"

namespace mlxrt::model::minicpm3 {

std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);

}  // namespace mlxrt::model::minicpm3
