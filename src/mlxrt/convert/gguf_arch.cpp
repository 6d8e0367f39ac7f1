#include "mlxrt/convert/gguf_arch.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "mlxrt/convert/gguf_gemma3n.h"
#include "mlxrt/convert/gguf_gemma4.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::convert {

namespace {

// llama.cpp's names for the tensors of a llama-like decoder.
const std::vector<TensorRename> kDecoderGlobals = {
    {"token_embd", "model.embed_tokens"},
    {"output_norm", "model.norm"},
    {"output", "lm_head"},
};
const std::vector<TensorRename> kDecoderLayer = {
    {"attn_norm", "input_layernorm"},         {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},           {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},      {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},            {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},            {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
};

// Phi-3: fused q/k/v and gate/up projections (llama.cpp keeps them fused too).
const std::vector<TensorRename> kPhi3Layer = {
    {"attn_norm", "input_layernorm"},    {"attn_qkv", "self_attn.qkv_proj"}, {"attn_output", "self_attn.o_proj"},
    {"ffn_norm", "post_attention_layernorm"}, {"ffn_up", "mlp.gate_up_proj"}, {"ffn_down", "mlp.down_proj"},
};

// Gemma 2 and 3: norms around both sublayers (Gemma 3's also on the queries and keys of each head).
const std::vector<TensorRename> kGemma3Layer = {
    {"attn_norm", "input_layernorm"},          {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},            {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},       {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},       {"post_attention_norm", "post_attention_layernorm"},
    {"ffn_norm", "pre_feedforward_layernorm"}, {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},                 {"ffn_down", "mlp.down_proj"},
    {"post_ffw_norm", "post_feedforward_layernorm"},
};

// Gemma 4: Gemma 3's layer (its norms stored as they are, without Gemma 3's plus one) with the
// per-layer input gate and projection and the layer's output scale; global per-layer token
// embeddings with their projection.
const std::vector<TensorRename> kGemma4Globals = {
    {"token_embd", "model.embed_tokens"},
    {"output_norm", "model.norm"},
    {"output", "lm_head"},
    {"per_layer_token_embd", "model.embed_tokens_per_layer"},
    {"per_layer_model_proj", "model.per_layer_model_projection"},
    {"per_layer_proj_norm", "model.per_layer_projection_norm"},
};
// 26B-A4B's experts beside the dense MLP: llama.cpp keeps HF's fused gate_up_proj of the experts
// (split into mlx-lm's switch_glu gate and up after conversion, gguf_gemma4_experts.h); the
// router's scales are plan_tensor's ".scale" tensors.
std::vector<TensorRename> gemma4_layer() {
  auto layer = kGemma3Layer;
  layer.insert(layer.end(), {{"inp_gate", "per_layer_input_gate"}, {"proj", "per_layer_projection"},
                             {"post_norm", "post_per_layer_input_norm"}, {"layer_output_scale", "layer_scalar"},
                             {"ffn_gate_inp", "router.proj"}, {"ffn_gate_up_exps", "experts.gate_up_proj"},
                             {"ffn_gate_exps", "experts.switch_glu.gate_proj"},
                             {"ffn_up_exps", "experts.switch_glu.up_proj"},
                             {"ffn_down_exps", "experts.switch_glu.down_proj"},
                             {"pre_ffw_norm_2", "pre_feedforward_layernorm_2"},
                             {"post_ffw_norm_1", "post_feedforward_layernorm_1"},
                             {"post_ffw_norm_2", "post_feedforward_layernorm_2"}});
  return layer;
}

// OLMo 2 and EXAONE 4: norms after each sublayer only (OLMo 2's q/k norms span all heads,
// EXAONE 4's one head).
const std::vector<TensorRename> kPostNormLayer = {
    {"attn_q", "self_attn.q_proj"},           {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},           {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"},      {"attn_k_norm", "self_attn.k_norm"},
    {"post_attention_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},            {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},            {"post_ffw_norm", "post_feedforward_layernorm"},
};

// StarCoder 2: LayerNorms and a plain (non-gated) MLP, all with biases.
const std::vector<TensorRename> kStarcoder2Layer = {
    {"attn_norm", "input_layernorm"},    {"attn_q", "self_attn.q_proj"},         {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},      {"attn_output", "self_attn.o_proj"},    {"ffn_norm", "post_attention_layernorm"},
    {"ffn_up", "mlp.c_fc"},              {"ffn_down", "mlp.c_proj"},
};

// LFM2: short-convolution layers and attention layers, one MLP each (w1 gate, w3 up, w2 down);
// its final norm is mlx-lm's embedding_norm, llama.cpp's token_embd_norm; the head is always tied.
const std::vector<TensorRename> kLfm2Globals = {
    {"token_embd", "model.embed_tokens"},
    {"token_embd_norm", "model.embedding_norm"},
};
const std::vector<TensorRename> kLfm2Layer = {
    {"attn_norm", "operator_norm"},          {"ffn_norm", "ffn_norm"},
    {"attn_q", "self_attn.q_proj"},          {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},          {"attn_output", "self_attn.out_proj"},
    {"attn_q_norm", "self_attn.q_layernorm"}, {"attn_k_norm", "self_attn.k_layernorm"},
    {"shortconv.conv", "conv.conv"},         {"shortconv.in_proj", "conv.in_proj"},
    {"shortconv.out_proj", "conv.out_proj"}, {"ffn_gate", "feed_forward.w1"},
    {"ffn_up", "feed_forward.w3"},           {"ffn_down", "feed_forward.w2"},
};

// Phi-2: mlx-lm's phi names (dense, fc1/fc2, final_layernorm); older conversions fuse q/k/v into
// attn_qkv, split back by rows (plan_tensor).
const std::vector<TensorRename> kPhi2Globals = {
    {"token_embd", "model.embed_tokens"},
    {"output_norm", "model.final_layernorm"},
    {"output", "lm_head"},
};
const std::vector<TensorRename> kPhi2Layer = {
    {"attn_norm", "input_layernorm"},   {"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},     {"attn_qkv", "self_attn.qkv"},  {"attn_output", "self_attn.dense"},
    {"ffn_up", "mlp.fc1"},              {"ffn_down", "mlp.fc2"},
};

// Hunyuan dense: per-head q/k norms under mlx-lm's query_layernorm / key_layernorm.
std::vector<TensorRename> hunyuan_layer() {
  auto layer = kDecoderLayer;
  for (auto& r : layer) {
    if (std::string(r.gguf) == "attn_q_norm") r.hf = "self_attn.query_layernorm";
    if (std::string(r.gguf) == "attn_k_norm") r.hf = "self_attn.key_layernorm";
  }
  return layer;
}

// MiniCPM 3: multi-head latent attention (low-rank q and compressed kv, each normed), llama's MLP.
std::vector<TensorRename> minicpm3_layer() {
  auto layer = kDecoderLayer;
  layer.insert(layer.end(), {{"attn_q_a", "self_attn.q_a_proj"},          {"attn_q_a_norm", "self_attn.q_a_layernorm"},
                             {"attn_q_b", "self_attn.q_b_proj"},          {"attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa"},
                             {"attn_kv_a_norm", "self_attn.kv_a_layernorm"}, {"attn_kv_b", "self_attn.kv_b_proj"}});
  return layer;
}

// Seed-OSS: llama.cpp names its pre-MLP norm attn_post_norm (the arch has no ffn_norm).
std::vector<TensorRename> seed_oss_layer() {
  auto layer = kDecoderLayer;
  layer.push_back({"post_attention_norm", "post_attention_layernorm"});
  return layer;
}

// StableLM 2 (12B): llama.cpp stacks the per-head q/k LayerNorms into one [heads, head_dim]
// tensor; mlx-lm keeps one norm per head.
std::vector<TensorRename> stablelm_layer() {
  auto layer = kDecoderLayer;
  for (auto& r : layer) {
    if (std::string(r.gguf) == "attn_q_norm") r.hf = "self_attn.q_layernorm.norms.#";
    if (std::string(r.gguf) == "attn_k_norm") r.hf = "self_attn.k_layernorm.norms.#";
  }
  return layer;
}

// GLM-4: norms before and after both sublayers, gate and up fused in ffn_up as in Phi-3.
const std::vector<TensorRename> kGlm4Layer = {
    {"attn_norm", "input_layernorm"},     {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},       {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},  {"post_attention_norm", "post_self_attn_layernorm"},
    {"ffn_norm", "post_attention_layernorm"}, {"ffn_up", "mlp.gate_up_proj"},
    {"ffn_down", "mlp.down_proj"},        {"post_ffw_norm", "post_mlp_layernorm"},
};

// gpt-oss: attention with biases and per-head sinks, a biased router, experts (gate and up apart,
// as llama.cpp splits HF's interleaved gate_up_proj) under mlx-lm's `experts` switch layers.
const std::vector<TensorRename> kGptOssLayer = {
    {"attn_norm", "input_layernorm"},         {"post_attention_norm", "post_attention_layernorm"},
    {"attn_q", "self_attn.q_proj"},           {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},           {"attn_output", "self_attn.o_proj"},
    {"attn_sinks", "self_attn.sinks"},        {"ffn_gate_inp", "mlp.router"},
    {"ffn_gate_exps", "mlp.experts.gate_proj"}, {"ffn_up_exps", "mlp.experts.up_proj"},
    {"ffn_down_exps", "mlp.experts.down_proj"},
};

// Mixture-of-experts layers: llama.cpp's router and experts stacked [experts, out, in], named as
// mlx-lm's switch layers hold them under `moe` (a layer without a router keeps the dense MLP).
std::vector<TensorRename> moe_layer(const char* router, const char* gate, const char* up, const char* down) {
  auto layer = kDecoderLayer;
  layer.insert(layer.end(), {{"ffn_gate_inp", router}, {"ffn_gate_exps", gate}, {"ffn_up_exps", up}, {"ffn_down_exps", down}});
  return layer;
}

// Qwen2-MoE adds a shared expert behind a sigmoid gate.
std::vector<TensorRename> qwen2_moe_layer() {
  auto layer = moe_layer("mlp.gate", "mlp.switch_mlp.gate_proj", "mlp.switch_mlp.up_proj", "mlp.switch_mlp.down_proj");
  layer.insert(layer.end(), {{"ffn_gate_inp_shexp", "mlp.shared_expert_gate"},
                             {"ffn_gate_shexp", "mlp.shared_expert.gate_proj"},
                             {"ffn_up_shexp", "mlp.shared_expert.up_proj"},
                             {"ffn_down_shexp", "mlp.shared_expert.down_proj"}});
  return layer;
}

// Qwen3-Next and Qwen3.5: gated delta net layers (llama.cpp's ssm_* and attn_qkv / attn_gate)
// beside gated full-attention layers, an MLP or experts behind a shared expert, norms after
// attention as post_attention_norm. The names are mlx-lm's; llama.cpp's transforms of the linear
// attention tensors are undone after conversion (gguf_gated_delta.h), where attn_qkv and attn_gate
// of Qwen3-Next go back into one in_proj_qkvz.
std::vector<TensorRename> gated_delta_layer(bool qwen35) {
  auto layer = qwen2_moe_layer();
  for (auto& r : layer)
    if (std::string(r.gguf) == "ffn_norm") r.gguf = "post_attention_norm";
  layer.insert(layer.end(), {{"ssm_conv1d", "linear_attn.conv1d"}, {"ssm_dt", "linear_attn.dt_bias"},
                             {"ssm_a", "linear_attn.A_log"},      {"ssm_norm", "linear_attn.norm"},
                             {"ssm_out", "linear_attn.out_proj"}, {"attn_qkv", "linear_attn.in_proj_qkv"},
                             {"attn_gate", "linear_attn.in_proj_z"}});
  if (qwen35)
    layer.insert(layer.end(), {{"ssm_alpha", "linear_attn.in_proj_a"}, {"ssm_beta", "linear_attn.in_proj_b"}});
  else
    layer.push_back({"ssm_ba", "linear_attn.in_proj_ba"});
  return layer;
}

// llama.cpp writes Mixtral as architecture "llama" with experts.
const GgufArchitecture& mixtral() {
  static const GgufArchitecture arch{"llama", "mixtral", "MixtralForCausalLM", true, kDecoderGlobals,
                                     moe_layer("block_sparse_moe.gate", "block_sparse_moe.switch_mlp.gate_proj",
                                               "block_sparse_moe.switch_mlp.up_proj",
                                               "block_sparse_moe.switch_mlp.down_proj")};
  return arch;
}

// A "mistral3" GGUF without Llama 4's temperature scale is Mistral Small 3.1's text model, whose
// text_config says "mistral": mlx-lm's mistral3 runs it with its llama model.
const GgufArchitecture& mistral3_llama() {
  static const GgufArchitecture arch{"mistral3", "llama", "LlamaForCausalLM", true, kDecoderGlobals, kDecoderLayer};
  return arch;
}

// llama.cpp writes OLMo 3 as architecture "olmo2" with sliding windows (the tensors are OLMo 2's).
const GgufArchitecture& olmo3() {
  static const GgufArchitecture arch{"olmo2", "olmo3", "Olmo3ForCausalLM", false, kDecoderGlobals, kPostNormLayer};
  return arch;
}

const std::vector<GgufArchitecture>& architectures() {
  static const std::vector<GgufArchitecture> table = {
      // Also InternLM 3, which llama.cpp's InternLM3Model writes as llama (Q/K rows permuted as
      // LlamaModel does): mlx-lm's internlm3 computes as its llama does (head size hidden / heads,
      // qkv_bias on q/k/v/o as attention_bias, bias on the MLP as mlp_bias), and the dynamic NTK
      // RoPE scaling, which changes nothing within max_position_embeddings, is not in the file.
      {"llama", "llama", "LlamaForCausalLM", true, kDecoderGlobals, kDecoderLayer},
      {"qwen2", "qwen2", "Qwen2ForCausalLM", false, kDecoderGlobals, kDecoderLayer},
      {"qwen3", "qwen3", "Qwen3ForCausalLM", false, kDecoderGlobals, kDecoderLayer},
      {"gemma", "gemma", "GemmaForCausalLM", false, kDecoderGlobals, kDecoderLayer},
      {"gemma2", "gemma2", "Gemma2ForCausalLM", false, kDecoderGlobals, kGemma3Layer},
      {"gemma3", "gemma3_text", "Gemma3ForCausalLM", false, kDecoderGlobals, kGemma3Layer},
      // Gemma 4's text model (gguf_gemma4.h gathers its per-layer-type config back).
      {"gemma4", "gemma4_text", "Gemma4ForCausalLM", false, kGemma4Globals, gemma4_layer()},
      // Gemma 3n's text model: its tensors are planned, and its config gathered, by gguf_gemma3n.h.
      {"gemma3n", "gemma3n", "Gemma3nForConditionalGeneration", false, {}, {}},
      {"phi3", "phi3", "Phi3ForCausalLM", false, kDecoderGlobals, kPhi3Layer},
      {"qwen2moe", "qwen2_moe", "Qwen2MoeForCausalLM", false, kDecoderGlobals, qwen2_moe_layer()},
      {"qwen3moe", "qwen3_moe", "Qwen3MoeForCausalLM", false, kDecoderGlobals,
       moe_layer("mlp.gate", "mlp.switch_mlp.gate_proj", "mlp.switch_mlp.up_proj", "mlp.switch_mlp.down_proj")},
      // llama.cpp runs these with interleaved RoPE; its converter permuted the Q/K rows of the
      // ones whose HF RoPE rotates halves (granite, smollm3: LlamaModel subclasses), not of those
      // that are interleaved already (glm4, cohere2, ernie4_5) or that it runs with NeoX RoPE (the others).
      {"granite", "granite", "GraniteForCausalLM", true, kDecoderGlobals, kDecoderLayer},
      {"smollm3", "smollm3", "SmolLM3ForCausalLM", true, kDecoderGlobals, kDecoderLayer},
      {"olmo2", "olmo2", "Olmo2ForCausalLM", false, kDecoderGlobals, kPostNormLayer},
      {"exaone4", "exaone4", "Exaone4ForCausalLM", false, kDecoderGlobals, kPostNormLayer},
      {"starcoder2", "starcoder2", "Starcoder2ForCausalLM", false, kDecoderGlobals, kStarcoder2Layer},
      {"stablelm", "stablelm", "StableLmForCausalLM", false, kDecoderGlobals, stablelm_layer()},
      {"glm4", "glm4", "Glm4ForCausalLM", false, kDecoderGlobals, kGlm4Layer},
      {"cohere2", "cohere2", "Cohere2ForCausalLM", false, kDecoderGlobals, kDecoderLayer},
      {"gpt-oss", "gpt_oss", "GptOssForCausalLM", false, kDecoderGlobals, kGptOssLayer},
      {"olmoe", "olmoe", "OlmoeForCausalLM", false, kDecoderGlobals,
       moe_layer("mlp.gate", "mlp.switch_mlp.gate_proj", "mlp.switch_mlp.up_proj", "mlp.switch_mlp.down_proj")},
      {"ernie4_5", "ernie4_5", "Ernie4_5_ForCausalLM", false, kDecoderGlobals, kDecoderLayer},
      {"seed_oss", "seed_oss", "SeedOssForCausalLM", false, kDecoderGlobals, seed_oss_layer()},
      {"lfm2", "lfm2", "Lfm2ForCausalLM", false, kLfm2Globals, kLfm2Layer},
      {"phi2", "phi", "PhiForCausalLM", false, kPhi2Globals, kPhi2Layer},
      {"hunyuan-dense", "hunyuan_v1_dense", "HunYuanDenseV1ForCausalLM", false, kDecoderGlobals, hunyuan_layer()},
      // MiniCPM 3: llama.cpp's MiniCPM3Model renames only (its _reverse_hf_permute is never called).
      {"minicpm3", "minicpm3", "MiniCPM3ForCausalLM", false, kDecoderGlobals, minicpm3_layer()},
      // MiniCPM: llama.cpp's MiniCPMModel permutes the Q/K rows as LlamaModel does.
      {"minicpm", "minicpm", "MiniCPMForCausalLM", true, kDecoderGlobals, kDecoderLayer},
      // Mistral 3 / Ministral 3's text model: llama.cpp's Ministral3Model is a LlamaModel (Q/K rows
      // permuted) that adds YaRN's mscale_all_dim and Llama 4's query temperature scale.
      {"mistral3", "ministral3", "Ministral3ForCausalLM", true, kDecoderGlobals, kDecoderLayer},
      {"qwen3next", "qwen3_next", "Qwen3NextForCausalLM", false, kDecoderGlobals, gated_delta_layer(false)},
      // Qwen3.5's text model, named as mlx_lm.convert writes the multimodal checkpoints (mlx-lm's
      // qwen3_5 keeps it under language_model).
      {"qwen35", "qwen3_5", "Qwen3_5ForConditionalGeneration", false, kDecoderGlobals, gated_delta_layer(true),
       "language_model."},
      {"qwen35moe", "qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration", false, kDecoderGlobals,
       gated_delta_layer(true), "language_model."},
  };
  return table;
}

// Tensors llama.cpp writes that a HF checkpoint has no counterpart for and that our target
// computes itself (the RoPE inverse frequencies of models without scaling).
const char* const kDerivedTensors[] = {"rope_freqs", "attn_rot_embd"};

std::string arch_key(const GgufArchitecture& arch, const std::string& key) {
  return std::string(arch.gguf_name) + "." + key;
}

/** Phi-2's fused attn_qkv split into q, k and v rows (head size embedding_length / head_count). */
std::vector<std::pair<std::string, uint64_t>> qkv_parts(const GgufArchitecture& arch, const GgufFile& file,
                                                        const GgufTensorInfo& tensor, const std::string& layer,
                                                        const std::string& suffix) {
  const uint64_t heads = file.require_uint(arch_key(arch, "attention.head_count"));
  const uint64_t kv_heads = file.get_uint(arch_key(arch, "attention.head_count_kv")).value_or(heads);
  const uint64_t hidden = file.require_uint(arch_key(arch, "embedding_length"));
  const uint64_t head_dim = heads == 0 ? 0 : hidden / heads;
  const uint64_t rows = tensor.dims.size() == 1 ? tensor.dims[0] : tensor.dims.size() == 2 ? tensor.dims[1] : 0;
  if (head_dim == 0 || rows != (heads + 2 * kv_heads) * head_dim || (suffix == ".weight") != (tensor.dims.size() == 2))
    throw WeightsError(file.source + ": tensor '" + tensor.name + "' must hold the " +
                       std::to_string((heads + 2 * kv_heads) * head_dim) + " query, key and value rows (" +
                       std::to_string(heads) + " + 2 x " + std::to_string(kv_heads) + " heads of " +
                       std::to_string(head_dim) + ")");
  const std::string at = "model.layers." + layer + ".self_attn.";
  return {{at + "q_proj" + suffix, heads * head_dim}, {at + "k_proj" + suffix, kv_heads * head_dim},
          {at + "v_proj" + suffix, kv_heads * head_dim}};
}

bool is_plain_type(GgmlType t) { return t == GgmlType::f32 || t == GgmlType::f16 || t == GgmlType::bf16; }

/** A stacked per-head vector: a plain [heads, head_dim] tensor, one row per query or key head. */
void check_per_head_rows(const GgufArchitecture& arch, const GgufFile& file, const GgufTensorInfo& tensor, bool queries) {
  auto heads = queries ? std::nullopt : file.get_uint(arch_key(arch, "attention.head_count_kv"));
  if (!heads) heads = file.require_uint(arch_key(arch, "attention.head_count"));
  if (tensor.dims.size() != 2 || tensor.dims[1] != *heads || !is_plain_type(tensor.type()))
    throw WeightsError(file.source + ": tensor '" + tensor.name + "' must be a 2-D F32/F16/BF16 tensor of one row per " +
                       (queries ? "query" : "key") + " head (" + std::to_string(*heads) + " rows)");
}

}  // namespace

bool is_gated_delta(const GgufArchitecture& arch) {
  const std::string type = arch.model_type;
  return type == "qwen3_next" || type == "qwen3_5" || type == "qwen3_5_moe";
}

std::string supported_gguf_architectures() {
  std::string supported;
  for (const auto& a : architectures()) supported += (supported.empty() ? "" : ", ") + std::string(a.gguf_name);
  return supported;
}

const GgufArchitecture& find_architecture(const GgufFile& file) {
  auto name = file.get_string("general.architecture");
  if (!name) throw ConfigError(file.source + ": missing required metadata 'general.architecture'");
  if (*name == "llama" && file.get_uint("llama.expert_count").value_or(0) > 0) return mixtral();
  if (*name == "olmo2" && file.get_uint("olmo2.attention.sliding_window")) return olmo3();
  if (*name == "mistral3" && !file.get_float("mistral3.attention.temperature_scale")) return mistral3_llama();
  for (const auto& a : architectures())
    if (*name == a.gguf_name) return a;
  throw UnsupportedError(file.source + ": GGUF architecture '" + *name +
                         "' is not supported by the converter (supported: " + supported_gguf_architectures() + ")");
}

std::optional<TensorPlan> plan_tensor(const GgufArchitecture& arch, const GgufFile& file,
                                      const GgufTensorInfo& tensor) {
  auto dot = tensor.name.rfind('.');
  std::string base = dot == std::string::npos ? tensor.name : tensor.name.substr(0, dot);
  std::string suffix = dot == std::string::npos ? "" : tensor.name.substr(dot);
  // llama.cpp names the gated delta nets' A (its -exp(A_log)) without a suffix.
  const bool gated_delta = is_gated_delta(arch);
  if (gated_delta && suffix == ".ssm_a") base = tensor.name, suffix = "";
  // Gemma 4's router scales are ".scale" tensors (planned below).
  const bool gemma4_scale = std::string(arch.model_type) == "gemma4_text" && suffix == ".scale";
  if (suffix != ".weight" && suffix != ".bias" && !gemma4_scale && !(gated_delta && base.ends_with(".ssm_a")))
    throw UnsupportedError(file.source + ": tensor '" + tensor.name + "' is not a .weight or .bias");
  const std::string family = arch.model_type;
  if (family == "gemma3n") return plan_gemma3n_tensor(file, tensor);
  // Gemma 4's rope_freqs says which dimensions of the full layers rotate (config.json's
  // rope_parameters); the KV-shared layers' key and value tensors are dropped, as mlx-lm's sanitize does.
  if (family == "gemma4_text") {
    if (base == "rope_freqs") return std::nullopt;
    const std::string layer = base.rfind("blk.", 0) == 0 ? base.substr(4, base.find('.', 4) - 4) : "";
    const bool numeric = !layer.empty() && layer.size() < 10 && layer.find_first_not_of("0123456789") == std::string::npos;
    const std::string rest = numeric ? base.substr(5 + layer.size()) : "";
    // The router's per-dimension and per-expert scales, which llama.cpp names after the tensors
    // they scale ("router.scale" and "router.per_expert_scale" in the checkpoint).
    if (suffix == ".scale" && (rest == "ffn_gate_inp" || rest == "ffn_down_exps")) {
      if (tensor.dims.size() != 1 || !is_plain_type(tensor.type()))
        throw WeightsError(file.source + ": tensor '" + tensor.name + "' must be a 1-D F32/F16/BF16 vector");
      TensorPlan plan{"model.layers." + layer + (rest == "ffn_gate_inp" ? ".router.scale" : ".router.per_expert_scale"),
                      std::nullopt};
      plan.narrow = tensor.type() == GgmlType::f32;
      return plan;
    }
    if (suffix == ".scale")
      throw UnsupportedError(file.source + ": tensor '" + tensor.name + "' is not known for architecture 'gemma4'");
    if ((rest == "attn_k" || rest == "attn_v" || rest == "attn_k_norm") && std::stoull(layer) >= gemma4_first_shared_layer(file))
      return std::nullopt;
  }
  // Phi-3's LongRoPE factors go into config.json's rope_scaling (build_model_config).
  if ((std::string(arch.model_type) == "phi3" || std::string(arch.model_type) == "minicpm3") && (base == "rope_factors_long" || base == "rope_factors_short"))
    return std::nullopt;
  for (const char* derived : kDerivedTensors)
    if (base == derived || (base.rfind("blk.", 0) == 0 && base.ends_with(std::string(".") + derived))) {
      if (base == "rope_freqs")
        throw UnsupportedError(file.source + ": tensor 'rope_freqs.weight' (Llama-3 style RoPE "
                               "frequency scaling) is not supported by the converter");
      return std::nullopt;
    }
  // Gemma's RMSNorm scales by (1 + weight); llama.cpp stores the norms with the one added.
  const bool gemma_norm = (family == "gemma" || family == "gemma2" || family == "gemma3_text") && suffix == ".weight" &&
                          base.size() >= 4 && base.compare(base.size() - 4, 4, "norm") == 0;
  // The gated delta families' and MiniCPM's float32 tensors that came from the model's 16-bit type (A is
  // float32 in the checkpoint too: mlx-lm's cast_predicate leaves A_log as it is).
  const bool narrow = (gated_delta || family == "minicpm" || family == "minicpm3" || family == "gemma4_text" ||
                      std::string(arch.gguf_name) == "mistral3") &&
                     tensor.type() == GgmlType::f32 && !base.ends_with(".ssm_a");
  for (const auto& r : arch.global_tensors)
    if (base == r.gguf) {
      TensorPlan plan{arch.prefix + std::string(r.hf) + suffix, std::nullopt};
      plan.minus_one = gemma_norm;
      plan.narrow = narrow;
      plan.narrow_rounds = narrow && base == "output_norm";
      return plan;
    }
  if (base.rfind("blk.", 0) == 0) {
    auto layer_end = base.find('.', 4);
    std::string layer = base.substr(4, layer_end == std::string::npos ? std::string::npos : layer_end - 4);
    bool numeric = !layer.empty() && layer.find_first_not_of("0123456789") == std::string::npos;
    if (numeric && layer_end != std::string::npos) {
      std::string rest = base.substr(layer_end + 1);
      for (const auto& r : arch.layer_tensors) {
        if (rest != r.gguf) continue;
        TensorPlan plan{arch.prefix + ("model.layers." + layer + "." + r.hf + suffix), std::nullopt};
        plan.narrow = narrow;
        plan.narrow_rounds = narrow && (rest == "attn_norm" || rest == "post_attention_norm" || rest == "attn_q_norm" ||
                                        rest == "attn_k_norm");
        if (gated_delta) plan.keep_with = "blk." + layer;
        // Stacked experts: [experts, out, in] weights and [experts, out] biases.
        const size_t expert_dims = suffix == ".weight" ? 3 : 2;
        if (rest.ends_with("_exps") && tensor.dims.size() != expert_dims)
          throw WeightsError(file.source + ": tensor '" + tensor.name + "' has " + std::to_string(tensor.dims.size()) +
                             " dimensions, expected " + std::to_string(expert_dims) + " (stacked experts)");
        // gpt-oss's sinks are a parameter of the attention module itself ("sinks", no ".weight").
        if (rest == "attn_sinks") plan.hf_name = "model.layers." + layer + "." + r.hf;
        // So is Gemma 4's output scale of a layer ("layer_scalar").
        if (rest == "layer_output_scale") plan.hf_name = "model.layers." + layer + "." + r.hf;
        // Parameters of the linear attention module itself (no ".weight" / ".bias" in mlx-lm).
        if (rest == "ssm_a" || rest == "ssm_dt") plan.hf_name = arch.prefix + ("model.layers." + layer + "." + r.hf);
        plan.split_rows = std::string(r.hf).find('#') != std::string::npos;
        if (rest == "attn_qkv" && std::string(arch.model_type) == "phi") plan.row_parts = qkv_parts(arch, file, tensor, layer, suffix);
        plan.as_conv = (rest == "shortconv.conv" || (gated_delta && rest == "ssm_conv1d")) && suffix == ".weight";
        if (plan.as_conv && (tensor.dims.size() != 2 || !is_plain_type(tensor.type())))
          throw WeightsError(file.source + ": tensor '" + tensor.name + "' must be a 2-D F32/F16/BF16 tensor "
                             "[channels, kernel] (a depthwise convolution)");
        if (plan.split_rows) check_per_head_rows(arch, file, tensor, rest == "attn_q_norm");
        plan.as_row = rest == "ffn_gate_inp_shexp" && tensor.dims.size() == 1;
        if (rest == "ssm_a" && (tensor.type() != GgmlType::f32 || tensor.dims.size() != 1))
          throw WeightsError(file.source + ": tensor '" + tensor.name + "' must be a 1-D F32 vector (the heads' -exp(A_log))");
        plan.minus_one = gemma_norm;
        if (arch.permuted_qk && (rest == "attn_q" || rest == "attn_k")) {
          std::string heads_key = rest == "attn_q" ? "attention.head_count" : "attention.head_count_kv";
          auto heads = file.get_uint(arch_key(arch, heads_key));
          if (!heads) heads = file.require_uint(arch_key(arch, "attention.head_count"));
          // A bias's rows are its elements; llama.cpp permutes it as it permutes the weight.
          const uint64_t rows = tensor.dims.size() == 1 ? tensor.dims[0] : tensor.rows();
          if (tensor.dims.size() == 1 && !is_plain_type(tensor.type()))
            throw WeightsError(file.source + ": tensor '" + tensor.name + "' must be F32/F16/BF16 (a 1-D bias)");
          if (*heads == 0 || rows % (2 * *heads) != 0)
            throw ConfigError(file.source + ": tensor '" + tensor.name + "' has " +
                              std::to_string(rows) + " rows, not a whole number of " +
                              std::to_string(*heads) + " heads of even size");
          plan.qk_heads = *heads;
        }
        return plan;
      }
    }
  }
  throw UnsupportedError(file.source + ": tensor '" + tensor.name + "' is not known for architecture '" +
                         arch.gguf_name + "'");
}

double shortest_float32(double value) {
  float target = static_cast<float>(value);
  char buf[64];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(target));
    if (std::strtof(buf, nullptr) == target) return std::strtod(buf, nullptr);
  }
  return static_cast<double>(target);
}

namespace {

// A 1-D float32 tensor's values (phi3's rope factors), as the doubles that print as the float32s.
nlohmann::ordered_json float32_list(const GgufFile& file, const uint8_t* data, const std::string& name) {
  const auto* t = file.find_tensor(name);
  if (!t) throw WeightsError(file.source + ": missing tensor '" + name + "'");
  if (t->type() != GgmlType::f32 || t->dims.size() != 1)
    throw UnsupportedError(file.source + ": tensor '" + name + "' is not a 1-D F32 vector");
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (uint64_t i = 0; i < t->n_elements; ++i) {
    float v;
    std::memcpy(&v, data + t->offset + 4 * i, 4);
    if (!std::isfinite(v)) throw ConfigError(file.source + ": tensor '" + name + "' holds a non-finite value");
    out.push_back(shortest_float32(v));
  }
  return out;
}

/** EXAONE 4's local layers: llama.cpp keeps one flag per layer (true: sliding window), mlx-lm a
 * pattern string repeated over the layers ("L" local, "G" global); one letter per layer says it. */
void add_exaone4_windows(nlohmann::ordered_json& c, const GgufArchitecture& arch, const GgufFile& file) {
  auto window = file.get_uint(arch_key(arch, "attention.sliding_window"));
  c["sliding_window"] = window ? nlohmann::ordered_json(*window) : nlohmann::ordered_json(nullptr);
  c["sliding_window_pattern"] = nullptr;
  const auto* flags = file.get_integers(arch_key(arch, "attention.sliding_window_pattern"));
  if (!window || *window == 0) return;
  const uint64_t layers = c["num_hidden_layers"].get<uint64_t>();
  if (!flags || flags->size() != layers)
    throw ConfigError(file.source + ": metadata '" + arch_key(arch, "attention.sliding_window_pattern") +
                      "' must hold one flag per layer (" + std::to_string(layers) + ") when a sliding window is set");
  std::string pattern;
  for (auto f : *flags) pattern += f ? 'L' : 'G';
  c["sliding_window_pattern"] = pattern;
}

/** gpt-oss's YaRN RoPE scaling as GptOssConfig states it; llama.cpp keeps the factor and the
 * original context, and the betas only where they differ from its defaults (32 and 1). */
nlohmann::ordered_json yarn_scaling(const GgufArchitecture& arch, const GgufFile& file) {
  auto factor = file.get_float(arch_key(arch, "rope.scaling.factor"));
  if (!factor || !std::isfinite(static_cast<float>(*factor)) || *factor <= 0)
    throw ConfigError(file.source + ": metadata '" + arch_key(arch, "rope.scaling.factor") +
                      "' is missing or not a finite, positive number (YaRN RoPE scaling)");
  auto beta = [&](const char* key, double fallback) {
    auto v = file.get_float(arch_key(arch, key));
    if (v && (!std::isfinite(static_cast<float>(*v)) || *v <= 0))
      throw ConfigError(file.source + ": metadata '" + arch_key(arch, key) + "' is not a finite, positive number");
    return shortest_float32(v.value_or(fallback));
  };
  return {{"beta_fast", beta("rope.scaling.yarn_beta_fast", 32.0)},
          {"beta_slow", beta("rope.scaling.yarn_beta_slow", 1.0)},
          {"factor", shortest_float32(*factor)},
          {"original_max_position_embeddings", file.require_uint(arch_key(arch, "rope.scaling.original_context_length"))},
          {"rope_type", "yarn"}};
}

/** LFM2: llama.cpp marks the attention layers by a non-zero entry of the per-layer head_count_kv
 * list (as transformers' GGUF loader reads it) and keeps the MLP width already adjusted. */
void add_lfm2_fields(nlohmann::ordered_json& c, const GgufArchitecture& arch, const GgufFile& file) {
  const uint64_t layers = c["num_hidden_layers"].get<uint64_t>();
  const std::string kv_key = arch_key(arch, "attention.head_count_kv");
  const auto* kv = file.get_integers(kv_key);
  if (!kv || kv->size() != layers)
    throw ConfigError(file.source + ": metadata '" + kv_key + "' must list the key/value heads of each of the " +
                      std::to_string(layers) + " layers (0 on convolution layers)");
  nlohmann::ordered_json attention = nlohmann::ordered_json::array();
  int64_t kv_heads = 0;
  for (size_t i = 0; i < kv->size(); ++i) {
    if ((*kv)[i] < 0 || (*kv)[i] > static_cast<int64_t>(c["num_attention_heads"].get<uint64_t>()))
      throw ConfigError(file.source + ": metadata '" + kv_key + "' entry " + std::to_string(i) + " is out of range");
    if ((*kv)[i] == 0) continue;
    if (kv_heads != 0 && (*kv)[i] != kv_heads)
      throw UnsupportedError(file.source + ": metadata '" + kv_key + "' gives attention layers different key/value head counts");
    kv_heads = (*kv)[i];
    attention.push_back(i);
  }
  if (attention.empty()) throw ConfigError(file.source + ": metadata '" + kv_key + "' names no attention layer");
  if (file.find_tensor("output.weight"))
    throw UnsupportedError(file.source + ": tensor 'output.weight': lfm2 ties its output head to the embeddings");
  c["num_key_value_heads"] = kv_heads;
  c["full_attn_idxs"] = attention;
  c["norm_eps"] = c["rms_norm_eps"];
  c["conv_bias"] = file.find_tensor("blk.0.shortconv.in_proj.bias") != nullptr;
  c["conv_L_cache"] = file.require_uint(arch_key(arch, "shortconv.l_cache"));
  c["block_dim"] = c["hidden_size"];
  c["block_ff_dim"] = c["intermediate_size"];
  c["block_multiple_of"] = 256;
  c["block_ffn_dim_multiplier"] = 1.0;
  c["block_auto_adjust_ff_dim"] = false;  // llama.cpp's feed_forward_length is the adjusted width
}

/** OLMo 3's sliding and full layers: llama.cpp's per-layer flags (true: sliding) as layer_types,
 * or, without them, the pattern it and mlx-lm both assume (every fourth layer full). */
void add_olmo3_windows(nlohmann::ordered_json& c, const GgufArchitecture& arch, const GgufFile& file) {
  c["sliding_window"] = file.require_uint(arch_key(arch, "attention.sliding_window"));
  const uint64_t layers = c["num_hidden_layers"].get<uint64_t>();
  const std::string key = arch_key(arch, "attention.sliding_window_pattern");
  const auto* flags = file.get_integers(key);
  if (flags && flags->size() != layers)
    throw ConfigError(file.source + ": metadata '" + key + "' must hold one flag per layer (" + std::to_string(layers) + ")");
  nlohmann::ordered_json types = nlohmann::ordered_json::array();
  for (uint64_t i = 0; i < layers; ++i) {
    const bool sliding = flags ? (*flags)[i] != 0 : (i + 1) % 4 != 0;
    types.push_back(sliding ? "sliding_attention" : "full_attention");
  }
  c["layer_types"] = types;
}

/** A float metadata value that must be present, finite and positive, as its shortest decimal. */
double positive_float(const GgufArchitecture& arch, const GgufFile& file, const char* key) {
  auto v = file.get_float(arch_key(arch, key));
  if (!v || !std::isfinite(static_cast<float>(*v)) || *v <= 0)
    throw ConfigError(file.source + ": metadata '" + arch_key(arch, key) + "' is missing or not a finite, positive number");
  return shortest_float32(*v);
}

/** Ministral 3's rope_parameters, which its mlx-lm model reads whole: llama.cpp's Ministral3Model
 * (conversion/mistral3.py) requires rope_type yarn and writes the base, factor, original context,
 * the betas when the config has them (mlx-lm's YarnRoPE defaults, 32 and 1, are transformers'),
 * mscale_all_dim as yarn_log_multiplier and llama_4_scaling_beta as attention.temperature_scale.
 * The file has no mscale: llama.cpp's runtime takes it as 1 (the released models' value). */
void add_ministral3_rope(nlohmann::ordered_json& c, const GgufArchitecture& arch, const GgufFile& file) {
  auto scaling = file.get_string(arch_key(arch, "rope.scaling.type"));
  if (!scaling || *scaling != "yarn")
    throw UnsupportedError(file.source + ": metadata '" + arch_key(arch, "rope.scaling.type") +
                           "' must be yarn (llama.cpp's Ministral3Model converts only YaRN models)");
  auto opt_float = [&](const char* key, double fallback) {
    auto v = file.get_float(arch_key(arch, key));
    if (v && !std::isfinite(static_cast<float>(*v)))
      throw ConfigError(file.source + ": metadata '" + arch_key(arch, key) + "' is not a finite number");
    return shortest_float32(v.value_or(fallback));
  };
  auto temperature = file.get_float(arch_key(arch, "attention.temperature_scale"));
  if (!std::isfinite(static_cast<float>(*temperature)))
    throw ConfigError(file.source + ": metadata '" + arch_key(arch, "attention.temperature_scale") + "' is not a finite number");
  c["rope_parameters"] = {{"rope_type", "yarn"},
                          {"rope_theta", c["rope_theta"]},
                          {"factor", positive_float(arch, file, "rope.scaling.factor")},
                          {"original_max_position_embeddings",
                           file.require_uint(arch_key(arch, "rope.scaling.original_context_length"))},
                          {"beta_fast", opt_float("rope.scaling.yarn_beta_fast", 32.0)},
                          {"beta_slow", opt_float("rope.scaling.yarn_beta_slow", 1.0)},
                          {"mscale", 1.0},
                          {"mscale_all_dim", opt_float("rope.scaling.yarn_log_multiplier", 0.0)},
                          {"llama_4_scaling_beta", shortest_float32(*temperature)}};
  if (c["rope_parameters"]["original_max_position_embeddings"].get<uint64_t>() == 0)
    throw ConfigError(file.source + ": metadata '" + arch_key(arch, "rope.scaling.original_context_length") +
                      "' must be positive");
}

/** The families whose checkpoint always has its own output head (mlx-lm builds lm_head unconditionally). */
void require_untied_head(const GgufFile& file, const std::string& type) {
  if (!file.find_tensor("output.weight"))
    throw WeightsError(file.source + ": missing tensor 'output.weight': " + type + " needs an output head of its own");
}

/** The config.json fields of the families added on top of the llama-like ones: what mlx-lm's model
 * file of the family reads, from llama.cpp's metadata or from the constants llama.cpp assumes. */
void add_family_fields(nlohmann::ordered_json& c, const GgufArchitecture& arch, const GgufFile& file, double layer_norm_eps) {
  const std::string type = arch.model_type;
  const uint64_t head_dim = c["head_dim"].get<uint64_t>();
  const auto rot = file.get_uint(arch_key(arch, "rope.dimension_count"));
  const double rotary_factor = rot ? static_cast<double>(*rot) / static_cast<double>(head_dim) : 1.0;
  if (type == "granite") {
    // GraniteConfig's multipliers; llama.cpp divides the logits by its logit_scale as HF does.
    c["attention_multiplier"] = positive_float(arch, file, "attention.scale");
    c["embedding_multiplier"] = positive_float(arch, file, "embedding_scale");
    c["residual_multiplier"] = positive_float(arch, file, "residual_scale");
    c["logits_scaling"] = positive_float(arch, file, "logit_scale");
  } else if (type == "smollm3") {
    // llama.cpp leaves out RoPE on every fourth layer (a constant, not metadata), as SmolLM3 does.
    c["no_rope_layer_interval"] = 4;
  } else if (type == "starcoder2") {
    c["norm_epsilon"] = layer_norm_eps;
    c["hidden_act"] = "gelu_pytorch_tanh";
    c["use_bias"] = true;
  } else if (type == "stablelm") {
    require_untied_head(file, type);
    c["layer_norm_eps"] = layer_norm_eps;
    c["partial_rotary_factor"] = rotary_factor;
    c["use_qkv_bias"] = file.find_tensor("blk.0.attn_q.bias") != nullptr;
    // llama.cpp's StableLM graph runs the residuals in parallel exactly when a layer has no ffn_norm.
    c["use_parallel_residual"] = file.find_tensor("blk.0.ffn_norm.weight") == nullptr;
    c["qk_layernorm"] = file.find_tensor("blk.0.attn_q_norm.weight") != nullptr;
  } else if (type == "glm4") {
    require_untied_head(file, type);
    c["partial_rotary_factor"] = rotary_factor;
    c["rope_traditional"] = true;  // GLM's rotary pairs are interleaved, as llama.cpp runs them
  } else if (type == "cohere2") {
    // Cohere2Config: tied head, LayerNorm without bias, one global layer (no RoPE) per four.
    if (file.find_tensor("output.weight"))
      throw UnsupportedError(file.source + ": tensor 'output.weight': cohere2 ties its output head to the embeddings");
    c["layer_norm_eps"] = layer_norm_eps;
    c["layer_norm_bias"] = file.find_tensor("output_norm.bias") != nullptr;
    c["logit_scale"] = positive_float(arch, file, "logit_scale");
    c["sliding_window"] = file.require_uint(arch_key(arch, "attention.sliding_window"));
    c["sliding_window_pattern"] = 4;
  } else if (type == "exaone4") {
    add_exaone4_windows(c, arch, file);
  } else if (type == "olmo3") {
    add_olmo3_windows(c, arch, file);
  } else if (type == "phi") {
    // mlx-lm's phi: head size hidden_size / heads, partial rotary, biases everywhere, its own head.
    require_untied_head(file, type);
    if (head_dim * c["num_attention_heads"].get<uint64_t>() != c["hidden_size"].get<uint64_t>())
      throw UnsupportedError(file.source + ": phi2 with a head size other than embedding_length / head_count");
    c["layer_norm_eps"] = layer_norm_eps;
    c["partial_rotary_factor"] = rotary_factor;
  } else if (type == "lfm2") {
    add_lfm2_fields(c, arch, file);
  } else if (type == "hunyuan_v1_dense") {
    // llama.cpp folds HunYuan's NTK alpha into rope.freq_base (and writes scaling "none"): the base
    // is taken as it is, with mlx-lm's alpha left at 1.
    c["use_qk_norm"] = file.find_tensor("blk.0.attn_q_norm.weight") != nullptr;
  } else if (type == "minicpm") {
    // MiniCPMModel.set_gguf_parameters writes scale_emb as it is, scale_depth / sqrt(layers) and
    // hidden_size / dim_model_base (a whole number of dimensions); mlx-lm divides scale_depth by
    // sqrt(layers) again, which gives the file's float32 back.
    const double layers = static_cast<double>(c["num_hidden_layers"].get<uint64_t>());
    c["scale_emb"] = positive_float(arch, file, "embedding_scale");
    c["scale_depth"] = static_cast<double>(static_cast<float>(positive_float(arch, file, "residual_scale"))) * std::sqrt(layers);
    const double base = static_cast<double>(c["hidden_size"].get<uint64_t>()) / positive_float(arch, file, "logit_scale");
    if (std::fabs(base - std::round(base)) > 1e-3 * base)
      throw ConfigError(file.source + ": metadata '" + arch_key(arch, "logit_scale") +
                        "' does not divide the embedding length into a whole dim_model_base");
    c["dim_model_base"] = static_cast<uint64_t>(std::llround(base));
  } else if (type == "ministral3") {
    add_ministral3_rope(c, arch, file);
  } else if (type == "seed_oss") {
    c["attention_out_bias"] = file.find_tensor("blk.0.attn_output.bias") != nullptr;
  } else if (type == "ernie4_5") {
    c["use_bias"] = file.find_tensor("blk.0.attn_q.bias") != nullptr;
  } else if (type == "gpt_oss") {
    // llama.cpp alternates sliding and full attention from the first layer, as GptOssConfig does.
    require_untied_head(file, type);
    c["sliding_window"] = file.require_uint(arch_key(arch, "attention.sliding_window"));
    nlohmann::ordered_json types = nlohmann::ordered_json::array();
    for (uint64_t i = 0; i < c["num_hidden_layers"].get<uint64_t>(); ++i)
      types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
    c["layer_types"] = types;
  }
}

/** Qwen3-Next and Qwen3.5: the gated delta nets' sizes (llama.cpp's ssm.* keys, as its
 * Qwen3NextModel.set_gguf_parameters writes them), which layers are linear (mlx-lm's models take
 * every full_attention_interval-th layer as full attention: llama.cpp's per-layer flags must say
 * the same), the partial rotary, and the experts of the MoE variants. */
void add_gated_delta_fields(nlohmann::ordered_json& c, const GgufArchitecture& arch, const GgufFile& file) {
  auto u = [&](const char* key) { return file.require_uint(arch_key(arch, key)); };
  const std::string type = arch.model_type;
  const uint64_t layers = c["num_hidden_layers"].get<uint64_t>(), head_dim = c["head_dim"].get<uint64_t>();
  const uint64_t v_heads = u("ssm.time_step_rank"), k_heads = u("ssm.group_count"), inner = u("ssm.inner_size");
  if (k_heads == 0 || v_heads % k_heads != 0 || inner % v_heads != 0)
    throw ConfigError(file.source + ": " + arch_key(arch, "ssm.time_step_rank") + " = " + std::to_string(v_heads) +
                      " must be a multiple of " + arch_key(arch, "ssm.group_count") + " = " + std::to_string(k_heads) +
                      " and divide " + arch_key(arch, "ssm.inner_size") + " = " + std::to_string(inner));
  c["linear_conv_kernel_dim"] = u("ssm.conv_kernel");
  c["linear_key_head_dim"] = u("ssm.state_size");
  c["linear_num_key_heads"] = k_heads;
  c["linear_num_value_heads"] = v_heads;
  c["linear_value_head_dim"] = inner / v_heads;
  const uint64_t interval = u("full_attention_interval");
  const std::string flags_key = arch_key(arch, "attention.recurrent_layers");
  const auto* flags = file.get_integers(flags_key);
  if (interval == 0 || (flags && flags->size() != layers))
    throw ConfigError(file.source + ": " + arch_key(arch, "full_attention_interval") + " must be positive and '" +
                      flags_key + "' hold one flag per layer (" + std::to_string(layers) + ")");
  for (uint64_t i = 0; flags && i < layers; ++i)
    if (((*flags)[i] != 0) != ((i + 1) % interval != 0))
      throw UnsupportedError(file.source + ": metadata '" + flags_key + "' makes layer " + std::to_string(i) +
                             ((*flags)[i] ? " linear" : " full attention") + ", but mlx-lm's " + type +
                             " takes every " + std::to_string(interval) + "th layer as full attention");
  c["full_attention_interval"] = interval;
  const auto rot = file.require_uint(arch_key(arch, "rope.dimension_count"));
  const double rotary_factor = static_cast<double>(rot) / static_cast<double>(head_dim);
  const uint64_t experts = file.get_uint(arch_key(arch, "expert_count")).value_or(0);
  if (experts > 0) {
    const uint64_t used = u("expert_used_count");
    if (used == 0 || used > experts)
      throw ConfigError(file.source + ": " + arch_key(arch, "expert_used_count") + " = " + std::to_string(used) +
                        " must be between 1 and " + std::to_string(experts));
    c["num_experts"] = experts;
    c["num_experts_per_tok"] = used;
    c["moe_intermediate_size"] = u("expert_feed_forward_length");
    c["shared_expert_intermediate_size"] = u("expert_shared_feed_forward_length");
    c["norm_topk_prob"] = true;  // llama.cpp's graphs renormalise the top-k weights (build_moe_ffn norm_w)
  }
  nlohmann::ordered_json dense = nlohmann::ordered_json::array();
  for (uint64_t i = 0; i < layers; ++i)
    if (!file.find_tensor("blk." + std::to_string(i) + ".ffn_gate_inp.weight")) dense.push_back(i);
  if (type == "qwen3_next") {
    // qwen3_next.ModelArgs requires these; a layer without a router keeps the dense MLP.
    if (experts == 0) {
      c["num_experts"] = 0, c["num_experts_per_tok"] = 0, c["moe_intermediate_size"] = 0;
      c["shared_expert_intermediate_size"] = 0;
    }
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = experts > 0 ? dense : nlohmann::ordered_json::array();
    c["partial_rotary_factor"] = rotary_factor;
    return;
  }
  // Qwen3.5: the MoE variant routes on every layer; the RoPE from rope_parameters (interleaved
  // MRoPE, whose sections are all the same position for text).
  if ((experts > 0) != (type == "qwen3_5_moe") || (experts > 0 && !dense.empty()))
    throw UnsupportedError(file.source + ": " + type + " needs " +
                           (experts > 0 ? "experts in every layer" : "no experts"));
  const auto* sections = file.get_integers(arch_key(arch, "rope.dimension_sections"));
  nlohmann::ordered_json mrope = nlohmann::ordered_json::array();
  for (size_t i = 0; sections && i < 3 && i < sections->size(); ++i) mrope.push_back((*sections)[i]);
  c["rope_parameters"] = {{"rope_type", "default"}, {"mrope_section", mrope}, {"mrope_interleaved", true},
                          {"rope_theta", c["rope_theta"]}, {"partial_rotary_factor", rotary_factor}};
}

bool is_moe(const std::string& type) {
  return type == "qwen3_moe" || type == "qwen2_moe" || type == "mixtral" || type == "gpt_oss" || type == "olmoe";
}

/** The experts' width: Mixtral's is its feed_forward_length, OLMoE's too unless given apart; the
 * Qwen MoEs and gpt-oss give theirs apart. */
uint64_t expert_width(const GgufArchitecture& arch, const GgufFile& file) {
  const std::string type = arch.model_type;
  if (type == "mixtral") return file.require_uint(arch_key(arch, "feed_forward_length"));
  if (type == "olmoe") {
    auto width = file.get_uint(arch_key(arch, "expert_feed_forward_length"));
    return width ? *width : file.require_uint(arch_key(arch, "feed_forward_length"));
  }
  return file.require_uint(arch_key(arch, "expert_feed_forward_length"));
}

/** The mixture-of-experts fields of each MoE family's config. */
void add_moe_fields(nlohmann::ordered_json& c, const GgufArchitecture& arch, const GgufFile& file) {
  auto u = [&](const char* key) { return file.require_uint(arch_key(arch, key)); };
  const std::string type = arch.model_type;
  const uint64_t expert_ffn = expert_width(arch, file);
  // Qwen3MoeConfig: every layer sparse unless it has no router; top-k probabilities renormalised
  // (norm_topk_prob, true in every released Qwen3-MoE). Mixtral / Qwen2MoeConfig: their fields.
  const uint64_t experts = u("expert_count"), used = u("expert_used_count");
  if (experts == 0 || used == 0 || used > experts)
    throw ConfigError(file.source + ": " + arch_key(arch, "expert_used_count") + " = " + std::to_string(used) +
                      " must be between 1 and " + arch_key(arch, "expert_count") + " = " + std::to_string(experts));
  const bool local_experts = type == "mixtral" || type == "gpt_oss";
  c[local_experts ? "num_local_experts" : "num_experts"] = experts;
  c["num_experts_per_tok"] = used;
  if (type == "gpt_oss" || type == "olmoe") c["intermediate_size"] = expert_ffn;  // their experts' width
  else if (type != "mixtral") c["moe_intermediate_size"] = expert_ffn;
  if (type == "qwen2_moe") c["shared_expert_intermediate_size"] = u("expert_shared_feed_forward_length");
  if (type == "qwen3_moe") {
    c["decoder_sparse_step"] = 1;
    nlohmann::ordered_json dense = nlohmann::ordered_json::array();
    for (uint64_t i = 0; i < u("block_count"); ++i)
      if (!file.find_tensor("blk." + std::to_string(i) + ".ffn_gate_inp.weight")) dense.push_back(i);
    c["mlp_only_layers"] = dense;
    c["norm_topk_prob"] = true;
  } else {
    if (type == "olmoe")  // llama.cpp leaves OLMoE's top-k weights as they are unless told otherwise
      c["norm_topk_prob"] = file.get_bool(arch_key(arch, "expert_weights_norm")).value_or(false);
    // mlx-lm's mixtral, qwen2_moe, gpt_oss and olmoe make every layer sparse.
    for (uint64_t i = 0; i < u("block_count"); ++i)
      if (!file.find_tensor("blk." + std::to_string(i) + ".ffn_gate_inp.weight"))
        throw UnsupportedError(file.source + ": layer " + std::to_string(i) + " has no router (ffn_gate_inp), but " +
                               type + " needs experts in every layer");
  }
}

/** Gemma 2 and 3's fields beyond the llama-like ones. */
void add_gemma_fields(nlohmann::ordered_json& c, const GgufArchitecture& arch, const GgufFile& file) {
  auto u = [&](const char* key) { return file.require_uint(arch_key(arch, key)); };
  auto opt_u = [&](const char* key) { return file.get_uint(arch_key(arch, key)); };
  const std::string type = arch.model_type;
  const uint64_t hidden = c["hidden_size"].get<uint64_t>(), heads = c["num_attention_heads"].get<uint64_t>();
  const uint64_t head_dim = c["head_dim"].get<uint64_t>();
  if (type == "gemma3_text") {
    // Gemma3TextConfig's fields that llama.cpp keeps as constants rather than metadata: five
    // sliding layers per global one, local RoPE base 10000, and the query scale of head_dim
    // except on the 62-layer 27B, whose scale is hidden_size / heads.
    c["sliding_window"] = u("attention.sliding_window");
    c["sliding_window_pattern"] = 6;
    c["rope_local_base_freq"] = 10000.0;
    c["query_pre_attn_scalar"] = u("block_count") == 62 ? hidden / heads : head_dim;
    c["hidden_activation"] = "gelu_pytorch_tanh";
    c["final_logit_softcapping"] = nullptr;
    c["attn_logit_softcapping"] = nullptr;
  }
  if (type == "gemma2") {
    // Gemma2Config: the soft caps from the metadata; the query scale of head_dim except on the
    // 46-layer 27B (hidden_size / heads), as llama.cpp derives it.
    auto cap = [&](const char* key) {
      auto v = file.get_float(arch_key(arch, key));
      if (!v || !std::isfinite(static_cast<float>(*v)) || *v <= 0)
        throw ConfigError(file.source + ": metadata '" + arch_key(arch, key) + "' is missing or not a positive number");
      return shortest_float32(*v);
    };
    c["attn_logit_softcapping"] = cap("attn_logit_softcapping");
    c["final_logit_softcapping"] = cap("final_logit_softcapping");
    c["query_pre_attn_scalar"] = u("block_count") == 46 ? hidden / heads : head_dim;
    if (auto window = opt_u("attention.sliding_window")) c["sliding_window"] = *window;
  }
}

/** Phi-3's partial rotary and LongRoPE factors (the float32 tensors at `data`). */
void add_phi3_fields(nlohmann::ordered_json& c, const GgufArchitecture& arch, const GgufFile& file, const uint8_t* data) {
  const uint64_t hidden = c["hidden_size"].get<uint64_t>(), heads = c["num_attention_heads"].get<uint64_t>();
  const uint64_t head_dim = c["head_dim"].get<uint64_t>();
  const auto rot = file.get_uint(arch_key(arch, "rope.dimension_count"));
  // mlx-lm's phi3: head_dim = hidden_size / heads; a rotary part below it is partial_rotary_factor;
  // llama.cpp's rope_factors_long/short are the LongRoPE (SuScaledRoPE) factors.
  if (head_dim * heads != hidden)
    throw UnsupportedError(file.source + ": phi3 with a head size other than embedding_length / head_count");
  if (rot && *rot != head_dim) c["partial_rotary_factor"] = static_cast<double>(*rot) / static_cast<double>(head_dim);
  if (file.find_tensor("rope_factors_long.weight")) {
    auto original = file.require_uint(arch_key(arch, "rope.scaling.original_context_length"));
    c["rope_scaling"] = {{"type", "longrope"},
                         {"long_factor", float32_list(file, data, "rope_factors_long.weight")},
                         {"short_factor", float32_list(file, data, file.find_tensor("rope_factors_short.weight")
                                                                       ? "rope_factors_short.weight"
                                                                       : "rope_factors_long.weight")}};
    c["original_max_position_embeddings"] = original;
  }
}

/** MiniCPM 3's latent attention sizes and LongRoPE factors, and the constants llama.cpp's
 * MiniCPM3Model leaves out of the file: its set_gguf_parameters writes neither rope_theta nor the
 * scales, and llama.cpp's minicpm3 graph hard-codes scale_emb 12, scale_depth 1.4 and
 * dim_model_base 256 (MiniCPM3-4B's), with llama.cpp's RoPE base 10000 when the file has none and
 * the context length as the original one (llama.cpp's n_ctx_orig_yarn without its own key). */
void add_minicpm3_fields(nlohmann::ordered_json& c, const GgufArchitecture& arch, const GgufFile& file, const uint8_t* data) {
  const uint64_t key_length = c["head_dim"].get<uint64_t>(), heads = c["num_attention_heads"].get<uint64_t>();
  const uint64_t rope_dims = file.require_uint(arch_key(arch, "rope.dimension_count"));
  if (rope_dims == 0 || rope_dims >= key_length)
    throw ConfigError(file.source + ": " + arch_key(arch, "rope.dimension_count") + " must be below " +
                      arch_key(arch, "attention.key_length") + " = " + std::to_string(key_length));
  // mlx-lm's minicpm3: values of hidden_size / heads per head.
  if (auto v = file.get_uint(arch_key(arch, "attention.value_length")); v && *v * heads != c["hidden_size"].get<uint64_t>())
    throw UnsupportedError(file.source + ": minicpm3 with a value head size other than embedding_length / head_count");
  c["q_lora_rank"] = file.require_uint(arch_key(arch, "attention.q_lora_rank"));
  c["kv_lora_rank"] = file.require_uint(arch_key(arch, "attention.kv_lora_rank"));
  c["qk_nope_head_dim"] = key_length - rope_dims;
  c["qk_rope_head_dim"] = rope_dims;
  c["scale_emb"] = 12.0;
  c["scale_depth"] = 1.4;
  c["dim_model_base"] = 256;
  if (!file.get_float(arch_key(arch, "rope.freq_base"))) c["rope_theta"] = 10000.0;
  const uint64_t context = c["max_position_embeddings"].get<uint64_t>();
  nlohmann::ordered_json scaling = {{"original_max_position_embeddings", context}};
  if (file.find_tensor("rope_factors_long.weight")) {
    scaling = {{"type", "longrope"},
               {"long_factor", float32_list(file, data, "rope_factors_long.weight")},
               {"short_factor", float32_list(file, data, file.find_tensor("rope_factors_short.weight")
                                                             ? "rope_factors_short.weight"
                                                             : "rope_factors_long.weight")},
               {"original_max_position_embeddings", context}};
    if (scaling["long_factor"].size() * 2 != rope_dims)
      throw ConfigError(file.source + ": tensor 'rope_factors_long.weight' must hold one factor per rotated pair (" +
                        std::to_string(rope_dims / 2) + ")");
  }
  c["rope_scaling"] = scaling;
}

/** rope_scaling: none, linear, or gpt-oss's YaRN. */
nlohmann::ordered_json rope_scaling(const GgufArchitecture& arch, const GgufFile& file) {
  auto scaling = file.get_string(arch_key(arch, "rope.scaling.type"));
  if (!scaling || *scaling == "none") return nullptr;
  if (*scaling == "yarn" && std::string(arch.model_type) == "gpt_oss") return yarn_scaling(arch, file);
  auto factor = file.get_float(arch_key(arch, "rope.scaling.factor"));
  if (*scaling != "linear" || !factor)
    throw UnsupportedError(file.source + ": RoPE scaling '" + *scaling + "' is not supported by the converter (supported: linear)");
  if (!std::isfinite(static_cast<float>(*factor)) || *factor <= 0)
    throw ConfigError(file.source + ": metadata '" + arch_key(arch, "rope.scaling.factor") + "' = " +
                      std::to_string(*factor) + " is not a finite, positive number");
  return {{"type", "linear"}, {"factor", shortest_float32(*factor)}};
}

}  // namespace

nlohmann::ordered_json build_model_config(const GgufArchitecture& arch, const GgufFile& file, const uint8_t* data,
                                          std::vector<std::string>* notes) {
  auto u = [&](const char* key) { return file.require_uint(arch_key(arch, key)); };
  auto opt_u = [&](const char* key) { return file.get_uint(arch_key(arch, key)); };
  uint64_t hidden = u("embedding_length");
  uint64_t heads = u("attention.head_count");
  if (heads == 0 || hidden % heads != 0)
    throw ConfigError(file.source + ": " + arch_key(arch, "attention.head_count") + " = " +
                      std::to_string(heads) + " does not divide the embedding length " + std::to_string(hidden));
  uint64_t head_dim = opt_u("attention.key_length").value_or(hidden / heads);
  const std::string type = arch.model_type;
  const bool phi3 = type == "phi3";
  const bool partial_ok = phi3 || type == "stablelm" || type == "glm4" || type == "phi" || type == "minicpm3" ||
                          is_gated_delta(arch);
  const auto rot = opt_u("rope.dimension_count");
  if (rot && *rot != head_dim && !(partial_ok && *rot > 0 && *rot < head_dim))
    throw UnsupportedError(file.source + ": partial rotary embeddings (" + arch_key(arch, "rope.dimension_count") +
                           " = " + std::to_string(*rot) + ", head size " + std::to_string(head_dim) +
                           ") are not supported by the converter for this architecture");
  // StarCoder 2, StableLM, Cohere 2 and Phi-2 normalise with LayerNorm, the others with RMSNorm.
  const bool layer_norm = type == "starcoder2" || type == "stablelm" || type == "cohere2" || type == "phi";
  const std::string eps_key = arch_key(arch, layer_norm ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon");
  auto eps = file.get_float(eps_key);
  if (!eps) throw ConfigError(file.source + ": missing required metadata '" + eps_key + "'");
  // JSON has no inf or NaN: a config.json holding them (as null) would no longer load.
  if (!std::isfinite(static_cast<float>(*eps)) || *eps < 0)
    throw ConfigError(file.source + ": metadata '" + eps_key + "' = " + std::to_string(*eps) +
                      " is not a finite, non-negative number");
  const double rope_base = file.get_float(arch_key(arch, "rope.freq_base")).value_or(10000.0);
  if (!std::isfinite(static_cast<float>(rope_base)) || rope_base <= 0)
    throw ConfigError(file.source + ": metadata '" + arch_key(arch, "rope.freq_base") + "' = " +
                      std::to_string(rope_base) + " is not a finite, positive number");
  const auto* embed = file.find_tensor("token_embd.weight");
  if (!embed || embed->dims.size() != 2)
    throw WeightsError(file.source + ": missing the 2-D tensor 'token_embd.weight'");
  uint64_t vocab = opt_u("vocab_size").value_or(embed->dims[1]);
  if (vocab != embed->dims[1])
    throw ConfigError(file.source + ": " + arch_key(arch, "vocab_size") + " = " + std::to_string(vocab) +
                      " but 'token_embd.weight' has " + std::to_string(embed->dims[1]) + " rows");

  nlohmann::ordered_json c;
  c["architectures"] = {arch.hf_class};
  c["model_type"] = arch.model_type;
  c["hidden_size"] = hidden;
  const bool moe = is_moe(type);
  // Gemma 4's MLP width and key/value heads may be per-layer lists (set by add_gemma4_fields).
  const bool gemma4 = type == "gemma4_text";
  const bool gemma3n = type == "gemma3n";  // a width per layer or one for all (add_gemma3n_fields)
  c["intermediate_size"] = moe ? opt_u("feed_forward_length").value_or(expert_width(arch, file))
                          : is_gated_delta(arch) ? opt_u("feed_forward_length").value_or(0)
                          : gemma4 || gemma3n  ? 0
                                               : u("feed_forward_length");
  c["num_hidden_layers"] = u("block_count");
  c["num_attention_heads"] = heads;
  // LFM2's head_count_kv is a list, zero on its convolution layers (add_family_fields).
  c["num_key_value_heads"] = type == "lfm2" || gemma4 ? heads : opt_u("attention.head_count_kv").value_or(heads);
  c["head_dim"] = head_dim;
  const bool gemma = std::string(arch.model_type).rfind("gemma", 0) == 0;
  c["hidden_act"] = gemma ? "gelu_pytorch_tanh" : "silu";
  if (!layer_norm) c["rms_norm_eps"] = shortest_float32(*eps);
  c["rope_theta"] = shortest_float32(rope_base);
  // Ministral 3 keeps its YaRN in rope_parameters (add_family_fields).
  c["rope_scaling"] = type == "ministral3" ? nlohmann::ordered_json(nullptr) : rope_scaling(arch, file);
  c["max_position_embeddings"] = opt_u("context_length").value_or(2048);
  c["vocab_size"] = vocab;
  c["tie_word_embeddings"] = file.find_tensor("output.weight") == nullptr;
  c["attention_bias"] = file.find_tensor("blk.0.attn_q.bias") != nullptr;
  c["mlp_bias"] = file.find_tensor("blk.0.ffn_up.bias") != nullptr;
  if (moe) add_moe_fields(c, arch, file);
  if (type == "gemma3_text" || type == "gemma2") add_gemma_fields(c, arch, file);
  if (gemma4) add_gemma4_fields(c, file, data);
  if (phi3) add_phi3_fields(c, arch, file, data);
  if (type == "minicpm3") add_minicpm3_fields(c, arch, file, data);
  if (is_gated_delta(arch)) add_gated_delta_fields(c, arch, file);
  add_family_fields(c, arch, file, layer_norm ? shortest_float32(*eps) : 0.0);
  if (gemma3n) {
    std::vector<std::string> assumed;
    add_gemma3n_fields(c, file, data, assumed);
    if (notes) notes->insert(notes->end(), assumed.begin(), assumed.end());
  }
  if (auto bos = file.get_uint("tokenizer.ggml.bos_token_id")) c["bos_token_id"] = *bos;
  if (auto eos = file.get_uint("tokenizer.ggml.eos_token_id")) c["eos_token_id"] = *eos;
  return c;
}

}  // namespace mlxrt::convert
