#pragma once
/** The model families: one file each, mirroring mlx_lm/models/<family>.py. */
#include <memory>

#include "mlxrt/io/model_config.h"
#include "mlxrt/model/causal_lm.h"
#include "mlxrt/model/nn/decoder.h"
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
namespace qwen3_next {
/** qwen3_next: Qwen3-Next's hybrid gated-delta / full-attention decoder (families/qwen3_next.h). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace qwen3_5 {
/** qwen3_5: Qwen3.5's text model (text-only or multimodal config), on qwen3_next's blocks. */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace gemma3_text {
/** gemma3_text, and gemma3 (a multimodal checkpoint's text model, as mlx-lm's gemma3.py runs it). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace qwen3_moe {
/** qwen3_moe: Qwen3-30B-A3B, Qwen3-Coder (sparse layers every decoder_sparse_step, mlp_only_layers dense). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace mixtral {
/** mixtral: Mixtral 8x7B / 8x22B (top-k of the router logits, then a softmax over those). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace qwen2_moe {
/** qwen2_moe: Qwen1.5-MoE / Qwen2-MoE (a shared expert behind a sigmoid gate). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace olmoe {
/** olmoe: OLMoE (q/k norms over the whole projections, routing over flattened tokens). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace gpt_oss {
/** gpt_oss: gpt-oss (attention sinks, alternating sliding/full layers, clamped SwiGLU experts). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace phixtral {
/** phixtral (and phi-msft): Phi-2 experts in a parallel block, SwitchMLP (gelu_approx) experts. */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}

// Dense families on the shared decoder skeleton (nn/decoder.h).
namespace mistral3 {
/** mistral3 (and llava): the text model of text_config under language_model. (ministral3 or llama). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace ministral3 {
/** ministral3: llama's skeleton with rope_parameters and Llama 4's position-dependent query scale. */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
/** The same model's skeleton options from `fields` (a text_config), weights under `model` and
 * `lm_head` (mistral3), after its sanitize. */
nn::DecoderOptions text_options(const JsonFields& fields, WeightBinder& weights, const std::string& model,
                                const std::string& lm_head);
}
namespace smollm3 {
/** smollm3: llama.py's model with NoPE layers (no_rope_layers, no_rope_layer_interval). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace olmo2 {
/** olmo2: OLMo 2 (q/k norms over the whole projections, post-norms). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace olmo3 {
/** olmo3: OLMo 3 (olmo2 with sliding-window layers). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace granite {
/** granite: IBM Granite (embedding, residual, attention and logits multipliers). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace minicpm {
/** minicpm: MiniCPM (scale_emb, scale_depth, dim_model_base). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace exaone4 {
/** exaone4: EXAONE 4.0 (per-head q/k norms, post-norms, "LLLG" sliding pattern, NoPE global layers). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace glm4 {
/** glm4: GLM-4 0414 (sandwich norms, fused gate_up_proj, partial traditional RoPE). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace ernie4_5 {
/** ernie4_5: ERNIE 4.5 dense (use_bias everywhere, traditional RoPE). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace seed_oss {
/** seed_oss: Seed-OSS (separate q/k/v and o_proj biases). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace hunyuan_v1_dense {
/** hunyuan_v1_dense: Hunyuan dense (alpha-scaled NTK RoPE, q/k norms after RoPE). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace internlm3 {
/** internlm3: InternLM 3 (qkv_bias, MLP bias). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace starcoder2 {
/** starcoder2: StarCoder2 (LayerNorms, biases, gelu MLP). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace stablelm {
/** stablelm: StableLM 2 / 3B (LayerNorms, partial RoPE, float32 attention, parallel residual). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace phi {
/** phi: Phi-2 / Phi-1.5 (parallel block, LayerNorms, gelu_approx MLP, float32 queries). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace helium {
/** helium: Kyutai Helium (traditional RoPE, q/k/v biases; lm_head always built). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}
namespace cohere2 {
/** cohere2: Command R7B / Command A (parallel block, sliding layers, NoPE global layers, logit_scale). */
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
namespace lfm2 {
/** lfm2: LFM2 (short gated conv layers over an ArraysCache beside attention layers; families/lfm2.h). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}

namespace gemma3n {
/** gemma3n: Gemma 3n's text model (AltUp, Laurel blocks, per-layer inputs, activation sparsity, KV sharing). */
std::unique_ptr<CausalLM> build(const io::ModelConfig& config, WeightBinder& weights);
}

}  // namespace mlxrt::model
