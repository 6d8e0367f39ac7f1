// Gemma 4's GGUF metadata back into mlx-lm's gemma4_text config, its tensor names, and the
// "gemma4" tokenizer model.
#include <gtest/gtest.h>

#include <vector>

#include <mlx/mlx.h>

#include "gguf_builder.h"
#include "gguf_parsed.h"
#include "mlxrt/convert/gguf_arch.h"
#include "mlxrt/convert/gguf_gemma4.h"
#include "mlxrt/convert/gguf_gemma4_experts.h"
#include "mlxrt/convert/gguf_tokenizer.h"
#include "mlxrt/util/errors.h"

using namespace mlxrt::convert;
using mlxrt::convert::testing::GgufBuilder;

namespace {

using Parsed = mlxrt::convert::testing::ParsedGguf;
Parsed parse(const GgufBuilder& b) { return mlxrt::convert::testing::parse_built(b); }

std::string f32_bytes(const std::vector<float>& v) {
  std::string s;
  for (float x : v) s += GgufBuilder::pod(x);
  return s;
}

struct Layout {
  bool k_eq_v = false;
  std::vector<int32_t> kv = {1, 1, 1, 1, 1};
  std::vector<int32_t> widths = {64, 64, 64, 128, 128};
  uint32_t rot_swa = 16;
  std::vector<float> rope_freqs = {1, 1, 1, 1, 1e30f, 1e30f, 1e30f, 1e30f, 1e30f, 1e30f, 1e30f, 1e30f, 1e30f, 1e30f, 1e30f, 1e30f};
};

// E2B's shape in small: layers 0, 1, 3 slide, 2 and 4 are full; 3 and 4 share keys and values.
GgufBuilder gemma4(const Layout& l = {}) {
  GgufBuilder b;
  b.str("general.architecture", "gemma4").u32("general.file_type", 32).u32("gemma4.block_count", 5);
  b.u32("gemma4.embedding_length", 32).u32("gemma4.context_length", 4096).u32("gemma4.attention.head_count", 2);
  b.i32s("gemma4.feed_forward_length", l.widths).i32s("gemma4.attention.head_count_kv", l.kv);
  b.f32("gemma4.rope.freq_base", 1000000.0f).f32("gemma4.rope.freq_base_swa", 10000.0f);
  b.f32("gemma4.attention.layer_norm_rms_epsilon", 1e-6f).f32("gemma4.final_logit_softcapping", 30.0f);
  b.u32("gemma4.attention.key_length", 32).u32("gemma4.attention.value_length", 32);
  b.u32("gemma4.attention.key_length_swa", 16).u32("gemma4.attention.value_length_swa", 16);
  b.u32("gemma4.attention.sliding_window", 4).u32("gemma4.attention.shared_kv_layers", 2);
  b.u32("gemma4.embedding_length_per_layer_input", 8).i32s("gemma4.attention.sliding_window_pattern", {1, 1, 0, 1, 0});
  b.u32("gemma4.rope.dimension_count", 32).u32("gemma4.rope.dimension_count_swa", l.rot_swa);
  b.tensor("rope_freqs.weight", {l.rope_freqs.size()}, 0, f32_bytes(l.rope_freqs));
  b.tensor("token_embd.weight", {32, 7}, 0, std::string(32 * 7 * 4, '\0'));
  b.tensor("per_layer_token_embd.weight", {40, 6}, 0, std::string(40 * 6 * 4, '\0'));
  for (int i = 0; i < 3; ++i) {
    const std::string blk = "blk." + std::to_string(i) + ".";
    const uint64_t head = i == 2 ? 32 : 16;
    b.tensor(blk + "attn_k.weight", {32, head}, 0, std::string(32 * head * 4, '\0'));
    if (!(l.k_eq_v && i == 2)) b.tensor(blk + "attn_v.weight", {32, head}, 0, std::string(32 * head * 4, '\0'));
    b.tensor(blk + "attn_k_norm.weight", {head}, 0, std::string(head * 4, '\0'));
  }
  // A layer past the shared boundary that still has keys (a real checkpoint's, which mlx-lm drops).
  b.tensor("blk.3.attn_k.weight", {32, 16}, 0, std::string(32 * 16 * 4, '\0'));
  b.tensor("blk.3.layer_output_scale.weight", {1}, 0, f32_bytes({0.5f}));
  b.tensor("blk.3.inp_gate.weight", {32, 8}, 0, std::string(32 * 8 * 4, '\0'));
  return b;
}

template <typename Error>
std::string error_of(const Parsed& p) {
  try {
    build_model_config(find_architecture(p.file), p.file, p.data());
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(GgufGemma4, RotaryShareFromRopeFreqs) {
  const float quarter[] = {1, 1, 1e30f, 1e30f, 1e30f, 1e30f, 1e30f, 1e30f};
  EXPECT_EQ(gemma4_rotary_factor(quarter, 8), 0.25);
  const float whole[] = {1, 1, 1, 1};
  EXPECT_EQ(gemma4_rotary_factor(whole, 4), 1.0);
  const float gap[] = {1, 1e30f, 1, 1e30f};  // a rotated pair after an unrotated one
  EXPECT_FALSE(gemma4_rotary_factor(gap, 4));
  const float scaled[] = {1, 0.5f, 1e30f, 1e30f};  // a scaled frequency: not proportional RoPE's
  EXPECT_FALSE(gemma4_rotary_factor(scaled, 4));
}

TEST(GgufGemma4, PerLayerTypeConfigFromMetadata) {
  auto p = parse(gemma4());
  const auto& arch = find_architecture(p.file);
  EXPECT_STREQ(arch.model_type, "gemma4_text");
  auto c = build_model_config(arch, p.file, p.data());
  EXPECT_EQ(c["head_dim"], 16);
  EXPECT_EQ(c["global_head_dim"], 32);
  EXPECT_EQ(c["intermediate_size"], 64);
  EXPECT_TRUE(c["use_double_wide_mlp"].get<bool>());
  EXPECT_EQ(c["num_kv_shared_layers"], 2);
  EXPECT_EQ(c["num_key_value_heads"], 1);
  EXPECT_FALSE(c["attention_k_eq_v"].get<bool>());
  EXPECT_TRUE(c["num_global_key_value_heads"].is_null());
  EXPECT_EQ(c["hidden_size_per_layer_input"], 8);
  EXPECT_EQ(c["vocab_size_per_layer_input"], 6);
  EXPECT_EQ(c["vocab_size"], 7);
  EXPECT_EQ(c["sliding_window"], 4);
  EXPECT_EQ(c["final_logit_softcapping"].get<double>(), 30.0);
  EXPECT_EQ(c["layer_types"], nlohmann::ordered_json({"sliding_attention", "sliding_attention", "full_attention",
                                                      "sliding_attention", "full_attention"}));
  const auto& full = c["rope_parameters"]["full_attention"];
  EXPECT_EQ(full["partial_rotary_factor"].get<double>(), 0.25);
  EXPECT_EQ(full["rope_theta"].get<double>(), 1000000.0);
  EXPECT_EQ(full["rope_type"], "proportional");
  EXPECT_EQ(c["rope_parameters"]["sliding_attention"]["rope_theta"].get<double>(), 10000.0);
  EXPECT_EQ(c["rope_parameters"]["sliding_attention"]["rope_type"], "default");
  EXPECT_FALSE(c.contains("rope_theta"));
  EXPECT_TRUE(c["tie_word_embeddings"].get<bool>());
}

TEST(GgufGemma4, FullLayersWithoutValuesShareTheKeyProjection) {
  Layout l;
  l.k_eq_v = true;
  l.kv = {2, 2, 4, 2, 4};
  auto p = parse(gemma4(l));
  auto c = build_model_config(find_architecture(p.file), p.file, p.data());
  EXPECT_TRUE(c["attention_k_eq_v"].get<bool>());
  EXPECT_EQ(c["num_key_value_heads"], 2);
  EXPECT_EQ(c["num_global_key_value_heads"], 4);
}

TEST(GgufGemma4, WhatMlxLmCannotExpressIsRefused) {
  Layout other_kv;
  other_kv.kv = {1, 1, 2, 1, 2};  // full layers' own heads, but with values of their own
  EXPECT_NE(error_of<mlxrt::UnsupportedError>(parse(gemma4(other_kv))).find("attention_k_eq_v"), std::string::npos);
  Layout partial_swa;
  partial_swa.rot_swa = 8;
  EXPECT_NE(error_of<mlxrt::UnsupportedError>(parse(gemma4(partial_swa))).find("rope.dimension_count_swa"),
            std::string::npos);
  Layout widths;
  widths.widths = {64, 64, 64, 96, 96};
  EXPECT_NE(error_of<mlxrt::UnsupportedError>(parse(gemma4(widths))).find("feed_forward_length"), std::string::npos);
  Layout gap;
  gap.rope_freqs[1] = 1e30f;
  EXPECT_NE(error_of<mlxrt::UnsupportedError>(parse(gemma4(gap))).find("rope_freqs"), std::string::npos);
  auto routerless = gemma4();  // experts named, but no layer routes to them
  routerless.u32("gemma4.expert_count", 4).u32("gemma4.expert_used_count", 2);
  EXPECT_NE(error_of<mlxrt::UnsupportedError>(parse(routerless)).find("ffn_gate_inp"), std::string::npos);
}

TEST(GgufGemma4, TensorNames) {
  auto p = parse(gemma4());
  const auto& arch = find_architecture(p.file);
  auto plan = [&](const char* name) { return plan_tensor(arch, p.file, *p.file.find_tensor(name)); };
  EXPECT_FALSE(plan("rope_freqs.weight"));
  EXPECT_FALSE(plan("blk.3.attn_k.weight"));  // a KV-shared layer's keys: mlx-lm drops them
  EXPECT_EQ(plan("blk.2.attn_k.weight")->hf_name, "model.layers.2.self_attn.k_proj.weight");
  EXPECT_EQ(plan("blk.2.attn_k_norm.weight")->hf_name, "model.layers.2.self_attn.k_norm.weight");
  EXPECT_FALSE(plan("blk.2.attn_k_norm.weight")->minus_one);  // Gemma 4 keeps its norms as they are
  EXPECT_TRUE(plan("blk.2.attn_k_norm.weight")->narrow);
  EXPECT_EQ(plan("blk.3.layer_output_scale.weight")->hf_name, "model.layers.3.layer_scalar");
  EXPECT_EQ(plan("blk.3.inp_gate.weight")->hf_name, "model.layers.3.per_layer_input_gate.weight");
  EXPECT_EQ(plan("per_layer_token_embd.weight")->hf_name, "model.embed_tokens_per_layer.weight");
}

TEST(GgufGemma4, RouterScalesAndExperts) {
  auto b = gemma4();
  b.tensor("blk.1.ffn_gate_inp.scale", {32}, 0, std::string(32 * 4, '\0'));
  b.tensor("blk.1.ffn_down_exps.scale", {4}, 0, std::string(4 * 4, '\0'));
  b.tensor("blk.1.ffn_gate_up_exps.weight", {32, 8, 4}, 0, std::string(32 * 8 * 4 * 4, '\0'));
  auto p = parse(b);
  const auto& arch = find_architecture(p.file);
  auto plan = [&](const char* name) { return plan_tensor(arch, p.file, *p.file.find_tensor(name)); };
  EXPECT_EQ(plan("blk.1.ffn_gate_inp.scale")->hf_name, "model.layers.1.router.scale");
  EXPECT_EQ(plan("blk.1.ffn_down_exps.scale")->hf_name, "model.layers.1.router.per_expert_scale");
  EXPECT_EQ(plan("blk.1.ffn_gate_up_exps.weight")->hf_name, "model.layers.1.experts.gate_up_proj.weight");
}

TEST(GgufGemma4, FusedGateUpSplitsAsMlxLmSanitizes) {
  namespace mx = mlx::core;
  auto values = [](std::vector<float> v, mx::Shape shape) { return mx::array(v.begin(), std::move(shape)); };
  // Two experts of width 2 over 3 inputs: rows 0-1 of each expert are the gate, rows 2-3 the up.
  std::unordered_map<std::string, mx::array> arrays;
  arrays.emplace("model.layers.4.experts.gate_up_proj.weight", mx::reshape(mx::arange(24, mx::float32), {2, 4, 3}));
  arrays.emplace("model.layers.4.experts.gate_up_proj.scales", mx::reshape(mx::arange(8, mx::float32), {2, 4, 1}));
  split_gemma4_gate_up(arrays);
  ASSERT_EQ(arrays.size(), 4u);
  const auto& gate = arrays.at("model.layers.4.experts.switch_glu.gate_proj.weight");
  const auto& up = arrays.at("model.layers.4.experts.switch_glu.up_proj.weight");
  EXPECT_EQ(gate.shape(), mx::Shape({2, 2, 3}));
  EXPECT_TRUE(mx::array_equal(gate, values({0, 1, 2, 3, 4, 5, 12, 13, 14, 15, 16, 17}, {2, 2, 3})).item<bool>());
  EXPECT_TRUE(mx::array_equal(up, values({6, 7, 8, 9, 10, 11, 18, 19, 20, 21, 22, 23}, {2, 2, 3})).item<bool>());
  EXPECT_TRUE(mx::array_equal(arrays.at("model.layers.4.experts.switch_glu.up_proj.scales"),
                              values({2, 3, 6, 7}, {2, 2, 1}))
                  .item<bool>());
  EXPECT_EQ(gemma4_gate_up_modules("model.layers.4.experts.gate_up_proj").second,
            "model.layers.4.experts.switch_glu.up_proj");
}

TEST(GgufGemma4, TokenizerIsBpeOverSpacesAsPieces) {
  GgufBuilder b;
  b.str("general.architecture", "gemma4").str("tokenizer.ggml.model", "gemma4");
  b.strings("tokenizer.ggml.tokens", {"<pad>", "<eos>", "<bos>", "<unk>", "\u2581", "a", "\u2581a", "\n", "\n\n"});
  b.i32s("tokenizer.ggml.token_type", {3, 3, 3, 2, 1, 1, 1, 1, 1});
  b.strings("tokenizer.ggml.merges", {"\u2581 a", "\n \n"});
  b.u32("tokenizer.ggml.bos_token_id", 2).u32("tokenizer.ggml.eos_token_id", 1).u32("tokenizer.ggml.unknown_token_id", 3);
  b.boolean("tokenizer.ggml.add_bos_token", false);  // llama.cpp adds BOS for gemma4 all the same
  auto p = parse(b);
  auto files = build_tokenizer_files(p.file);
  const auto& t = files.tokenizer;
  EXPECT_EQ(t["model"]["type"], "BPE");
  EXPECT_TRUE(t["model"]["byte_fallback"].get<bool>());
  EXPECT_EQ(t["model"]["unk_token"], "<unk>");
  EXPECT_EQ(t["model"]["merges"],
            nlohmann::json::array({nlohmann::json::array({"\u2581", "a"}), nlohmann::json::array({"\n", "\n"})}));
  EXPECT_EQ(t["normalizer"]["content"], "\u2581");
  EXPECT_EQ(t["pre_tokenizer"]["pattern"]["Regex"], "[^\\n]+|[\\n]+");
  EXPECT_TRUE(files.tokenizer_config["add_bos_token"].get<bool>());
  EXPECT_EQ(t["post_processor"]["single"][0]["SpecialToken"]["id"], "<bos>");
}
