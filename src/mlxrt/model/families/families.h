#pragma once
/** The model families: one file each, mirroring mlx_lm/models/<family>.py. */
#include <memory>

#include "mlxrt/io/model_config.h"
#include "mlxrt/model/causal_lm.h"
#include "mlxrt/model/nn/weight_binder.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::model {

namespace qwen3 {
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace qwen2 {
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace llama {
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace phi3 {
/** phi3: Phi-3, Phi-3.5 and Phi-4-mini (fused qkv and gate/up projections, SuScaledRoPE). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace gemma3_text {
/** gemma3_text, and gemma3 (a multimodal checkpoint's text model, as mlx-lm's gemma3.py runs it). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}

namespace gemma4_text {
/** gemma4_text, and gemma4 / gemma4_unified (a multimodal checkpoint's text model, as mlx-lm's
 * gemma4.py runs it). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}

namespace gemma2 {
/** gemma2: attention logit softcapping, a final logit softcap, four (1 + weight) norms per block. */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace gemma {
/** gemma: Gemma 1 (exact-gelu MLP, (1 + weight) norms, tied head). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}

}  // namespace mlxrt::model
